"""Probe: the dense GEMMs through the public API with B loaded under L2 evict-first (the probe
build DG_PROBE_B_EVICT_FIRST of gemm_pipeline.cuh) against the shipped build, on the forward (N, K)
pairs of API.md 8 at decode-sized M, with the heuristics' / tuned table's own configs. Each build
is checked against the reference (calc_diff) and bit for bit against the other (the same tiles
and K order), captured in a CUDA graph right after its plan is made, and the graphs are timed in
alternation (do_bench's median over graph replays, a 256 MiB memset before each: ANCHORS.md's
method). Prints one table; NOTES.md keeps the conclusions.

    python benchmarks/probe_evict_first.py [--families fp8,bf16] [--ms 128,64] [--rounds 3]
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import dg_triton  # noqa: E402
from dg_triton import gemm, testing  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm, sm90_fp8_gemm  # noqa: E402
from shapes import BF16_DENSE_BF16_OUT_NK  # noqa: E402

PROBE = ("DG_PROBE_B_EVICT_FIRST",)
_RUNS = {"fp8": sm90_fp8_gemm.run, "bf16": sm90_bf16_gemm.run}


def use_build(family: str, defines: tuple) -> None:
    """Plans made from now on compile with `defines`; the plan tables are emptied so none is reused."""
    module = sm90_fp8_gemm if family == "fp8" else sm90_bf16_gemm
    original = _RUNS[family]
    module.run = (lambda *args, **kwargs: original(*args, probe_defines=defines, **kwargs)) if defines \
        else original
    module._plans.clear()
    gemm._warm_plans.clear()


def case(family: str, m: int, n: int, k: int):
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    reference = a.float() @ b.float().T
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    if family == "fp8":
        a_op = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
        b_op = dg_triton.per_block_cast_to_fp8(b, False)
        return (lambda: dg_triton.fp8_gemm_nt(a_op, b_op, d)), d, reference, 1e-3
    return (lambda: dg_triton.bf16_gemm_nt(a, b, d)), d, reference, 1e-5


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default="fp8,bf16")
    parser.add_argument("--ms", default="128,64")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    lines = ["| family | M | N | K | shipped us | evict-first us | shipped / evict-first |", "|---" * 7 + "|"]
    for family in args.families.split(","):
        for m in (int(x) for x in args.ms.split(",")):
            for n, k in BF16_DENSE_BF16_OUT_NK:
                call, d, reference, threshold = case(family, m, n, k)
                graphs, outputs = [], []
                for defines in ((), PROBE):
                    use_build(family, defines)
                    d.fill_(float("nan"))
                    call()
                    torch.cuda.synchronize()
                    diff = float(testing.calc_diff(d.float(), reference))
                    assert torch.isfinite(d).all() and diff < threshold, f"{family} {m}x{n}x{k} {defines}: {diff}"
                    outputs.append(d.clone())
                    graphs.append(testing.capture_graph(call))
                use_build(family, ())
                assert torch.equal(outputs[0], outputs[1]), f"{family} {m}x{n}x{k}: the builds differ"
                times = [[], []]
                for _ in range(args.rounds):
                    for i, graph in enumerate(graphs):
                        times[i].append(triton.testing.do_bench(graph.replay, warmup=5, rep=30,
                                                                return_mode="median") * 1e3)
                shipped, probe = (statistics.median(t) for t in times)
                lines.append(f"| {family} | {m} | {n} | {k} | {shipped:.1f} | {probe:.1f} | {shipped / probe:.3f} |")
                print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
