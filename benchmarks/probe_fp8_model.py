"""Probe: the FP8 cost model's overlap speed-up (heuristics.sm90.FP8_OVERLAP_SPEEDUP) - the tiles
the heuristics pick for untuned 1D2D shapes with the current factors against the pre-2026-12-04 ones
(1.13 for every block M), through the public API, each checked against the reference first and
timed in alternation (--rounds rounds of testing.bench_graph, L2 flushed). Shapes whose pick does
not change are listed, not timed. Prints one table; NOTES.md keeps the conclusions.

    python benchmarks/probe_fp8_model.py [--shapes 4096x7168x2112,...] [--rounds 3]
"""
import argparse
import contextlib
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import dg_triton  # noqa: E402
from dg_triton import gemm, testing  # noqa: E402
from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.kernels import sm90_fp8_gemm  # noqa: E402
from fp8_probe_operands import fp8_1d2d_operands  # noqa: E402

# Untuned shapes whose pick the 2026-12-04 factors change (dgrad-like and mid-size M).
SHAPES = ["4096x7168x2112", "2048x7168x2048", "1024x7168x2048", "1024x7168x16384", "512x2112x7168",
          "2112x24576x1536", "2112x7168x16384", "4096x16384x7168", "256x1536x24576"]
FACTORS = {"old": {128: 1.13, 64: 1.13}, "new": dict(heuristics.FP8_OVERLAP_SPEEDUP)}


@contextlib.contextmanager
def factors(name):
    saved = dict(heuristics.FP8_OVERLAP_SPEEDUP)
    heuristics.FP8_OVERLAP_SPEEDUP.update(FACTORS[name])
    gemm._warm_plans.clear()
    sm90_fp8_gemm._plans.clear()
    try:
        yield
    finally:
        heuristics.FP8_OVERLAP_SPEEDUP.update(saved)
        gemm._warm_plans.clear()
        sm90_fp8_gemm._plans.clear()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    lines = ["| shape | old factors | new factors | new / old speed |", "|---|---|---|---|"]
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        ops = fp8_1d2d_operands(m, n, k)
        call = lambda: dg_triton.fp8_gemm_nt((ops.a_q, ops.sfa), (ops.b_q, ops.sfb), ops.d)  # noqa: E731
        names = {}
        for name in FACTORS:
            with factors(name):
                ops.d.fill_(float("nan"))
                call()
                torch.cuda.synchronize()
                diff = float(testing.calc_diff(ops.d.float(), ops.ref))
                assert torch.isfinite(ops.d).all() and diff < 1e-3, f"{shape} {name}: calc_diff {diff}"
                c = list(sm90_fp8_gemm._plans.values())[-1].spec.config
                names[name] = f"{c.block_m}x{c.block_n}s{c.num_stages}" + (f"k{c.num_splits}" if c.num_splits > 1 else "")
        if names["old"] == names["new"]:
            lines.append(f"| {shape} | {names['old']} | (same) | |")
            print(lines[-1], flush=True)
            continue
        times = {name: [] for name in FACTORS}
        for _ in range(args.rounds):
            for name in FACTORS:
                with factors(name):
                    times[name].append(testing.bench_graph(call, warmup_ms=5, rep_ms=30))
        old, new = (statistics.median(times[name]) for name in FACTORS)
        lines.append(f"| {shape} | {names['old']} {old:.1f} us | {names['new']} {new:.1f} us | {old / new:.3f} |")
        print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
