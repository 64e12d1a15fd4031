"""One call of one prologue kernel (issue 3) between cudaProfilerStart/Stop, for Nsight Compute
counters (`ncu --profile-from-start off`: only that call is profiled, not the warm-up):

    ncu --clock-control none --profile-from-start off --metrics ... \\
        python3 benchmarks/probe_ncu_prologue.py fp4_cast [M]

Variants, at bench_prologue's shapes (M rows of 7168 bf16 columns where it applies): fp4_cast
(per_token_cast_to_fp4, gran 32, packed UE8M0; fp4_cast_compares: the same with the E2M1 index's
lower midpoints by compare and select, as before session 20), fp8_cast (per_token_cast_to_fp8, the
FP8 cast that reaches 0.92 of a copy, for contrast), transpose_fp4 (transpose_packed_fp4 of that cast's output),
swiglu (the fused SwiGLU + FP8 cast on [M, 4096] with routing weights), packed_sf
(get_mn_major_tma_aligned_packed_ue8m0_tensor of [M, 56]), copy_N (an eager copy of N MB).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dg_triton  # noqa: E402
from dg_triton import activation, reference_quant  # noqa: E402
from probe_ncu import profile_one_call  # noqa: E402  (benchmarks/, this script's folder)


def call_for(variant: str, m: int):
    if variant.startswith("copy_"):
        src = torch.empty(int(variant.removeprefix("copy_")) << 20, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    x = torch.randn(m, 7168, dtype=torch.bfloat16, device="cuda")
    if variant == "fp4_cast":
        return lambda: dg_triton.per_token_cast_to_fp4(x, True, 32, True)
    if variant == "fp4_cast_compares":
        from dg_triton.triton.fp4 import per_token_cast_to_fp4_triton
        return lambda: per_token_cast_to_fp4_triton(x, True, 32, True, sat_compares=False)
    if variant == "fp8_cast":
        return lambda: dg_triton.per_token_cast_to_fp8(x, False, tma_aligned_sf=True)
    if variant == "transpose_fp4":
        packed, _ = dg_triton.per_token_cast_to_fp4(x, True, 32, True)
        return lambda: dg_triton.transpose_packed_fp4(packed)
    if variant == "swiglu":
        gate_up = torch.randn(m, 4096, dtype=torch.bfloat16, device="cuda")
        weights = torch.rand(m, device="cuda")
        return lambda: activation.swiglu_per_token_cast_to_fp8(gate_up, routing_weights=weights)
    if variant == "packed_sf":
        sf = reference_quant.ceil_to_ue8m0(torch.rand(m, 56, device="cuda") + 0.5)
        return lambda: dg_triton.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    raise SystemExit(f"unknown variant {variant!r}")


def main():
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    profile_one_call(call_for(sys.argv[1], m))


if __name__ == "__main__":
    main()
