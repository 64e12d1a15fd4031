"""Probe: 256-row FP8 1D2D tiles (two 64-row waves per consumer warpgroup, fp8_gemm.cuh kRowWaves)
against the config the heuristics pick now, on the M=4096 shapes of API.md 8.

A 256xBN tile reads each B tile for 256 rows instead of 128: per FLOP a quarter fewer bytes
through shared memory (wgmma operands plus TMA writes: 144 against 160 B/clock at full rate for
BN = 128) and from L2. For each shape: the heuristic pick, 256 x {128, 112, 96, 64}, and cuBLAS
block-wise `torch._scaled_mm` for scale, each checked against the reference (calc_diff < 1e-3,
NaN-poisoned output), then timed in alternation (three rounds, CUDA-graph replay, L2 flushed).

    python benchmarks/probe_fp8_256.py [--shapes 4096x4096x7168,...] [--block-ns 128,112,96,64]
        [--variants ",DG_PROBE_WAVE_TURNS"]   # each 256-row config also as these probe builds
        [--group-ms 8,16]   # each 256-row config with these L2 groups of block rows (default 8)
"""
import argparse
import dataclasses
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

SHAPES = [(4096, 2112, 7168), (4096, 576, 7168), (4096, 24576, 1536), (4096, 32768, 512),
          (4096, 7168, 16384), (4096, 4096, 7168), (4096, 7168, 2048)]


def name(config, defines=()):
    return (f"{config.block_m}x{config.block_n} s{config.num_stages}"
            + (f" g{config.group_m}" if config.group_m != 8 else "") + "".join(f" {d}" for d in defines))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--block-ns", default="128,112,96,64")
    parser.add_argument("--variants", default="",
                        help="comma-separated macro sets for the 256-row configs ('+' joins; empty = default)")
    parser.add_argument("--group-ms", default="8")
    args = parser.parse_args()
    variants = [tuple(v for v in group.split("+") if v) for group in args.variants.split(",")]
    group_ms = [int(x) for x in args.group_ms.split(",")]
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    block_ns = [int(x) for x in args.block_ns.split(",")]
    lines = ["| shape | config | us | TFLOPS | vs heuristic pick | vs cuBLAS block-wise |",
             "|---|---|---|---|---|---|"]
    for m, n, k in shapes:
        ops = fp8_1d2d_operands(m, n, k)
        d, ref = ops.d, ops.ref
        configs = [(choose_fp8_gemm_config(m, n, k, 2, 132), ())]
        for block_n in block_ns:
            config = make_fp8_config("1d2d", m, n, 256, block_n, 1, k, 2, 132)
            if config is None:
                continue
            for group_m in group_ms:
                grouped = dataclasses.replace(config, group_m=group_m)
                configs += [(grouped, defines) for defines in variants if (grouped, defines) not in configs]
        runs, names = [], []
        for config, defines in configs:
            run = (lambda config=config, defines=defines: ops.run(config, "", defines))
            d.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            diff = float(testing.calc_diff(d.float(), ref))
            if not (torch.isfinite(d).all() and diff < 1e-3):
                # Reported, not timed: a wrong config must show in the table, not stop the probe.
                lines.append(f"| {m}x{n}x{k} | {name(config, defines)} | FAILED (calc_diff {diff:.3g}, "
                             f"finite {bool(torch.isfinite(d).all())}) | - | - | - |")
                print(lines[-1], flush=True)
                continue
            runs.append(run)
            names.append(name(config, defines))
        runs.append(ops.cublas_blockwise())
        names.append("cuBLAS block-wise")
        times = [[] for _ in runs]
        for _ in range(3):
            for i, run in enumerate(runs):
                times[i].append(testing.bench_graph(run, warmup_ms=5, rep_ms=30))
        medians = [statistics.median(t) for t in times]
        for config_name, us in zip(names, medians):
            tflops = 2 * m * n * k / us / 1e6
            lines.append(f"| {m}x{n}x{k} | {config_name} | {us:.1f} | {tflops:.0f} | "
                         f"{medians[0] / us:.3f} | {medians[-1] / us:.3f} |")
            print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
