"""Compiles, in parallel processes, every FP8 kernel binary that `bench_gemm.py --family fp8_gemm
--sweep` will time, into DG_JIT_CACHE_DIR, so that the sweep on the GPU host spends its minutes
timing rather than compiling one binary after another (2026-12-02: a sweep of M=128/64/1 finished
two shapes in 400 s, compiling as it went; benchmarks/NOTES.md, session 12). Needs no GPU: run it
on the GPU host before the sweep (scripts/gpu_check.sh does when FP8_BENCH_ARGS has --sweep), or
here, and carry the cache (the key does not depend on where the headers live).

    python benchmarks/prebuild_sweep.py [--sweep-ms 128,64,1] [--jobs N]
"""
import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_gemm import NK_PAIRS, fp8_sweep_configs  # noqa: E402
from dg_triton.kernels import sm90_fp8_gemm  # noqa: E402
from dg_triton.kernels.sm90_fp8_gemm import Fp8GemmKernelSpec  # noqa: E402


def sweep_specs(ms) -> list[Fp8GemmKernelSpec]:
    """One spec per distinct binary (the sweep passes no compiled dims, so shapes share them)."""
    specs = {}
    for m in ms:
        for n, k in NK_PAIRS:
            for config in fp8_sweep_configs(m, n, k, "1d2d", 2):
                spec = Fp8GemmKernelSpec(config, False, torch.bfloat16, False)
                specs.setdefault(spec.source(), spec)
    return list(specs.values())


def _compile(spec: Fp8GemmKernelSpec) -> tuple[str, float]:
    start = time.perf_counter()
    sm90_fp8_gemm.compile_spec(spec)
    return spec.name, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep-ms", default="4096,128,64")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    # bench_gemm's other arguments may come along (scripts/gpu_check.sh passes FP8_BENCH_ARGS)
    args, _ = parser.parse_known_args()
    specs = sweep_specs([int(x) for x in args.sweep_ms.split(",")])
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for name, seconds in pool.map(_compile, specs):
            print(f"    {name}: {seconds:.1f} s", flush=True)
    print(f"{len(specs)} binaries in {time.perf_counter() - start:.0f} s with {args.jobs} jobs "
          f"into {os.environ.get('DG_JIT_CACHE_DIR', 'the default cache')}")


if __name__ == "__main__":
    main()
