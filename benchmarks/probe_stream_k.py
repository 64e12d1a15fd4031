"""Probe: stream-K for the last wave (scheduler.cuh StreamKTileScheduler, heuristics.sm90
with_stream_k) against the same configs run tile by tile, with cuBLAS in the same rounds.

Every M=4096 benchmark shape has 128 x k tiles, so on the H200's 132 SMs 4 SMs sit idle for the
whole run (3 % of the chip) or, for shapes of few waves, the last wave is part-filled (FP8
4096x2112x7168 at 128x192: 352 tiles, 2.67 waves run as 3). Stream-K spreads the K blocks of the
tiles past the last whole wave evenly over every CTA. Each shape's heuristic config is timed with
stream-K (where with_stream_k takes it when patched on) and without, in alternation with cuBLAS
(`torch.matmul`, or block-wise `torch._scaled_mm` for FP8), over --rounds rounds of
testing.bench_graph (L2 flushed). Every variant is checked against the reference first (NaN-poisoned
output), and the stream-K variant is run twice and must be bitwise equal (its split tiles are
summed in a fixed order). Prints one table; NOTES.md keeps the conclusions.

    python benchmarks/probe_stream_k.py [--families bf16,fp8] [--ms 4096,128,64] [--rounds 3]
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
from dg_triton.kernels import sm90_bf16_gemm, sm90_fp8_gemm  # noqa: E402
from fp8_probe_operands import fp8_1d2d_operands  # noqa: E402

DENSE_NK = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
            (7168, 2048)]


def clear_plans():
    for cache in (gemm._warm_plans, sm90_fp8_gemm._plans, sm90_bf16_gemm._plans):
        cache.clear()


@contextlib.contextmanager
def stream_k(enabled):
    """Plans made inside take stream-K where with_stream_k would with STREAM_K on, problems of a
    single partial wave included (STREAM_K_PARTIAL_WAVE), or never. (Both are off by default:
    this probe measured them slower.)"""
    saved = heuristics.STREAM_K, heuristics.STREAM_K_PARTIAL_WAVE
    heuristics.STREAM_K = heuristics.STREAM_K_PARTIAL_WAVE = enabled
    clear_plans()
    try:
        yield
    finally:
        heuristics.STREAM_K, heuristics.STREAM_K_PARTIAL_WAVE = saved
        clear_plans()


def build(family, m, n, k):
    """(our call, cuBLAS call, d, reference, threshold, plans) on fresh random operands."""
    if family == "fp8":
        ops = fp8_1d2d_operands(m, n, k)
        call = lambda: dg_triton.fp8_gemm_nt((ops.a_q, ops.sfa), (ops.b_q, ops.sfb), ops.d)  # noqa: E731
        return call, ops.cublas_blockwise(), ops.d, ops.ref, 1e-3, sm90_fp8_gemm._plans
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    call = lambda: dg_triton.bf16_gemm_nt(a, b, d)  # noqa: E731
    return call, lambda: a @ b.T, d, a.float() @ b.float().T, 1e-5, sm90_bf16_gemm._plans


def checked(call, d, ref, threshold, label):
    d.fill_(float("nan"))
    call()
    torch.cuda.synchronize()
    diff = float(testing.calc_diff(d.float(), ref))
    assert torch.isfinite(d).all() and diff < threshold, f"{label}: calc_diff {diff:.3g}"
    return d.clone()


def config_name(plans):
    c = list(plans.values())[-1].spec.config
    return (f"{c.block_m}x{c.block_n}s{c.num_stages}" + ("_sk" if c.stream_k else "")
            + (f"k{c.num_splits}" if c.num_splits > 1 else ""))


def measure(family, m, n, k, rounds):
    call, cublas, d, ref, threshold, plans = build(family, m, n, k)
    label = f"{family} {m}x{n}x{k}"
    names = {}
    for enabled in (False, True):
        with stream_k(enabled):
            first = checked(call, d, ref, threshold, label)
            names[enabled] = config_name(plans)
            if enabled and "_sk" in names[enabled]:
                again = checked(call, d, ref, threshold, label)
                assert torch.equal(first, again), f"{label}: stream-K not bitwise reproducible"
    if "_sk" not in names[True]:
        line = f"| {label} | {names[False]} | (not taken) | | |"
        print(line, flush=True)
        return line, None
    times = {"off": [], "on": [], "cublas": []}
    for _ in range(rounds):
        for key in ("off", "on"):
            with stream_k(key == "on"):
                times[key].append(testing.bench_graph(call, warmup_ms=5, rep_ms=30))
        times["cublas"].append(testing.bench_graph(cublas, warmup_ms=5, rep_ms=30))
    off, on, base = (statistics.median(times[key]) for key in ("off", "on", "cublas"))
    tflops = 2 * m * n * k / on / 1e6
    line = (f"| {label} | {names[False]} {off:.1f} us ({base / off:.3f}x) | {names[True]} {on:.1f} us "
            f"({base / on:.3f}x, {tflops:.0f} TFLOPS) | {off / on:.3f} | cuBLAS {base:.1f} us |")
    print(line, flush=True)
    return line, (base / off, base / on)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default="bf16,fp8")
    parser.add_argument("--ms", default="4096,128,64")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    lines = ["| case | tile by tile (vs cuBLAS) | stream-K (vs cuBLAS) | speed-up | baseline |",
             "|---|---|---|---|---|"]
    for family in args.families.split(","):
        for m in (int(x) for x in args.ms.split(",")):
            ratios = []
            for n, k in DENSE_NK:
                line, pair = measure(family, m, n, k, args.rounds)
                lines.append(line)
                ratios.append(pair)
            taken = [p for p in ratios if p is not None]
            if taken:
                geo = lambda xs: statistics.geometric_mean(xs)  # noqa: E731
                lines.append(f"| {family} M={m} geomean vs cuBLAS over the {len(taken)} stream-K shapes | "
                             f"{geo([p[0] for p in taken]):.3f} | {geo([p[1] for p in taken]):.3f} | | |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
