"""Probe: the GEMMs through the public API with B under L2 evict-first where
heuristics.sm90.b_evict_first chooses it (DG_B_EVICT_FIRST in the kernels) against the same calls
with the choice switched off (heuristics.sm90.B_EVICT_FIRST = False), on the forward (N, K) pairs of
API.md 8 at decode-sized M (dense FP8 1D2D and BF16, the heuristics' / tuned table's configs) and on
bench_grouped's masked FP8 decode cases. Each build is checked against the reference (calc_diff)
and bit for bit against the other (the same tiles and K order), captured in a CUDA graph right
after its plan is made, and the graphs are timed in alternation (do_bench's median over graph
replays, a 256 MiB memset before each: ANCHORS.md's method), and again with a clean L2 (a read of
the same 256 MiB before each replay, probe_flush.py's "read" flush), which says whether a gain is
the dirty lines' write-back spared or the kernel's own. Prints one table; NOTES.md keeps the
conclusions.

    python benchmarks/probe_evict_first.py [--families fp8,bf16,masked] [--ms 128,64]
                                           [--masked-groups 6,32] [--rounds 3]
"""
import argparse
import random
import statistics
import sys
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import bench_grouped  # noqa: E402
import probe_flush  # noqa: E402
import dg_triton  # noqa: E402
from dg_triton import gemm, reference_grouped, testing  # noqa: E402
from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm, sm90_fp8_gemm, sm90_grouped_gemm  # noqa: E402
from shapes import BF16_DENSE_BF16_OUT_NK, FP8_DENSE_NK, GROUPED_NK  # noqa: E402


def use_choice(on: bool) -> None:
    """Plans made from now on take (or not) heuristics.sm90.b_evict_first's choice, for the FP8
    and BF16 kernels alike; the plan tables are emptied so that no plan of the other setting is
    reused. main() restores the shipped switches when it is done."""
    heuristics.B_EVICT_FIRST = heuristics.B_EVICT_FIRST_BF16 = on
    for table in (sm90_fp8_gemm._plans, sm90_bf16_gemm._plans, sm90_grouped_gemm._fp8_plans, gemm._warm_plans):
        table.clear()


def dense_case(family: str, m: int, n: int, k: int):
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    reference = a.float() @ b.float().T
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    if family == "fp8":
        a_op = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
        b_op = dg_triton.per_block_cast_to_fp8(b, False)
        call = lambda: dg_triton.fp8_gemm_nt(a_op, b_op, d)  # noqa: E731
        threshold = 1e-3
    else:
        call = lambda: dg_triton.bf16_gemm_nt(a, b, d)  # noqa: E731
        threshold = 1e-5

    def checked():
        d.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        diff = float(testing.calc_diff(d.float(), reference))
        assert torch.isfinite(d).all() and diff < threshold, f"{family} {m}x{n}x{k}: calc_diff {diff}"
        return d.clone()
    return call, checked


def masked_case(groups: int, n: int, k: int):
    """bench_grouped's masked FP8 decode inputs (~20 rows a group, masked_m drawn with
    probe_flush's seed 1234; A and B unseeded): the call and a checked run that returns the valid
    rows, so that both builds are compared bit for bit on the same inputs."""
    random.seed(1234)
    _, masked_m, expected_m, a_q, _, sfa, b_q, sfb, d = bench_grouped.fp8_masked_inputs(groups, 20, n, k)
    call = lambda: dg_triton.m_grouped_fp8_gemm_nt_masked((a_q, sfa), (b_q, sfb), d, masked_m,  # noqa: E731
                                                          expected_m)
    valid = reference_grouped.masked_meaningful_rows(masked_m, d.size(1))
    reference = reference_grouped.m_grouped_fp8_masked_reference((a_q, sfa), (b_q, sfb), d, masked_m)

    def checked():
        d.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        bench_grouped.check_rows(d, reference, valid, f"masked {groups}x20 n={n} k={k}",
                                 bench_grouped.FP8_THRESHOLD)
        return d[valid].clone()
    return call, checked


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default="fp8,bf16,masked")
    parser.add_argument("--ms", default="128,64")
    parser.add_argument("--masked-groups", default="6,32")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cases = []
    families = args.families.split(",")
    for family in (f for f in families if f in ("fp8", "bf16")):
        for m in (int(x) for x in args.ms.split(",")):
            cases += [(family, m, n, k) for n, k in (FP8_DENSE_NK if family == "fp8" else BF16_DENSE_BF16_OUT_NK)]
    if "masked" in families:
        cases += [("masked", int(groups), n, k) for groups in args.masked_groups.split(",") for n, k in GROUPED_NK]
    shipped = heuristics.B_EVICT_FIRST, heuristics.B_EVICT_FIRST_BF16
    try:
        lines = run_cases(cases, args.rounds)
    finally:
        heuristics.B_EVICT_FIRST, heuristics.B_EVICT_FIRST_BF16 = shipped
    print("\n".join(lines))


def run_cases(cases, rounds):
    buffer = torch.empty(probe_flush.FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    sink = torch.empty((), dtype=torch.int64, device="cuda")
    read_flush = lambda: torch.sum(buffer, 0, out=sink)  # noqa: E731
    lines = ["| family | M (groups) | N | K | off us | on us | off / on | clean L2: off us | on us | off / on "
             "| chosen |", "|---" * 11 + "|"]
    for family, m, n, k in cases:
        graphs, outputs, chosen = [], [], None
        call, checked = masked_case(m, n, k) if family == "masked" else dense_case(family, m, n, k)
        plans = {"fp8": sm90_fp8_gemm._plans, "bf16": sm90_bf16_gemm._plans,
                 "masked": sm90_grouped_gemm._fp8_plans}[family]
        for on in (False, True):
            use_choice(on)
            outputs.append(checked())
            if on:
                chosen = list(plans.values())[-1].spec.b_evict_first
            graphs.append(testing.capture_graph(call))
        assert torch.equal(outputs[0], outputs[1]), f"{family} {m}x{n}x{k}: the builds differ"
        times, clean = [[], []], [[], []]
        for _ in range(rounds):
            for i, graph in enumerate(graphs):
                times[i].append(triton.testing.do_bench(graph.replay, warmup=5, rep=30, return_mode="median") * 1e3)
                clean[i].append(probe_flush.timed_us(graph, read_flush))
        off, on = (statistics.median(t) for t in times)
        clean_off, clean_on = (statistics.median(t) for t in clean)
        lines.append(f"| {family} | {m} | {n} | {k} | {off:.1f} | {on:.1f} | {off / on:.3f} | "
                     f"{clean_off:.1f} | {clean_on:.1f} | {clean_off / clean_on:.3f} | {chosen} |")
        print(lines[-1], flush=True)
    return lines


if __name__ == "__main__":
    main()
