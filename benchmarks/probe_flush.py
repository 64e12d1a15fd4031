"""Probe: what the L2 flush of the timing method costs a memory-bound call.

ANCHORS.md's method (triton.testing.do_bench) zeroes a 256 MiB buffer before every timed call, so
each call starts with an L2 full of dirty lines, which its first reads must write back to HBM.
For a call that moves a few hundred MB that write-back is a fixed extra of the order of the L2's
size at HBM speed. This times the same CUDA-graph replay after three flushes: "write" (the method's
memset), "read" (a reduction over the same buffer: the L2 ends up holding clean lines) and "none"
(back-to-back, L2 warm with whatever the call left), for a plain read kernel, a device copy and the
masked FP8 decode GEMMs of bench_grouped (expected m 20, checked against the reference there),
each of these also as the probe builds named by --defines (e.g. DG_B_EVICT_FIRST, which the
library now chooses itself for the smaller decode shapes: heuristics.sm90.b_evict_first).
Prints one table; NOTES.md keeps the conclusions.

    python benchmarks/probe_flush.py [--rounds 3] [--defines DG_B_EVICT_FIRST]
"""
import functools
import argparse
import random
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import bench_grouped  # noqa: E402
from dg_triton import testing  # noqa: E402
from dg_triton.kernels import sm90_grouped_gemm  # noqa: E402

FLUSH_BYTES = 256 * 1024 * 1024
DECODE = ((6, 4096, 2048), (6, 6144, 7168), (32, 4096, 2048), (32, 6144, 7168))


def timed_us(graph, flush, reps: int = 40) -> float:
    """Median microseconds of graph.replay() between CUDA events, each after flush()."""
    for _ in range(3):
        flush()
        graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        flush()
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--defines", default="", help="'+'-joined kernel macros of a probe build of the GEMMs")
    args = parser.parse_args()
    builds = [()] + ([tuple(args.defines.split("+"))] if args.defines else [])
    buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    sink = torch.empty((), dtype=torch.int64, device="cuda")
    flushes = {"write": buffer.zero_, "read": lambda: torch.sum(buffer, 0, out=sink), "none": lambda: None}

    # (name, bytes, graph): each graph captured as soon as its call exists, while the plan tables
    # hold that call's build (a probe build's plan replaces the default's under the same key).
    cases, keep_alive = [], []   # the calls' tensors must outlive their graphs
    for mb in (50, 264, 1409):
        x = torch.randn(mb * 1024 * 1024 // 4, device="cuda")
        out = torch.empty((), device="cuda")
        cases.append((f"read {mb} MB (torch.sum)", x.numel() * 4,
                      testing.capture_graph(lambda x=x, out=out: torch.sum(x, 0, out=out))))
        y = torch.empty_like(x[: x.numel() // 2])
        keep_alive += [x, out, y]
        cases.append((f"copy {mb // 2} MB -> {mb // 2} MB", x.numel() * 4,
                      testing.capture_graph(lambda x=x, y=y: y.copy_(x[: y.numel()]))))
    spec = sm90_grouped_gemm.GroupedFp8GemmKernelSpec
    for groups, n, k in DECODE:
        for defines in builds:
            sm90_grouped_gemm.GroupedFp8GemmKernelSpec = functools.partial(spec, probe_defines=defines)
            sm90_grouped_gemm._fp8_plans.clear()
            random.seed(1234)
            _, shape, ours, _, _, nbytes, _, _, _, _ = bench_grouped.fp8_masked_case(groups, 20, n, k)
            keep_alive.append(ours)
            cases.append((f"masked FP8 {groups} x 20 {n}x{k}{' ' + '+'.join(defines) if defines else ''}",
                          nbytes, testing.capture_graph(ours)))
    sm90_grouped_gemm.GroupedFp8GemmKernelSpec = spec
    graphs = cases
    results = {(name, flush): [] for name, _, _ in graphs for flush in flushes}
    for _ in range(args.rounds):
        for name, _, graph in graphs:
            for flush_name, flush in flushes.items():
                results[name, flush_name].append(timed_us(graph, flush))
    lines = ["| call | MB moved | write flush us (TB/s) | read flush us (TB/s) | no flush us | write - read us |",
             "|---|---|---|---|---|---|"]
    for name, nbytes, _ in graphs:
        w, r, none = (statistics.median(results[name, f]) for f in ("write", "read", "none"))
        lines.append(f"| {name} | {nbytes / 1e6:.0f} | {w:.1f} ({nbytes / w / 1e6:.2f}) | "
                     f"{r:.1f} ({nbytes / r / 1e6:.2f}) | {none:.1f} | {w - r:.1f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
