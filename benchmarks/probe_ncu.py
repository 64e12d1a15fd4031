"""One GEMM call of one variant between cudaProfilerStart/Stop, for Nsight Compute counters
(`ncu --profile-from-start off`: only that call's kernel is profiled; warm-up and casts are not).
Used to compare where ours and cuBLAS spend an SM's cycles on the same shape:

    ncu --clock-control none --profile-from-start off --section SpeedOfLight ... \
        python3 benchmarks/probe_ncu.py fp8_128x128 [M N K]

Variants: bf16 (our heuristic config), bf16_BMxBN[_cm2|_cn2] (a forced tile and cluster), cublas_bf16, fp8 (our heuristic config), fp8_1d1d (our
heuristic 1D1D config, fp32 D += c), fp8_BMxBN (a forced 1D2D tile; fp8_BMxBN_cm2 / _cn2 with a
2-CTA cluster along M / N), cublas_fp8 (block-wise torch._scaled_mm). A forced variant may end in
_gG: the L2 group of G block rows (default 8), e.g. bf16_128x256_g16.
k_grouped_fp8_G: k_grouped_fp8_gemm_nt_contiguous with G groups of K each (fp32 D += c, one launch);
its dense yardstick at equal total K is fp8_1d1d with K * G (issue 5's k-grouped criterion), e.g.
`k_grouped_fp8_16 4096 7168 2048` against `fp8_1d1d 4096 7168 32768`.
"""
import dataclasses
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dg_triton  # noqa: E402
from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.kernels import sm90_fp8_gemm  # noqa: E402


def call_for(variant: str, m: int, n: int, k: int):
    group = re.search(r"_g(\d+)$", variant)
    variant = variant.removesuffix(group.group(0)) if group else variant
    with_group = (lambda config: dataclasses.replace(config, group_m=int(group.group(1)))) if group \
        else (lambda config: config)
    if group and variant in ("bf16", "cublas_bf16", "fp8", "fp8_1d1d", "cublas_fp8"):
        raise SystemExit(f"{variant}: _gG applies to forced tiles only (bf16_BMxBN_gG, fp8_BMxBN_gG)")
    if variant.startswith("k_grouped_fp8_"):
        return k_grouped_call(int(variant.removeprefix("k_grouped_fp8_")), m, n, k)
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    if variant == "bf16":
        return lambda: dg_triton.bf16_gemm_nt(a, b, d)
    if variant == "cublas_bf16":
        return lambda: torch.matmul(a, b.T, out=d)
    if variant.startswith("bf16_"):   # bf16_BMxBN[_cm2|_cn2]: a forced BF16 tile and cluster
        from dg_triton import validation
        from dg_triton.kernels import sm90_bf16_gemm
        tile, _, cluster = variant.removeprefix("bf16_").partition("_")
        block_m, block_n = (int(x) for x in tile.split("x"))
        cluster_m, cluster_n = {"": (1, 1), "cm2": (2, 1), "cn2": (1, 2)}[cluster]
        config = with_group(heuristics.make_config(m, n, block_m, block_n, 1, k, 2, 132, cluster_n, cluster_m))
        m_, n_, k_, a_k, b_k, device_index, layout, addresses = validation.bf16_gemm("probe", a, b, d, None)
        problem = (m_, n_, k_, a_k, b_k, device_index, layout)
        return lambda: sm90_bf16_gemm.run("probe", a, b, d, problem, addresses, False, "", config)
    a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
    b_q, sfb = dg_triton.per_block_cast_to_fp8(b, False)
    if variant == "fp8":
        return lambda: dg_triton.fp8_gemm_nt((a_q, sfa), (b_q, sfb), d)
    if variant == "fp8_1d1d":   # the wgrad recipe: 1x128 scales on both, fp32 D += c
        b_t, sfb_t = dg_triton.per_token_cast_to_fp8(b, False, tma_aligned_sf=True)
        d32 = torch.randn(m, n, device="cuda")
        return lambda: dg_triton.fp8_gemm_nt((a_q, sfa), (b_t, sfb_t), d32, c=d32, recipe=(1, 1, 128))
    if variant == "cublas_fp8":
        scale_a, scale_b = sfa.t().contiguous().t(), sfb.t()
        return lambda: torch._scaled_mm(a_q, b_q.t(), scale_a, scale_b, out_dtype=torch.bfloat16)
    # fp8_BMxBN, optionally _cm2 / _cn2: a 2-CTA cluster along M (B shared) or N (A shared)
    tile, _, cluster = variant.removeprefix("fp8_").partition("_")
    block_m, block_n = (int(x) for x in tile.split("x"))
    # _cm2L: the B-sharing cluster with rank 0 multicasting the whole B tile (a probe build)
    cluster_m, cluster_n = {"": (1, 1), "cm2": (2, 1), "cn2": (1, 2), "cm2L": (2, 1)}[cluster]
    defines = ("DG_PROBE_MULTICAST_LEADER",) if cluster == "cm2L" else ()
    config = with_group(heuristics.make_fp8_config("1d2d", m, n, block_m, block_n, 1, k, 2, 132, cluster_n,
                                                   cluster_m))
    layout = (d.dtype, a_q.stride(), b_q.stride(), d.stride(), sfa.stride(), sfb.stride())
    problem = sm90_fp8_gemm.Fp8GemmProblem(m, n, k, "1d2d", d.device.index, None, layout)
    return lambda: sm90_fp8_gemm.run("probe", a_q, sfa, b_q, sfb, d, problem, False, "", config, defines)


def k_grouped_call(num_groups: int, m: int, n: int, k: int):
    """One k_grouped_fp8_gemm_nt_contiguous call: num_groups groups of K = k, d += A_g^T B_g."""
    from dg_triton import reference_k_grouped
    ks = [k] * num_groups
    a = torch.randn(k * num_groups, m, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k * num_groups, n, dtype=torch.bfloat16, device="cuda")
    a_fp8 = reference_k_grouped.k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(a, False), ks)
    b_fp8 = reference_k_grouped.k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(b, False), ks)
    d = torch.randn(num_groups, m, n, device="cuda")
    layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    return lambda: dg_triton.k_grouped_fp8_gemm_nt_contiguous(a_fp8, b_fp8, d, ks, layout, c=d)


def profile_one_call(call, warmups: int = 3):
    """``call`` a few times (compile, caches), then once between cudaProfilerStart/Stop."""
    for _ in range(warmups):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def main():
    variant = sys.argv[1]
    m, n, k = (int(x) for x in (sys.argv[2:5] if len(sys.argv) >= 5 else (4096, 4096, 7168)))
    profile_one_call(call_for(variant, m, n, k))


if __name__ == "__main__":
    main()
