"""Probe: forced tiles and probe builds for the M-grouped GEMMs on the ANCHORS.md grouped shapes,
beside the tile the heuristics choose.

FP8 (contiguous and masked): each variant's plan is made with choose_m_grouped_fp8_config patched
to return that tile (block M and N given, the most stages that fit, the chosen grid; "64xBNc" a
column-split tile, fp8_gemm.cuh kSplitColumns, "64xBNcsS" one with S stages), checked
against the reference inside bench_grouped's case (NaN-poisoned output). BF16 (--family bf16,
masked only): the heuristics' tile, checked against the reference here. A variant "TILE+MACRO[+MACRO]"
(e.g. "chosen+FFMA_YIELD_FRONT") also compiles the kernel with DG_PROBE_MACRO defined. The variants
are timed in alternation (--rounds rounds of testing.bench_graph, L2 flushed); the random group
sizes are drawn from the same seed for every variant. Prints one table; NOTES.md keeps the
conclusions.

    python benchmarks/probe_grouped_tiles.py [--family fp8|bf16] [--layouts contiguous,masked]
                                             [--tiles 128x128,128x192,chosen+MACRO]
                                             [--masked-gm 32x192,6x1024] [--rounds 3]
"""
import argparse
import contextlib
import functools
import random
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import bench_grouped  # noqa: E402
import dg_triton  # noqa: E402
from dg_triton import reference_grouped, testing  # noqa: E402
from dg_triton.heuristics.sm90 import (_grid_within_tiles, make_fp8_config,  # noqa: E402
                                       make_fp8_split_columns_config)
from dg_triton.kernels import sm90_grouped_gemm  # noqa: E402
from shapes import GROUPED_CONTIGUOUS_GM, GROUPED_NK  # noqa: E402

CHOSEN = "chosen"


def split_variant(variant):
    """"TILE+MACRO+..." -> (TILE, (DG_PROBE_MACRO, ...))."""
    tile, *macros = variant.split("+")
    return tile, tuple(f"DG_PROBE_{m}" for m in macros)


@contextlib.contextmanager
def forced_variant(variant):
    """Grouped plans made inside use the variant's tile ("BMxBN", FP8 only) or the heuristics'
    choice (CHOSEN), compiled with the variant's probe macros."""
    tile, defines = split_variant(variant)
    original = sm90_grouped_gemm.choose_m_grouped_fp8_config
    specs = (sm90_grouped_gemm.GroupedFp8GemmKernelSpec, sm90_grouped_gemm.GroupedGemmKernelSpec)

    def forced(kind, num_groups, rows_per_group, rows, n, k, num_sms, mk_alignment=None):
        config = original(kind, num_groups, rows_per_group, rows, n, k, num_sms, mk_alignment)
        block_m, block_n, split, stages = re.fullmatch(r"(\d+)x(\d+)(c)?(?:s(\d+))?", tile).groups()
        block_m, block_n = int(block_m), int(block_n)
        if (split and block_m != 64) or (stages and not split):
            raise ValueError(f"tile {tile!r}: column-split tiles are 64xBNc[sS]; others take no stage count")
        if split:
            made = make_fp8_split_columns_config(block_n, num_sms, int(stages) if stages else None)
            return _grid_within_tiles(made, num_groups, rows, n, num_sms) if made is not None else None
        made = make_fp8_config("1d2d", block_m, n, block_m, block_n, 1, k, 2, num_sms)
        return replace(made, num_sms=config.num_sms) if made is not None else None

    if tile != CHOSEN:
        sm90_grouped_gemm.choose_m_grouped_fp8_config = forced
    if defines:
        sm90_grouped_gemm.GroupedFp8GemmKernelSpec = functools.partial(specs[0], probe_defines=defines)
        sm90_grouped_gemm.GroupedGemmKernelSpec = functools.partial(specs[1], probe_defines=defines)
    sm90_grouped_gemm._fp8_plans.clear()
    sm90_grouped_gemm._plans.clear()
    try:
        yield
    finally:
        sm90_grouped_gemm.choose_m_grouped_fp8_config = original
        sm90_grouped_gemm.GroupedFp8GemmKernelSpec, sm90_grouped_gemm.GroupedGemmKernelSpec = specs
        sm90_grouped_gemm._fp8_plans.clear()
        sm90_grouped_gemm._plans.clear()


def bf16_masked_case(groups, expected, n, k):
    """bench_grouped.masked_case's problem, returned untimed: (call, FLOPs)."""
    max_m = bench_grouped.GROUPED_MASKED_MAX_M
    counts = [min(max_m, int(expected * random.uniform(0.7, 1.3))) for _ in range(groups)]
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    a = torch.randn(groups, max_m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(groups, n, k, dtype=torch.bfloat16, device="cuda")
    d = torch.full((groups, max_m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    call = lambda: dg_triton.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, int(expected * 1.2))  # noqa: E731
    call()
    torch.cuda.synchronize()
    meaningful = reference_grouped.masked_meaningful_rows(masked_m, max_m)
    bench_grouped.check_rows(d, reference_grouped.m_grouped_masked_reference(a, b, d, masked_m), meaningful,
                             f"bf16 masked G={groups} m={expected} n={n} k={k}")
    if not torch.isnan(d[~meaningful].float()).all():
        raise AssertionError("bf16 masked: rows at or past masked_m were written")
    return call, 2 * sum(counts) * n * k


def build(family, layout, groups, expected, n, k):
    random.seed(1234)
    torch.manual_seed(1234)
    if family == "bf16":
        ours, flops = bf16_masked_case(groups, expected, n, k)
        anchor = None
        plans = list(sm90_grouped_gemm._plans.values())
    else:
        if layout == "contiguous":
            result = bench_grouped.fp8_contiguous_case(groups, expected, n, k, psum=False)
        else:
            result = bench_grouped.fp8_masked_case(groups, expected, n, k)
        _, _, ours, _, flops, _, _, _, _, anchor = result
        plans = list(sm90_grouped_gemm._fp8_plans.values())
    spec = plans[-1].spec
    c = spec.config
    name = bench_grouped.tile_label(c) + "".join(
        f"+{d.removeprefix('DG_PROBE_')}" for d in spec.probe_defines)
    return ours, flops, name, anchor


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", choices=("fp8", "bf16"), default="fp8")
    parser.add_argument("--layouts", default="contiguous,masked")
    parser.add_argument("--tiles", default="128x128,128x192")
    parser.add_argument("--masked-gm", default="32x192,6x1024")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.family == "bf16" and (args.layouts != "masked" or any(
            split_variant(v)[0] != CHOSEN for v in args.tiles.split(","))):
        parser.error("--family bf16 takes --layouts masked and only chosen+MACRO variants")
    variants = [CHOSEN] + args.tiles.split(",")
    cases = []
    for layout in args.layouts.split(","):
        gms = GROUPED_CONTIGUOUS_GM if layout == "contiguous" else [
            tuple(int(x) for x in gm.split("x")) for gm in args.masked_gm.split(",")]
        cases += [(layout, g, m, n, k) for g, m in gms for n, k in GROUPED_NK]
    lines = ["| case | " + " | ".join(variants) + " | DeepGEMM (ANCHORS.md) |", "|---" * (len(variants) + 2) + "|"]
    for layout, groups, expected, n, k in cases:
        built = []
        for variant in variants:
            with forced_variant(variant):
                built.append(build(args.family, layout, groups, expected, n, k))
        times = [[] for _ in variants]
        for _ in range(args.rounds):
            for i, variant in enumerate(variants):
                with forced_variant(variant):
                    times[i].append(testing.bench_graph(built[i][0], warmup_ms=5, rep_ms=30))
        medians = [statistics.median(t) for t in times]
        anchor = built[0][3]
        anchor_text = f"{anchor['tflops']} TF" if anchor else "-"
        cells = " | ".join(f"{name} {us:.1f} us {flops / us / 1e6:.0f} TF ({medians[0] / us:.3f}x)"
                           for (_, flops, name, _), us in zip(built, medians))
        lines.append(f"| {args.family} {layout} {groups}x{expected} n={n} k={k} | {cells} | {anchor_text} |")
        print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
