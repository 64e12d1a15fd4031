"""Is the M=4096 gap to cuBLAS the last, partly filled wave? Times ours and cuBLAS (alternating)
on shapes whose tile count is a fraction of a wave and on neighbours with whole waves, and lists
the cuBLAS kernel each shape runs (its name carries tile, cluster and split strategy).

    python benchmarks/probe_waves.py
"""
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dg_triton
from dg_triton import testing
from dg_triton.heuristics.sm90 import choose_bf16_gemm_config

SHAPES = ((4096, 4096, 7168), (4224, 4096, 7168), (4096, 7168, 2048), (4224, 7168, 2048),
          (4096, 2112, 7168), (4096, 576, 7168), (4096, 32768, 512), (4096, 7168, 16384))


def cublas_kernel_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})


def main():
    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        config = choose_bf16_gemm_config(m, n, k, 2, 132)
        ours, theirs = [], []
        ours_fn = functools.partial(dg_triton.bf16_gemm_nt, a, b, d)
        cublas_fn = functools.partial(torch.matmul, a, b.t())
        for _ in range(3):
            ours.append(testing.bench_graph(ours_fn, 10, 50))
            theirs.append(testing.bench_graph(cublas_fn, 10, 50))
        ours_us, theirs_us = sorted(ours)[1], sorted(theirs)[1]
        tiles = -(-m // config.block_m) * -(-n // config.block_n)
        names = cublas_kernel_names(cublas_fn)
        flops = 2 * m * n * k
        rows.append((f"{m}x{n}x{k}", f"{config.block_m}x{config.block_n}", f"{tiles / 132:.2f}",
                     f"{ours_us:.1f}", f"{flops / ours_us / 1e6:.0f}", f"{theirs_us:.1f}",
                     f"{flops / theirs_us / 1e6:.0f}", f"{theirs_us / ours_us:.3f}"))
        print(m, n, k, "cuBLAS kernels:", names, flush=True)
    print("| shape | ours tile | waves | ours us | TFLOPS | cuBLAS us | TFLOPS | vs cuBLAS |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
