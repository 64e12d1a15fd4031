#!/usr/bin/env bash
# Nsight Compute counters for a few GEMM variants on one shape (benchmarks/probe_ncu.py), on the
# GPU machine; clocks untouched (--clock-control none). Logs to $LOGS (default ./gpu_check_logs).
#   bash scripts/ncu_probe.sh "bf16 cublas_bf16 fp8_128x128 fp8_128x192 cublas_fp8" [M N K]
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${LOGS:-$PWD/gpu_check_logs}"
mkdir -p "$LOGS"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
variants="$1"
shift
ncu --query-metrics 2> /dev/null | grep -E "^(sm__pipe_tensor|l1tex__data_bank|smsp__average_warps_issue_stalled|sm__cycles_active)" \
    > "$LOGS/ncu_metric_names.txt"
for variant in $variants; do
    echo "== $variant $*" | tee -a "$LOGS/ncu_probe.txt"
    ncu --clock-control none --profile-from-start off --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
        --section SchedulerStats --section WarpStateStats \
        --metrics sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,sm__cycles_elapsed.max \
        python3 benchmarks/probe_ncu.py "$variant" "$@" >> "$LOGS/ncu_probe.txt" 2>&1
    ncu --clock-control none --profile-from-start off \
        --metrics "regex:^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active\.ratio$,regex:^l1tex__data_bank_(reads|writes)\.avg\.pct_of_peak_sustained_elapsed$,regex:^sm__pipe_tensor_op_gmma_cycles_active\.avg\.pct_of_peak_sustained_(active|elapsed)$" \
        python3 benchmarks/probe_ncu.py "$variant" "$@" >> "$LOGS/ncu_probe.txt" 2>&1
done
