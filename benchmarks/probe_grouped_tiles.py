"""Probe: forced tiles for the M-grouped FP8 GEMMs (contiguous and masked) on the ANCHORS.md grouped
shapes, beside the tile the heuristics choose. Each variant's plan is made with
choose_m_grouped_fp8_config patched to return that tile (block M and N given, the most stages that
fit, the chosen grid), checked against the reference inside bench_grouped's case (NaN-poisoned
output) and timed in alternation with the others (--rounds rounds of testing.bench_graph, L2
flushed). The random group sizes are drawn from the same seed for every variant. Prints one table;
NOTES.md keeps the conclusions.

    python benchmarks/probe_grouped_tiles.py [--layouts contiguous,masked] [--tiles 128x128,128x192]
                                             [--masked-gm 32x192,6x1024] [--rounds 3]
"""
import argparse
import contextlib
import random
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
from dg_triton import testing  # noqa: E402
from dg_triton.heuristics.sm90 import make_fp8_config  # noqa: E402
from dg_triton.kernels import sm90_grouped_gemm  # noqa: E402
from shapes import GROUPED_CONTIGUOUS_GM, GROUPED_NK  # noqa: E402

CHOSEN = "chosen"


@contextlib.contextmanager
def forced_tile(tile):
    """Grouped FP8 plans made inside use `tile` ("BMxBN"), or the heuristics' choice (CHOSEN)."""
    original = sm90_grouped_gemm.choose_m_grouped_fp8_config

    def forced(kind, num_groups, rows_per_group, rows, n, k, num_sms, mk_alignment=None):
        config = original(kind, num_groups, rows_per_group, rows, n, k, num_sms, mk_alignment)
        block_m, block_n = (int(x) for x in tile.split("x"))
        made = make_fp8_config("1d2d", block_m, n, block_m, block_n, 1, k, 2, num_sms)
        return replace(made, num_sms=config.num_sms) if made is not None else None

    if tile != CHOSEN:
        sm90_grouped_gemm.choose_m_grouped_fp8_config = forced
    sm90_grouped_gemm._fp8_plans.clear()
    try:
        yield
    finally:
        sm90_grouped_gemm.choose_m_grouped_fp8_config = original
        sm90_grouped_gemm._fp8_plans.clear()


def build(layout, groups, expected, n, k):
    random.seed(1234)
    torch.manual_seed(1234)
    if layout == "contiguous":
        result = bench_grouped.fp8_contiguous_case(groups, expected, n, k, psum=False)
    else:
        result = bench_grouped.fp8_masked_case(groups, expected, n, k)
    _, _, ours, _, flops, _, _, _, _, anchor = result
    plans = list(sm90_grouped_gemm._fp8_plans.values())
    c = plans[-1].spec.config
    return ours, flops, f"{c.block_m}x{c.block_n}s{c.num_stages}", anchor


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layouts", default="contiguous,masked")
    parser.add_argument("--tiles", default="128x128,128x192")
    parser.add_argument("--masked-gm", default="32x192,6x1024")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    variants = [CHOSEN] + args.tiles.split(",")
    cases = []
    for layout in args.layouts.split(","):
        gms = GROUPED_CONTIGUOUS_GM if layout == "contiguous" else [
            tuple(int(x) for x in gm.split("x")) for gm in args.masked_gm.split(",")]
        cases += [(layout, g, m, n, k) for g, m in gms for n, k in GROUPED_NK]
    lines = ["| case | " + " | ".join(variants) + " | DeepGEMM (ANCHORS.md) |", "|---" * (len(variants) + 2) + "|"]
    for layout, groups, expected, n, k in cases:
        built = []
        for tile in variants:
            with forced_tile(tile):
                built.append(build(layout, groups, expected, n, k))
        times = [[] for _ in variants]
        for _ in range(args.rounds):
            for i, tile in enumerate(variants):
                with forced_tile(tile):
                    times[i].append(testing.bench_graph(built[i][0], warmup_ms=5, rep_ms=30))
        medians = [statistics.median(t) for t in times]
        anchor = built[0][3]
        anchor_text = f"{anchor['tflops']} TF" if anchor else "-"
        cells = " | ".join(f"{name} {us:.1f} us {flops / us / 1e6:.0f} TF ({medians[0] / us:.3f}x)"
                           for (_, flops, name, _), us in zip(built, medians))
        lines.append(f"| {layout} {groups}x{expected} n={n} k={k} | {cells} | {anchor_text} |")
        print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
