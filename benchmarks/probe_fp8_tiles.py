"""Probe: forced FP8 1D2D tiles on a few shapes, beside the heuristics' pick and cuBLAS block-wise
`torch._scaled_mm`, each checked against the reference (calc_diff < 1e-3, NaN-poisoned output)
and timed in alternation (--rounds rounds, CUDA-graph replay, L2 flushed). For re-checking tuned
entries one shape at a time, where bench_gemm.py --sweep would time every candidate of every shape.

    python benchmarks/probe_fp8_tiles.py --shapes 64x24576x1536,64x32768x512 \\
        --configs 64x96,64x128,64x192,64x96k2 [--rounds 3]
    python benchmarks/probe_fp8_tiles.py ... --prebuild   # compile them (no GPU) into DG_JIT_CACHE_DIR

A config is BMxBN, optionally sS for S pipeline stages (up to what fits beside the narrowest
epilogue staging), kS for S K-slices (split-K), then n2 or m2 for a 2-CTA cluster along
N (sharing A by TMA multicast) or along M (sharing B). Compiled dims as the API's ("nk").
"""
import argparse
import dataclasses
import os
import re
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.kernels import sm90_fp8_gemm  # noqa: E402

NUM_SMS = 132


def configs_for(m, n, k, names):
    """(name, config) of the heuristics' pick and of every named config that fits the shape."""
    pick = heuristics.choose_fp8_gemm_config(m, n, k, 2, NUM_SMS)
    configs = [("pick", pick)]
    for name in names:
        block_m, block_n, stages, splits, axis = re.fullmatch(
            r"(\d+)x(\d+)(?:s(\d+))?(?:k(\d+))?(?:([nm])2)?", name).groups()
        config = heuristics.make_fp8_config("1d2d", m, n, int(block_m), int(block_n), int(splits or 1),
                                            k, 2, NUM_SMS, 2 if axis == "n" else 1,
                                            2 if axis == "m" else 1)
        if config is not None and stages:
            fits = heuristics.max_stages(int(block_m), int(block_n), 2, int(splits or 1) > 1,
                                         heuristics.fp8_scale_stage_bytes("1d2d", int(block_m), int(block_n)),
                                         cap=int(stages), narrow_staging=True)
            config = dataclasses.replace(config, num_stages=int(stages)) if fits == int(stages) else None
        if config is None or config.num_splits != int(splits or 1):
            print(f"{m}x{n}x{k} {name}: does not fit, left out", flush=True)
            continue
        if config != pick:
            configs.append((name, config))
    return configs


def prebuild(shapes, names):
    specs = {}
    for m, n, k in shapes:
        for _, config in configs_for(m, n, k, names):
            spec = sm90_fp8_gemm.Fp8GemmKernelSpec(config, False, torch.bfloat16, False, 0, n, k)
            specs.setdefault(spec.source(), spec)
    for spec in specs.values():
        sm90_fp8_gemm.compile_spec(spec)
        print(f"    built {spec.name}", flush=True)
    print(f"{len(specs)} binaries into {os.environ.get('DG_JIT_CACHE_DIR', 'the default cache')}")


def measure(shapes, names, rounds):
    from dg_triton import testing
    from fp8_probe_operands import fp8_1d2d_operands
    lines = ["| shape | config | us | TFLOPS | vs pick | vs cuBLAS |", "|---|---|---|---|---|---|"]
    for m, n, k in shapes:
        ops = fp8_1d2d_operands(m, n, k)
        d, ref = ops.d, ops.ref
        configs = configs_for(m, n, k, names)
        runs = [lambda c=c: ops.run(c, "nk") for _, c in configs]
        for (name, _), run in zip(configs, runs):
            d.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            diff = float(testing.calc_diff(d.float(), ref))
            assert torch.isfinite(d).all() and diff < 1e-3, f"{m}x{n}x{k} {name}: calc_diff {diff:.3g}"
        runs.append(ops.cublas_blockwise())
        times = [[] for _ in runs]
        for _ in range(rounds):
            for i, run in enumerate(runs):
                times[i].append(testing.bench_graph(run, warmup_ms=5, rep_ms=30))
        medians = [statistics.median(t) for t in times]
        for (name, config), us in zip(configs, medians):
            label = (f"{name} ({config.block_m}x{config.block_n}"
                     + (f" k{config.num_splits}" if config.num_splits > 1 else "")
                     + (f" cluster {config.cluster_m}x{config.cluster_n}" if config.cluster_size > 1
                        else "") + ")")
            lines.append(f"| {m}x{n}x{k} | {label} | {us:.1f} | {2 * m * n * k / us / 1e6:.0f} | "
                         f"{medians[0] / us:.3f} | {medians[-1] / us:.3f} |")
            print(lines[-1], flush=True)
        lines.append(f"| {m}x{n}x{k} | cuBLAS block-wise | {medians[-1]:.1f} | - | - | 1.000 |")
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", required=True, help="comma-separated MxNxK")
    parser.add_argument("--configs", required=True, help="comma-separated BMxBN[kS]")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prebuild", action="store_true", help="compile only (no GPU needed)")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    names = args.configs.split(",")
    if args.prebuild:
        prebuild(shapes, names)
    else:
        measure(shapes, names, args.rounds)


if __name__ == "__main__":
    main()
