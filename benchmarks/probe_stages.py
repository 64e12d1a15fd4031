"""Probe: the pipeline's stage cap (heuristics.sm90.MAX_STAGES, 8 since the first kernel) against
higher caps, on the shapes whose tiles are small enough for more stages to fit: FP8 1D2D and BF16
at M=64 and M=128, and the masked FP8 decode shapes (expected m 20). Every variant goes through the
public API with the cap patched (MAX_STAGES and with_pipeline_depth's DEEP_PIPELINE_STAGES alike)
and every plan cache cleared, is checked against the reference (NaN-poisoned output), and is timed
in alternation with the others (--rounds rounds of testing.bench_graph, L2 flushed). Prints one
table; NOTES.md keeps the conclusions.

    python benchmarks/probe_stages.py [--caps 8,12,16] [--families fp8,bf16,masked] [--ms 64,128]

Why: a 64-row tile's stage is 16-24 KB, so 8 stages leave up to 100 KB of shared memory unused,
and these shapes are bound by L2 -> SM latency and bandwidth (bytes in flight per SM), not by
the tensor core.
"""
import argparse
import contextlib
import random
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import dg_triton  # noqa: E402
from dg_triton import gemm, testing  # noqa: E402
from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm, sm90_fp8_gemm, sm90_grouped_gemm  # noqa: E402
from fp8_probe_operands import fp8_1d2d_operands  # noqa: E402
from shapes import GROUPED_NK  # noqa: E402

DENSE_NK = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
            (7168, 2048)]


def clear_plans():
    for cache in (gemm._warm_plans, sm90_fp8_gemm._plans, sm90_bf16_gemm._plans,
                  sm90_grouped_gemm._plans, sm90_grouped_gemm._fp8_plans):
        cache.clear()


@contextlib.contextmanager
def stage_cap(cap):
    """Plans made inside use at most `cap` stages (where shared memory allows), whatever
    with_pipeline_depth would give them: both of its caps are patched."""
    saved = heuristics.MAX_STAGES, heuristics.DEEP_PIPELINE_STAGES
    heuristics.MAX_STAGES = heuristics.DEEP_PIPELINE_STAGES = cap
    clear_plans()
    try:
        yield
    finally:
        heuristics.MAX_STAGES, heuristics.DEEP_PIPELINE_STAGES = saved
        clear_plans()


def latest_config(plans):
    config = list(plans.values())[-1].spec.config
    return (f"{config.block_m}x{config.block_n}s{config.num_stages}"
            + (f"k{config.num_splits}" if config.num_splits > 1 else ""))


def dense_variant(family, m, n, k):
    """(call, config name, FLOPs, bytes) of one dense GEMM, checked under the current cap."""
    if family == "fp8":
        ops = fp8_1d2d_operands(m, n, k)
        d, ref, threshold, plans = ops.d, ops.ref, 1e-3, sm90_fp8_gemm._plans
        call = lambda: dg_triton.fp8_gemm_nt((ops.a_q, ops.sfa), (ops.b_q, ops.sfb), d)  # noqa: E731
    else:
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        ref, threshold, plans = a.float() @ b.float().T, 1e-5, sm90_bf16_gemm._plans
        call = lambda: dg_triton.bf16_gemm_nt(a, b, d)  # noqa: E731
    d.fill_(float("nan"))
    call()
    torch.cuda.synchronize()
    diff = float(testing.calc_diff(d.float(), ref))
    assert torch.isfinite(d).all() and diff < threshold, f"{family} {m}x{n}x{k}: calc_diff {diff:.3g}"
    return call, latest_config(plans), 2 * m * n * k, None


def masked_variant(groups, expected, n, k):
    import bench_grouped
    random.seed(1234)   # the same per-group row counts for every cap
    _, _, call, _, flops, nbytes, _, _, _, _ = bench_grouped.fp8_masked_case(groups, expected, n, k)
    return call, latest_config(sm90_grouped_gemm._fp8_plans), flops, nbytes


def measure(label, build, caps, rounds):
    """One table row: each cap that changes the plan, timed in alternation. Every timing plans and
    captures its call under its own cap (bench_graph), so no plan outlives its cap."""
    variants, seen = [], set()
    for cap in caps:
        with stage_cap(cap):
            call, config, flops, nbytes = build()
        if config not in seen:          # else the cap did not change the plan
            seen.add(config)
            variants.append((cap, config, call))
    times = [[] for _ in variants]
    for _ in range(rounds):
        for i, (cap, _, call) in enumerate(variants):
            with stage_cap(cap):
                times[i].append(testing.bench_graph(call, warmup_ms=5, rep_ms=30))
    medians = [statistics.median(t) for t in times]
    cells = []
    for (_, config, _), us in zip(variants, medians):
        rate = f"{nbytes / us / 1e6:.2f} TB/s" if nbytes else f"{flops / us / 1e6:.0f} TFLOPS"
        cells.append(f"{config} {us:.1f} us ({rate}, {medians[0] / us:.3f}x)")
    line = f"| {label} | " + " | ".join(cells) + " |"
    print(line, flush=True)
    return line


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--caps", default="8,12,16")
    parser.add_argument("--families", default="fp8,bf16,masked")
    parser.add_argument("--ms", default="64,128")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    caps = [int(x) for x in args.caps.split(",")]
    lines = ["| case | variants: config, median us (rate, speed-up over the first) |", "|---|---|"]
    for family in args.families.split(","):
        if family == "masked":
            for groups in (32, 6):
                for n, k in GROUPED_NK:
                    lines.append(measure(f"masked {groups}x20 n={n} k={k}",
                                         lambda: masked_variant(groups, 20, n, k), caps, args.rounds))
            continue
        for m in (int(x) for x in args.ms.split(",")):
            for n, k in DENSE_NK:
                lines.append(measure(f"{family} {m}x{n}x{k}", lambda: dense_variant(family, m, n, k),
                                     caps, args.rounds))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
