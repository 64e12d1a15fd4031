#!/usr/bin/env bash
# The GPU check (DESIGN.md): on a machine with an SM90 GPU, from a checkout, with no network.
# Installs what the machine lacks from local wheels (.whl/, if present), runs the GPU tests, then
# the benchmarks, and prints a short table last. Logs go to $OUT (or ./gpu_check_logs).
#   bash scripts/gpu_check.sh [--sweep] [--skip-tests] [--skip-bench] [--portable]
# --portable also times the portable Triton GEMMs (DG_BACKEND=triton) on the same shapes.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${OUT:-$PWD/gpu_check_logs}"
mkdir -p "$LOGS"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/dg_site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/dg_site"
fi
export DG_JIT_CACHE_DIR="${DG_JIT_CACHE_DIR:-$PWD/.jitcache}"
sweep="" tests=1 bench=1 portable=0
for arg in "$@"; do
    case "$arg" in
        --sweep) sweep="--sweep" ;;
        --skip-tests) tests=0 ;;
        --skip-bench) bench=0 ;;
        --portable) portable=1 ;;
    esac
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader | tee "$LOGS/gpu.txt"
python3 -m dg_triton 2>&1 | tee "$LOGS/main.txt" | tail -5
status=0
if [ "$tests" = 1 ]; then
    # One pytest process per file, failures listed (-rf): a file that fails or runs out of GPU
    # memory cannot hide another's result. -n 8 for the GEMM tests, which compile many kernel
    # variants (CPU work that parallelizes); -n 4 for the memory-heavy prologue tests (8 workers'
    # caching allocators at once can exhaust the GPU's memory).
    : > "$LOGS/gpu_tests.txt"
    for file in $(grep -l "mark.gpu" tests/test_*.py); do
        workers=4
        case "$file" in *gemm*) workers=8 ;; esac
        echo "== $file" | tee -a "$LOGS/gpu_tests.txt"
        python3 -m pytest -q -m gpu "$file" -p no:cacheprovider -n "$workers" -rf --tb=short \
            -W ignore::DeprecationWarning 2>&1 | tee -a "$LOGS/gpu_tests.txt" | tail -8
        [ "${PIPESTATUS[0]}" = 0 ] || status=1
    done
fi
if [ "$bench" = 1 ]; then
    python3 benchmarks/profile_host.py 2>&1 | tee "$LOGS/host_profile.txt" | tail -20
    python3 benchmarks/bench_prologue.py 2>&1 | tee "$LOGS/bench_prologue.txt" | tail -30
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    python3 benchmarks/bench_gemm.py --family fp8_gemm 2>&1 | tee "$LOGS/bench_fp8.txt" | tail -12
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    python3 benchmarks/bench_gemm.py --family bf16_gemm $sweep 2>&1 | tee "$LOGS/bench.txt" | tail -45
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    if [ "$portable" = 1 ]; then
        for family in fp8_gemm bf16_gemm; do
            python3 benchmarks/bench_gemm.py --family $family --backend triton --ms 4096,128,64 2>&1 \
                | tee "$LOGS/bench_${family}_portable.txt" | tail -8
            [ "${PIPESTATUS[0]}" = 0 ] || status=1
        done
    fi
fi
exit $status
