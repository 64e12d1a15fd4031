#!/usr/bin/env bash
# The GPU check (DESIGN.md): on a machine with an SM90 GPU, from a checkout, with no network.
# Installs what the machine lacks from local wheels (.whl/, if present), runs the GPU tests, then
# the benchmarks, and prints a short table last.
#   bash scripts/gpu_check.sh [--sweep] [--skip-tests] [--skip-bench] [--portable]
#                             [--tests=PATTERN] [--bench=LIST] [--tune=FAMILIES]
# --portable   also time the portable Triton GEMMs (DG_BACKEND=triton) on the same shapes.
# --tune=FAMS  first sweep the portable GEMM families, comma-separated (bf16_gemm,fp8_gemm_1d2d,
#              fp8_gemm_1d1d; python -m dg_triton.tune), writing autotune_configs/sm90/*_portable.json
#              (copied into the logs); the portable benchmarks then read them.
# --tests=PATS only the GPU test files whose name contains one of PATS, comma-separated (fp8,swiglu).
# --bench=LIST only these benchmarks, comma-separated: host,prologue,fp8,bf16,grouped,ncu,probe_portable,
#              probe_gemv,probe_c_load (default all but ncu, an Nsight Compute counter profile of the FP8
#              GEMM, benchmarks/ncu_fp8.py; probe_portable, benchmarks/probe_portable.py; probe_gemv, the
#              FP8 and BF16 GEMV against the tensor-core kernels at decode M, benchmarks/probe_gemv.py; and
#              probe_c_load, the accumulating FP8 and BF16 kernels with c loaded under the K loop or at
#              the store, benchmarks/probe_fp8.py / probe_bf16.py --accumulate).
# FP8_BENCH_ARGS extra arguments for bench_gemm.py --family fp8_gemm (e.g. "--sweep --sweep-ms 4096").
# SKIP_MAIN=1 skips `python -m dg_triton` (for a second invocation in the same run).
# Every stage runs under a time limit (STAGE_TIMEOUT seconds, default 300) so that a hang cannot
# take the rest of the run with it. Logs go to $LOGS (default ./gpu_check_logs); after every stage
# they and benchmarks/results/ are packed into $OUT/gpu_check.tgz when $OUT is set (the device
# tool returns at most 8 files), so a run cut off by its limit still returns what it measured.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${LOGS:-$PWD/gpu_check_logs}"
mkdir -p "$LOGS"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/dg_site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/dg_site"
fi
export DG_JIT_CACHE_DIR="${DG_JIT_CACHE_DIR:-$PWD/.jitcache}"
limit="${STAGE_TIMEOUT:-300}"
sweep="" tests=1 bench=1 portable=0 test_pattern="" bench_list="host,prologue,fp8,bf16,grouped" tune=""
for arg in "$@"; do
    case "$arg" in
        --sweep) sweep="--sweep" ;;
        --skip-tests) tests=0 ;;
        --skip-bench) bench=0 ;;
        --portable) portable=1 ;;
        --tests=*) test_pattern="${arg#--tests=}" ;;
        --bench=*) bench_list="${arg#--bench=}" ;;
        --tune=*) tune="${arg#--tune=}" ;;
    esac
done
snapshot() {
    [ -n "${OUT:-}" ] && tar czf "$OUT/gpu_check.tgz" -C "$PWD" "$(basename "$LOGS")" benchmarks/results 2>/dev/null
    return 0
}
# run_stage NAME LOGFILE TAIL_LINES COMMAND...: the command under the time limit, its whole output
# in LOGFILE, the last lines on the console; a failure or time-out marks the run failed.
status=0
summary=()
run_stage() {
    local name="$1" log="$2" lines="$3"
    shift 3
    local start=$SECONDS
    # OUT unset: the benchmarks would copy their results there too, and the device tool returns
    # at most 8 files; everything reaches $OUT in the one archive instead.
    timeout --kill-after=10 "$limit" env -u OUT "$@" > "$log" 2>&1
    local rc=$?
    tail -n "$lines" "$log"
    summary+=("$(printf '%-44s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")")
    [ "$rc" = 0 ] || status=1
    snapshot
}
wants() { [[ ",$bench_list," == *",$1,"* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader \
    | tee "$LOGS/gpu.txt"
[ -n "${SKIP_MAIN:-}" ] || run_stage "python -m dg_triton" "$LOGS/main.txt" 5 python3 -m dg_triton
for family in ${tune//,/ }; do
    run_stage "tune $family" "$LOGS/tune_$family.txt" 3 python3 -m dg_triton.tune "$family"
    cp autotune_configs/sm90/"$family"_portable.json "$LOGS/" 2>/dev/null
    snapshot
done
if [ "$tests" = 1 ]; then
    # One pytest process per file, failures listed (-rf): a file that fails or runs out of GPU
    # memory cannot hide another's result. -n 8 for the GEMM tests, which compile many kernel
    # variants (CPU work that parallelizes); -n 4 for the memory-heavy prologue tests (8 workers'
    # caching allocators at once can exhaust the GPU's memory).
    for file in $(grep -l "mark.gpu" tests/test_*.py); do
        if [ -n "$test_pattern" ]; then
            hit=0
            for pattern in ${test_pattern//,/ }; do [[ "$file" == *"$pattern"* ]] && hit=1; done
            [ "$hit" = 1 ] || continue
        fi
        workers=4
        case "$file" in *gemm*|*grouped*) workers=8 ;; esac
        echo "== $file"
        run_stage "$file" "$LOGS/$(basename "$file" .py).txt" 6 \
            python3 -m pytest -q -m gpu "$file" -p no:cacheprovider -n "$workers" -rf --tb=short \
            -W ignore::DeprecationWarning
    done
fi
if [ "$bench" = 1 ]; then
    wants host && run_stage "profile_host" "$LOGS/host_profile.txt" 20 python3 benchmarks/profile_host.py
    # The probes first: they are short, and a run cut off by its limit keeps them.
    if wants probe_gemv; then
        run_stage "probe_gemv fp8" "$LOGS/probe_gemv.txt" 40 python3 benchmarks/probe_gemv.py
        run_stage "probe_gemv bf16" "$LOGS/probe_gemv_bf16.txt" 40 python3 benchmarks/probe_gemv.py --dtype bf16
    fi
    wants probe_c_load && run_stage "probe_c_load" "$LOGS/probe_c_load.txt" 16 \
        python3 benchmarks/probe_fp8.py --kinds 1d1d --accumulate --bitwise --variants ",DG_PROBE_LATE_C_LOAD" \
        --block-ns 112,128,144 --shapes 4096x4096x7168,7168x4096x2048,32768x4096x512,7168x4096x16384
    wants probe_c_load && run_stage "probe_c_load bf16" "$LOGS/probe_c_load_bf16.txt" 12 \
        python3 benchmarks/probe_bf16.py --accumulate --bitwise --variants ",DG_PROBE_EARLY_C_LOAD" \
        --shapes 4096x4096x7168,4096x7168x2048,4096x32768x512,4096x2112x7168
    wants prologue && run_stage "bench_prologue" "$LOGS/bench_prologue.txt" 40 python3 benchmarks/bench_prologue.py
    # A sweep first compiles its binaries on every core (one after another inside the sweep they
    # took most of a 400 s run, 2026-12-02).
    # shellcheck disable=SC2086
    if wants fp8 && [[ " ${FP8_BENCH_ARGS:-} " == *" --sweep "* ]]; then
        run_stage "prebuild_sweep" "$LOGS/prebuild_sweep.txt" 2 python3 benchmarks/prebuild_sweep.py ${FP8_BENCH_ARGS}
    fi
    # shellcheck disable=SC2086
    wants fp8 && run_stage "bench_gemm fp8" "$LOGS/bench_fp8.txt" 14 \
        python3 benchmarks/bench_gemm.py --family fp8_gemm ${FP8_BENCH_ARGS:-}
    wants bf16 && run_stage "bench_gemm bf16" "$LOGS/bench_bf16.txt" 45 \
        python3 benchmarks/bench_gemm.py --family bf16_gemm $sweep
    if wants grouped && [ -f benchmarks/bench_grouped.py ]; then
        run_stage "bench_grouped" "$LOGS/bench_grouped.txt" 30 python3 benchmarks/bench_grouped.py
    fi
    wants probe_portable && run_stage "probe_portable" "$LOGS/probe_portable.txt" 20 \
        python3 benchmarks/probe_portable.py
    if wants ncu && command -v ncu > /dev/null; then
        # --clock-control none: the clocks stay as the card runs them (METHOD.md); the first two
        # FP8 launches are the warm-up.
        run_stage "ncu fp8" "$LOGS/ncu_fp8.txt" 60 ncu --clock-control none --section SpeedOfLight \
            --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis \
            -k regex:sm90_fp8 --launch-skip 2 -c 2 python3 benchmarks/ncu_fp8.py
    fi
    if [ "$portable" = 1 ]; then
        for family in fp8_gemm bf16_gemm; do
            run_stage "bench_gemm $family portable" "$LOGS/bench_${family}_portable.txt" 8 \
                python3 benchmarks/bench_gemm.py --family $family --backend triton --ms 4096,128,64
        done
    fi
fi
echo
echo "== stages"
printf '%s\n' "${summary[@]}" | tee -a "$LOGS/summary.txt"
snapshot
exit $status
