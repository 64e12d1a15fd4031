"""Probe: FP8 GEMM kernel variants (compile-time macros, Fp8GemmKernelSpec.probe_defines) side by
side on the M=4096 shapes, each checked against the reference before it is timed, timed in
alternation (the GPU's clock drifts under its power cap). Prints one table; NOTES.md keeps the
conclusions.

    python benchmarks/probe_fp8.py [--variants ",DG_SOME_MACRO"] [--block-ns 128,192] [--accumulate]

(2026-12-01 it compared the ping-pong consumers with plain ones: NOTES.md, FP8 variant 4.)
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dg_triton  # noqa: E402
from dg_triton import testing  # noqa: E402
from dg_triton.heuristics.sm90 import make_fp8_config  # noqa: E402
from dg_triton.kernels import sm90_fp8_gemm  # noqa: E402

SHAPES = [(4096, 4096, 7168), (4096, 2112, 7168), (4096, 7168, 16384), (4096, 7168, 2048)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", default="",
                        help="comma-separated macro sets ('+' joins macros; empty = baseline)")
    parser.add_argument("--block-ns", default="128,192")
    parser.add_argument("--kinds", default="1d2d,1d1d")
    parser.add_argument("--accumulate", action="store_true",
                        help="1d1d: D += A @ B^T into a random c, as the wgrad benchmark rows run")
    parser.add_argument("--bitwise", action="store_true",
                        help="also require every variant's output to equal the first's, bit for bit")
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                        help="comma-separated MxNxK")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.shapes.split(",")]
    variants = [tuple(v for v in group.split("+") if v) for group in args.variants.split(",")]
    block_ns = [int(x) for x in args.block_ns.split(",")]
    lines = ["| kind | shape | block | " + " | ".join(("+".join(v) or "baseline") for v in variants) + " |",
             "|---" * (3 + len(variants)) + "|"]
    for kind in args.kinds.split(","):
        for m, n, k in shapes:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
            if kind == "1d2d":
                b_q, sfb = dg_triton.per_block_cast_to_fp8(b, False)
            else:
                b_q, sfb = dg_triton.per_token_cast_to_fp8(b, False, tma_aligned_sf=True)
            ref = a.float() @ b.float().T
            d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16 if kind == "1d2d" else torch.float32)
            layout = (d.dtype, a_q.stride(), b_q.stride(), d.stride(), sfa.stride(), sfb.stride())
            problem = sm90_fp8_gemm.Fp8GemmProblem(m, n, k, kind, d.device.index, None, layout)
            accumulate = args.accumulate and kind == "1d1d"
            # c as large as the product, so that a c read late, stale or not at all shows
            c = torch.randn(m, n, device="cuda").mul_(k ** 0.5) if accumulate else None
            for block_n in block_ns:
                if kind == "1d1d" and block_n > 144:
                    continue
                config = make_fp8_config(kind, m, n, 128, block_n, 1, k, d.element_size(), 132)
                runs, first = [], None
                for defines in variants:
                    run = (lambda defines=defines: sm90_fp8_gemm.run(
                        "probe", a_q, sfa, b_q, sfb, d, problem, accumulate, "", config, defines))
                    if accumulate:
                        d.copy_(c)   # the timed repeats keep adding to it; only this run is checked
                    else:
                        d.fill_(float("nan"))
                    run()
                    torch.cuda.synchronize()
                    diff = float(testing.calc_diff(d.float(), ref + c if accumulate else ref))
                    assert torch.isfinite(d).all() and diff < 1e-3, f"{kind} {defines}: calc_diff {diff}"
                    # Variants that change where, not how, the kernel computes (the early c load)
                    # leave the same bits as the first variant.
                    if first is None:
                        first = d.clone()
                    elif args.bitwise:
                        assert torch.equal(d, first), f"{kind} {defines}: differs from {variants[0]}"
                    runs.append(run)
                times = [[] for _ in variants]
                for _ in range(3):
                    for i, run in enumerate(runs):
                        times[i].append(testing.bench_graph(run, warmup_ms=5, rep_ms=30))
                medians = [statistics.median(t) for t in times]
                cells = " | ".join(f"{us:.1f} us {2 * m * n * k / us / 1e6:.0f} TF" for us in medians)
                lines.append(f"| {kind} | {m}x{n}x{k} | 128x{block_n} | {cells} |")
                print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
