"""Probe: what a masked FP8 unit costs by how many of its rows are valid (issue 5, masked 32x192).

The masked GEMM with 32 groups at the ANCHORS.md (N, K) pairs, one kernel binary for every variant
(expected_m fixed, so the same tile is chosen), only masked_m changing:
- "random": masked_m = int(192 * U(0.7, 1.3)) per group (the bench's distribution, seeded);
- "all 256", "all 192", "all 128": every group that many rows (at 128-row tiles: two full units,
  one full and one of 64 rows, one full unit per group).
"all 192" against "all 256" is the cost of a 64-row last unit against a full one (same unit count);
"all 128" against "all 256" the cost of a group's second unit, whose B tiles the first already
brought into L2. Each variant is checked against the reference (NaN-poisoned output) and timed in
alternation (--rounds rounds of testing.bench_graph, L2 flushed). Prints one table, microseconds
and each variant's time over "all 256"; NOTES.md keeps the conclusions.

    python benchmarks/probe_masked_rows.py [--rounds 5] [--groups 32]
"""
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
import dg_triton  # noqa: E402
from dg_triton import reference_grouped, testing  # noqa: E402
from dg_triton.kernels import sm90_grouped_gemm  # noqa: E402
from shapes import GROUPED_NK  # noqa: E402

MAX_M = 512
EXPECTED_M = int(192 * 1.2)   # the bench's expected_m for 32 x 192


def masked_counts(groups):
    random.seed(1234)
    return {"random": [int(192 * random.uniform(0.7, 1.3)) for _ in range(groups)],
            "all 256": [256] * groups, "all 192": [192] * groups, "all 128": [128] * groups}


def build(groups, n, k):
    """(call(masked_m), check(masked_m), tile name) on one set of operands."""
    a_q, sfa_2d = dg_triton.per_token_cast_to_fp8(
        torch.randn(groups * MAX_M, k, dtype=torch.bfloat16, device="cuda"), False)
    a_q = a_q.view(groups, MAX_M, k)
    sfa = dg_triton.get_mn_major_tma_aligned_tensor(sfa_2d.reshape(groups, MAX_M, -(-k // 128)))
    b_q, sfb = bench_grouped.fp8_b(groups, n, k)
    d = torch.empty(groups, MAX_M, n, dtype=torch.bfloat16, device="cuda")

    def call(masked_m):
        dg_triton.m_grouped_fp8_gemm_nt_masked((a_q, sfa), (b_q, sfb), d, masked_m, EXPECTED_M)

    def check(masked_m, what):
        d.fill_(float("nan"))
        call(masked_m)
        torch.cuda.synchronize()
        expected = reference_grouped.m_grouped_fp8_masked_reference((a_q, sfa), (b_q, sfb), d, masked_m)
        meaningful = reference_grouped.masked_meaningful_rows(masked_m, MAX_M)
        bench_grouped.check_rows(d, expected, meaningful, what, bench_grouped.FP8_THRESHOLD)
        if not torch.isnan(d[~meaningful].float()).all():
            raise AssertionError(f"{what}: rows at or past masked_m were written")

    return call, check


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--groups", type=int, default=32)
    args = parser.parse_args()
    counts = masked_counts(args.groups)
    names = list(counts)
    lines = ["| n, k | tile | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for n, k in GROUPED_NK:
        call, check = build(args.groups, n, k)
        tensors = {name: torch.tensor(c, dtype=torch.int32, device="cuda") for name, c in counts.items()}
        for name, masked_m in tensors.items():
            check(masked_m, f"masked {args.groups} groups {name} n={n} k={k}")
        plan = list(sm90_grouped_gemm._fp8_plans.values())[-1]
        c = plan.spec.config
        times = {name: [] for name in names}
        for _ in range(args.rounds):
            for name, masked_m in tensors.items():
                times[name].append(testing.bench_graph(lambda: call(masked_m), warmup_ms=5, rep_ms=30))
        medians = {name: statistics.median(t) for name, t in times.items()}
        full = medians["all 256"]
        cells = " | ".join(f"{medians[name]:.1f} us ({medians[name] / full:.3f})" for name in names)
        lines.append(f"| {n}, {k} | {c.block_m}x{c.block_n}s{c.num_stages} | {cells} |")
        print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
