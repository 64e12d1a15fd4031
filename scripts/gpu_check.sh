#!/usr/bin/env bash
# The GPU check (DESIGN.md): on a machine with an SM90 GPU, from a checkout, with no network.
# Installs what the machine lacks from local wheels (.whl/, if present), runs the GPU tests, then
# the benchmarks, and prints a short table last. Logs go to $OUT (or ./gpu_check_logs).
#   bash scripts/gpu_check.sh [--sweep] [--skip-tests] [--skip-bench]
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
sweep="" tests=1 bench=1
for arg in "$@"; do
    case "$arg" in
        --sweep) sweep="--sweep" ;;
        --skip-tests) tests=0 ;;
        --skip-bench) bench=0 ;;
    esac
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader | tee "$LOGS/gpu.txt"
python3 -m dg_triton 2>&1 | tee "$LOGS/main.txt" | tail -5
status=0
if [ "$tests" = 1 ]; then
    # -n 8: the tests compile many kernel variants; compiling is CPU work that parallelizes.
    python3 -m pytest -q -m gpu tests -p no:cacheprovider -n 8 --maxfail=20 2>&1 | tee "$LOGS/gpu_tests.txt" | tail -15
    status=${PIPESTATUS[0]}
fi
if [ "$bench" = 1 ]; then
    python3 benchmarks/profile_host.py 2>&1 | tee "$LOGS/host_profile.txt" | tail -20
    python3 benchmarks/bench_gemm.py --family bf16_gemm $sweep 2>&1 | tee "$LOGS/bench.txt" | tail -45
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit $status
