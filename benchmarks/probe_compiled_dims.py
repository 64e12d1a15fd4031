"""Does baking N and K into the kernel (compiled_dims="nk", the default) change its speed?
Times the same config with dims baked and at run time, alternating, on large-M shapes.

    python benchmarks/probe_compiled_dims.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dg_triton import testing, validation  # noqa: E402
from dg_triton.heuristics.sm90 import choose_bf16_gemm_config  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm  # noqa: E402


def main():
    for m, n, k in ((4096, 4096, 7168), (4096, 7168, 2048), (4096, 2112, 7168)):
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        problem = validation.bf16_gemm("probe", a, b, d, None)
        config = choose_bf16_gemm_config(m, n, k, 2, 132)
        times = {"nk": [], "": []}
        for _ in range(3):
            for dims in ("nk", ""):
                run = lambda: sm90_bf16_gemm.run("probe", a, b, d, problem[:7], problem[7], False, dims, config)  # noqa: E731
                times[dims].append(testing.bench_graph(run, warmup_ms=10, rep_ms=40))
        print(f"{m}x{n}x{k} {config.block_m}x{config.block_n}: baked nk "
              f"{' '.join(f'{t:.1f}' for t in times['nk'])} us | runtime dims "
              f"{' '.join(f'{t:.1f}' for t in times[''])} us", flush=True)


if __name__ == "__main__":
    main()
