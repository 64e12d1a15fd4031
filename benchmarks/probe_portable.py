"""Probe: the portable Triton GEMMs' operand paths (TMA descriptors vs pointers and masks) and
split-K, on a few API.md 8 shapes and configs, each checked against the reference and timed from a
CUDA graph (testing.bench_graph) beside cuBLAS in the same run. Prints one table; NOTES.md keeps
the conclusions.

    python benchmarks/probe_portable.py
"""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dg_triton  # noqa: E402
from dg_triton import reference_fp8, testing  # noqa: E402
from dg_triton.portable import PortableGemmConfig, config_name  # noqa: E402
from dg_triton.triton import gemm_portable  # noqa: E402
from dg_triton.utils.layout import get_mn_major_tma_aligned_tensor  # noqa: E402

# (family, (m, n, k), configs): the tiles the old defaults and vLLM's H200 table use, split-K
# where the output tiles are few.
CASES = [
    ("fp8", (4096, 2112, 7168), [PortableGemmConfig(64, 256, 128, 8, 8, 3), PortableGemmConfig(64, 128, 128, 8, 4, 3),
                                 PortableGemmConfig(128, 128, 128, 8, 8, 3)]),
    ("fp8", (4096, 7168, 2048), [PortableGemmConfig(64, 128, 128, 8, 4, 3), PortableGemmConfig(128, 128, 128, 8, 8, 3)]),
    ("fp8", (64, 2112, 7168), [PortableGemmConfig(64, 128, 128, 8, 4, 4), PortableGemmConfig(64, 64, 128, 8, 4, 4, 4),
                               PortableGemmConfig(64, 128, 128, 8, 4, 4, 4)]),
    ("bf16", (4096, 2112, 7168), [PortableGemmConfig(128, 256, 64, 8, 8, 3), PortableGemmConfig(128, 128, 64, 8, 8, 4)]),
    ("bf16", (4096, 4096, 7168), [PortableGemmConfig(128, 256, 64, 8, 8, 3), PortableGemmConfig(128, 128, 64, 8, 8, 4)]),
    ("bf16", (128, 4096, 7168), [PortableGemmConfig(64, 128, 64, 8, 4, 4), PortableGemmConfig(64, 128, 64, 8, 4, 4, 4)]),
]


def _problem(family, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    if family == "bf16":
        return (lambda config, tma: gemm_portable.bf16_gemm("probe", a, b, d, False, config, use_tma=tma),
                d, a.float() @ b.float().T, lambda: torch.matmul(a, b.T), 1e-5)
    a_fp8 = dg_triton.per_token_cast_to_fp8(a, False)
    b_fp8 = dg_triton.per_block_cast_to_fp8(b, False)
    sfa = get_mn_major_tma_aligned_tensor(a_fp8[1])
    sfa_cublas, sfb_cublas = a_fp8[1], b_fp8[1]  # torch._scaled_mm's block-wise layouts
    scale_a = sfa_cublas.T.contiguous().T
    reference = reference_fp8.fp8_gemm_reference(a_fp8, b_fp8, d).float()

    def cublas():
        return torch._scaled_mm(a_fp8[0], b_fp8[0].T, scale_a, sfb_cublas.T, out_dtype=torch.bfloat16)

    return (lambda config, tma: gemm_portable.fp8_gemm("probe", a_fp8[0], sfa, b_fp8[0], b_fp8[1], d, "1d2d",
                                                       False, config=config, use_tma=tma),
            d, reference, cublas, 1e-3)


def main() -> int:
    lines = ["| family | M | N | K | config | TMA us | pointers us | TMA TFLOPS | cuBLAS us | TMA vs cuBLAS |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    failures = 0
    for family, (m, n, k), configs in CASES:
        run, d, reference, cublas, threshold = _problem(family, m, n, k)
        try:
            cublas_us = testing.bench_graph(cublas)
        except RuntimeError as error:  # e.g. a cuBLAS build without block-wise FP8
            print(f"cuBLAS baseline failed for {family} {m}x{n}x{k}: {error}")
            cublas_us = float("nan")
        for config in configs:
            times = {}
            for tma in (True, False):
                d.fill_(float("nan"))
                run(config, tma)
                torch.cuda.synchronize()
                diff = float(testing.calc_diff(d.float(), reference))
                if not diff < threshold:
                    print(f"FAIL {family} {m}x{n}x{k} {config_name(config)} tma={tma}: calc_diff {diff:.3g}")
                    failures += 1
                times[tma] = testing.bench_graph(lambda config=config, tma=tma: run(config, tma))
            tflops = 2 * m * n * k / times[True] / 1e6
            lines.append(f"| {family} | {m} | {n} | {k} | {config_name(config)} | {times[True]:.1f} | "
                         f"{times[False]:.1f} | {tflops:.0f} | {cublas_us:.1f} | {cublas_us / times[True]:.3f} |")
            print(lines[-1], flush=True)
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
