"""Where the host time of one warm bf16_gemm_nt call goes (CPU microseconds per step, medians of
bursts, as ANCHORS.md measures host overhead). Run on the GPU machine:

    python benchmarks/profile_host.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dg_triton  # noqa: E402
from dg_triton import dispatch, settings, testing, validation  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm  # noqa: E402


def main():
    for m, n, k in ((1, 256, 256), (64, 2112, 7168)):
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        dg_triton.bf16_gemm_nt(a, b, d)
        plan = next(p for key, p in sm90_bf16_gemm._plans.items() if key[0][:3] == (m, n, k))
        problem = validation.bf16_gemm("bf16_gemm_nt", a, b, d, None)
        key_parts = (problem[:7], False, "nk", settings._plan_settings, None)
        a_ptr, b_ptr, d_ptr = problem[7]
        # a split-K plan's scalars carry the workspace of the stream it runs on (here stream 0)
        scalars = plan.scalars if plan.split is None else plan.split.scalars(plan.scalars, 0)
        steps = {
            "whole call": lambda: dg_triton.bf16_gemm_nt(a, b, d),
            "validation": lambda: validation.bf16_gemm("bf16_gemm_nt", a, b, d, None),
            "dispatch": lambda: dispatch.backend_of("bf16_gemm_nt", d, 0, (dispatch.SM90,)),
            "plan lookup": lambda: sm90_bf16_gemm._plans.get(key_parts),
            "3 descriptors": lambda: (plan.tma_a(a_ptr), plan.tma_b(b_ptr), plan.tma_d(d_ptr)),
            "current stream": lambda: sm90_bf16_gemm._current_stream(0),
            "launcher call": lambda: plan.launcher(0, (plan.tma_a(a_ptr), plan.tma_b(b_ptr),
                                                       plan.tma_d(d_ptr)), *scalars, d_ptr),
            "torch.matmul": lambda: torch.matmul(a, b.T, out=d),
        }
        print(f"m={m} n={n} k={k} ({plan.spec.name}):")
        for name, fn in steps.items():
            print(f"  {name:<20} {testing.host_overhead_us(fn, calls=200, repeats=7):6.2f} us")


if __name__ == "__main__":
    main()
