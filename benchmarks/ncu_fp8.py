"""One FP8 GEMM call per recipe on a large shape, for a hardware-counter profile under Nsight
Compute (the device machine's Firecracker runtime lets ncu read the counters; never change the
clocks, hence --clock-control none):

    ncu --clock-control none --section SpeedOfLight --section SchedulerStats \
        --section WarpStateStats -k regex:sm90_fp8 -c 2 python3 benchmarks/ncu_fp8.py

The first call of each recipe compiles and warms up outside the profiled kernels (-c counts the
kernels ncu profiles; the warm-up launches come first, so pass --launch-skip to skip them).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dg_triton  # noqa: E402


def main():
    m, n, k = (int(x) for x in (sys.argv[1:4] if len(sys.argv) >= 4 else (4096, 4096, 7168)))
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_fp8 = dg_triton.per_token_cast_to_fp8(a, False)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    b_block = dg_triton.per_block_cast_to_fp8(b, False)
    d32 = torch.zeros(m, n, device="cuda")
    b_token = dg_triton.per_token_cast_to_fp8(b, False)
    for _ in range(2):  # warm-up, then the profiled call
        dg_triton.fp8_gemm_nt(a_fp8, b_block, d)
        dg_triton.fp8_gemm_nt(a_fp8, b_token, d32, c=d32, recipe=(1, 1, 128))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
