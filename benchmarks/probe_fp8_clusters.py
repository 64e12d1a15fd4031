"""Probe: do 2-CTA multicast clusters pay for the FP8 GEMM at decode / small-prefill M?

At M <= 128 each CTA streams its whole K range of A and B from L2 (a 64x64 tile at K=7168 reads
918 KB), so the per-SM L2 -> SM rate may be what limits these shapes. A cluster of two CTAs on
tiles that share an operand loads it once for both (TMA multicast): along M (two 64-row tiles of
one block-column share B) or along N (two block-columns share A). The sweep has never tried
clusters below M=4096. For each shape: the config the heuristics pick now, and that tile with
each legal cluster, checked against the reference, then timed in alternation (three rounds).

    python benchmarks/probe_fp8_clusters.py [--shapes 128x4096x7168,...] [--leader] [--block 128x128]

--leader adds, for each cluster along M, the probe build in which rank 0 multicasts the whole B
tile (DG_PROBE_MULTICAST_LEADER) instead of each rank multicasting half; --block forces the tile.
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dg_triton import testing  # noqa: E402
from dg_triton.heuristics.sm90 import choose_fp8_gemm_config, make_fp8_config  # noqa: E402
from fp8_probe_operands import fp8_1d2d_operands  # noqa: E402

SHAPES = [(128, 4096, 7168), (128, 2112, 7168), (128, 7168, 2048), (128, 24576, 1536),
          (64, 4096, 7168), (64, 2112, 7168), (64, 7168, 2048), (64, 24576, 1536)]


def candidates(m, n, k, leader=False, block=None):
    """(config, probe defines): the heuristic pick (or the forced tile), then its tile and split
    with each legal 2-CTA cluster."""
    chosen = choose_fp8_gemm_config(m, n, k, 2, 132)
    if block:
        chosen = make_fp8_config("1d2d", m, n, *block, 1, k, 2, 132)
        if chosen is None:
            raise SystemExit(f"--block {block}: no config of that tile fits {m}x{n}x{k}")
    configs = [(chosen, ())]
    for cluster_m, cluster_n in ((2, 1), (1, 2)):
        for splits in sorted({chosen.num_splits, 1}):
            config = make_fp8_config("1d2d", m, n, chosen.block_m, chosen.block_n, splits, k, 2, 132,
                                     cluster_n, cluster_m)
            if config is not None and config.num_splits == splits and (config, ()) not in configs:
                configs.append((config, ()))
                if leader and cluster_m == 2:
                    configs.append((config, ("DG_PROBE_MULTICAST_LEADER",)))
    return configs


def name(config, defines=()):
    return (f"{config.block_m}x{config.block_n} k{config.num_splits} "
            f"c{config.cluster_m}x{config.cluster_n}" + (" leader" if defines else ""))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--leader", action="store_true")
    parser.add_argument("--block", default="", help="BMxBN instead of the heuristic pick's tile")
    args = parser.parse_args()
    block = tuple(int(x) for x in args.block.split("x")) if args.block else None
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    lines = ["| shape | config | us | vs heuristic pick |", "|---|---|---|---|"]
    for m, n, k in shapes:
        ops = fp8_1d2d_operands(m, n, k)
        d, ref = ops.d, ops.ref
        runs, names = [], []
        for config, defines in candidates(m, n, k, args.leader, block):
            run = (lambda config=config, defines=defines: ops.run(config, "", defines))
            d.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            diff = float(testing.calc_diff(d.float(), ref))
            if not (torch.isfinite(d).all() and diff < 1e-3):
                # Reported, not timed: a wrong config must show in the table, not stop the probe.
                lines.append(f"| {m}x{n}x{k} | {name(config, defines)} | FAILED (calc_diff {diff:.3g}, "
                             f"finite {bool(torch.isfinite(d).all())}) | - |")
                print(lines[-1], flush=True)
                continue
            runs.append(run)
            names.append(name(config, defines))
        times = [[] for _ in runs]
        for _ in range(3):
            for i, run in enumerate(runs):
                times[i].append(testing.bench_graph(run, warmup_ms=5, rep_ms=30))
        medians = [statistics.median(t) for t in times]
        for config_name, us in zip(names, medians):
            lines.append(f"| {m}x{n}x{k} | {config_name} | {us:.1f} | {medians[0] / us:.3f} |")
            print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
