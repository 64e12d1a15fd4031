"""Probe: forced tiles of the masked FP8 grouped GEMM on the decode shapes (expected m 20), each
checked against the reference before it is timed (bench_grouped.fp8_masked_case), so that the
heuristic's pick can be compared with the tiles it passed over. Prints one table; NOTES.md keeps
the conclusions.

    python benchmarks/probe_masked.py [--block-ns 0,64,96,128,192] [--groups 32,6]

block N 0 = the heuristic's own choice.
"""
import argparse
import dataclasses
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import bench_grouped  # noqa: E402
from dg_triton import testing  # noqa: E402
from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.kernels import sm90_grouped_gemm  # noqa: E402
from shapes import GROUPED_NK  # noqa: E402

_choose = sm90_grouped_gemm.choose_m_grouped_fp8_config


def forced(block_n):
    def choose(kind, num_groups, rows_per_group, rows, n, k, num_sms, mk_alignment=None):
        config = _choose(kind, num_groups, rows_per_group, rows, n, k, num_sms, mk_alignment)
        if not block_n:
            return config
        other = heuristics.make_fp8_config("1d2d", config.block_m, n, config.block_m, block_n, 1, k,
                                           2, num_sms)
        if other is None:
            return None
        tiles = num_groups * -(-rows // other.block_m) * -(-n // block_n)
        return dataclasses.replace(other, num_sms=max(1, min(num_sms, tiles)))
    return choose


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--block-ns", default="0,64,96,128,192")
    parser.add_argument("--groups", default="32,6")
    parser.add_argument("--expected", type=int, default=20)
    args = parser.parse_args()
    block_ns = [int(x) for x in args.block_ns.split(",")]
    lines = ["| groups x m | n | k | " + " | ".join(f"BN {bn or 'default'}" for bn in block_ns) + " |",
             "|---" * (3 + len(block_ns)) + "|"]
    for groups in (int(x) for x in args.groups.split(",")):
        for n, k in GROUPED_NK:
            cells = []
            for block_n in block_ns:
                sm90_grouped_gemm._fp8_plans.clear()
                sm90_grouped_gemm.choose_m_grouped_fp8_config = forced(block_n)
                random.seed(1234)
                try:
                    case = bench_grouped.fp8_masked_case(groups, args.expected, n, k)
                except Exception as error:  # a tile that does not fit: say so in the table
                    cells.append(f"- ({type(error).__name__})")
                    continue
                _, shape, ours, _, flops, nbytes, _, _, _, _ = case
                config = bench_grouped.plan_config("m_grouped_fp8_gemm_nt_masked", False)
                us = statistics.median(testing.bench_graph(ours) for _ in range(3))
                cells.append(f"{config} {us:.1f} us {nbytes / us / 1e6:.2f} TB/s")
            sm90_grouped_gemm.choose_m_grouped_fp8_config = _choose
            lines.append(f"| {groups} x {args.expected} | {n} | {k} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
