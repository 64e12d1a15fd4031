"""M-grouped BF16 GEMM benchmark (issue 5): the ANCHORS.md grouped shapes in BF16, each checked
against dg_triton.reference_grouped, then timed beside a torch baseline in the same run
(ANCHORS.md "Method": CUDA-graph replay of one call, L2 flushed, median; bench_gemm.py's helpers).

    python benchmarks/bench_grouped.py                   # contiguous (index layout) and masked
    python benchmarks/bench_grouped.py --psum            # also the contiguous psum layout
    python benchmarks/bench_grouped.py --backend triton  # the portable path (rows ":portable")
    python benchmarks/bench_grouped.py --no-contiguous --no-masked --no-moe   # the k-grouped rows only

- contiguous: G groups of m_g = int(expected * U(0.7, 1.3)) rows each, every group padded with -1
  rows to the mk alignment (128); baseline "cublas": a loop of torch.matmul, one per group, over
  the group's rows (its ranges known to the host, so it is captured in the same kind of graph);
- masked: max_m 4096, masked_m = int(expected * U(0.7, 1.3)), called with expected_m =
  int(expected * 1.2); baseline "cublas": one torch.bmm over the first max(masked_m) rows of every
  group (the rows any group needs; bmm cannot skip per-group rows).
TFLOPS count 2 * m_g * N * K over valid rows only (BENCH_FORMAT.md); TB/s (masked) counts A's
valid rows, all of B and D's valid rows once. A case that fails is recorded ("error" in its row)
and the others still run; the exit status is 1 if any failed.

FP8 rows (`--fp8`, on by default; `--no-fp8` leaves them out; `--no-bf16` leaves out the BF16
m-grouped rows instead): the ANCHORS.md FP8 grouped shapes
through m_grouped_fp8_gemm_nt_{contiguous,masked}, A quantized per token (1x128, its scales already
in the kernel's TMA-aligned layout, so the GEMM is timed, not the scale transform), each expert's B
per 128x128 block; checked against reference_grouped's FP8 references (calc_diff < 1e-3), timed
beside cuBLAS block-wise FP8 (torch._scaled_mm, the recipe bench_gemm.py's cublas_fp8 uses) run
once per group over that group's valid rows, and listed with DeepGEMM's TFLOPS (and TB/s where
given) from ANCHORS.md as `deepgemm_anchor` (DeepGEMM drew its own group sizes, so compare TFLOPS,
not times). There is no portable FP8 grouped kernel: `--backend triton` leaves the FP8 rows out.

MoE forward rows (`--moe`, on by default; `--no-moe` leaves them out; CUDA backend only): the
end-to-end FP8 MoE forward of tests/moe_forward.py at DeepSeek-V3 sizes (T 4096, H 7168, I 2048,
256 experts, top-8, distinct top-k routing) as one CUDA graph, checked against the fp32 torch MoE
(calc_diff < moe_forward.FP8_THRESHOLD), in the index ("moe_forward_fp8") and psum
(":psum") layouts, the index one with each stage's time (`stages_us`, each stage replayed alone),
beside `torch_eager`: the same MoE in plain torch bf16 on the dequantized weights, a per-expert
loop of torch.matmul (MOE_NOTE says exactly what is timed). TFLOPS count 6 * slots * H * I.
`python benchmarks/bench_grouped.py --no-contiguous --no-masked --no-fp8 --no-k-grouped` runs
the MoE rows (and the BF16 host-overhead rows) only.

K-grouped rows (`--k-grouped`, on by default; `--no-k-grouped` leaves them out): API.md 8's k-grouped
shapes (G, M, N, expected K) with k_g = align(int(expected * U(0.7, 1.3)), 128), d = c accumulated in
place (wgrad), through k_grouped_fp8_gemm_nt_contiguous (operands as upstream builds them:
per-channel casts of [sum(ks), MN] tensors, each group's rows transposed into a K-major block, the
SFs already in the kernel's layout) and k_grouped_bf16_gemm_tn_contiguous, checked against
reference_k_grouped (FP8 against the unquantized inputs, calc_diff < 1e-3; BF16 < 1e-5) and timed
beside our own dense GEMM at equal total K, `dense_equal_k`: one [M, N, sum(ks)] call of
fp8_gemm_nt with the 1D1D recipe (fp32 d, c = d) or of bf16_gemm_tn (fp32 d, c = d). The table
gives ours / dense (issue 5 target for FP8: >= 0.85); the JSON holds both times (BENCH_FORMAT.md:
ratios are computed from them, not stored). The FP8 k-grouped rows follow `--fp8` and also run on
`--backend triton` (the portable path has them).

Prints one table last and writes benchmarks/results/grouped_gemm-<gpu>.json (family
"grouped_gemm") and .md.
"""
import argparse
import datetime
import json
import os
import random
import statistics
import sys
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import dg_triton  # noqa: E402
from dg_triton import reference_grouped, reference_k_grouped, testing  # noqa: E402
from dg_triton.utils import layout as mk_layout  # noqa: E402
from dg_triton.utils.math import align  # noqa: E402
from bench_gemm import geomean, versions, write_results  # noqa: E402
from shapes import (GROUPED_CONTIGUOUS_GM, GROUPED_MASKED_GM, GROUPED_MASKED_MAX_M, GROUPED_NK,  # noqa: E402
                    K_GROUPED_GMNK, K_GROUPED_SM90_K_ALIGNMENT)
from shapes import MOE_FORWARD_DEEPSEEK_V3  # noqa: E402
import moe_forward  # noqa: E402  (tests/moe_forward.py: the MoE pipeline and its torch twin)

FAMILY = "grouped_gemm"
THRESHOLD = 1e-5
FP8_THRESHOLD = 1e-3
ALIGNMENT = 128
NAME_SUFFIX = ""
CONTIGUOUS_NOTE = "baseline cublas: a loop of torch.matmul per group over its rows"
MASKED_NOTE = "baseline cublas: torch.bmm over the first max(masked_m) rows of every group"
FP8_CONTIGUOUS_NOTE = ("baseline cublas: torch._scaled_mm block-wise (1x128 A, 128x128 B scales) per group over "
                       "its rows padded to the 128-row segment; deepgemm_anchor: ANCHORS.md")
FP8_MASKED_NOTE = ("baseline cublas: torch._scaled_mm block-wise (1x128 A, 128x128 B scales) per group over its "
                   "masked_m rows padded to a multiple of 16; deepgemm_anchor: ANCHORS.md")
K_GROUPED_FP8_NOTE = ("baseline dense_equal_k: our fp8_gemm_nt, 1D1D recipe (1, 1, 128), fp32 d = c, one "
                      "[M, N, sum(ks)] call (issue 5 target: ours >= 0.85x its TFLOPS)")
K_GROUPED_BF16_NOTE = "baseline dense_equal_k: our bf16_gemm_tn, fp32 d = c, one [M, N, sum(ks)] call"
# The baseline key of each kind's rows (BENCH_FORMAT.md); "cublas" where not listed.
BASELINE_KEYS = {"k_grouped_fp8": "dense_equal_k", "k_grouped_bf16": "dense_equal_k"}
ANCHOR_SOURCE = "ANCHORS.md (DeepGEMM 2.6.1 SM90 on H200, its own random group sizes)"
# ANCHORS.md "Grouped FP8 (DeepGEMM)": TFLOPS per (layout, groups, expected m), in GROUPED_NK order.
DEEPGEMM_FP8_GROUPED_TFLOPS = {
    ("contiguous", 4, 8192): [1254, 1080, 1217, 1151],
    ("contiguous", 8, 4096): [1222, 1049, 1187, 1153],
    ("masked", 32, 192): [877, 827, 763, 741],
    ("masked", 6, 1024): [1110, 1096, 1061, 1077],
    ("masked", 32, 20): [152, 130, 141, 130],
    ("masked", 6, 20): [127, 114, 91, 81],
}
# The TB/s ANCHORS.md gives for m = 20: (groups, expected m, n, k) -> TB/s.
DEEPGEMM_FP8_GROUPED_TBPS = {(32, 20, 6144, 7168): 3.9, (6, 20, 6144, 7168): 3.4, (6, 20, 4096, 2048): 2.1}


def decode_tbps_lines(table):
    """At m = 20 the time is set by the weights' bytes, not by the valid rows, so TFLOPS over valid
    rows scale with each side's draw of masked_m (ours and DeepGEMM's differ by up to ~15 % at 6
    groups). Where ANCHORS.md gives DeepGEMM's TB/s, compare bandwidth too, and name the valid-row
    totals behind both TFLOPS figures (DeepGEMM's from its TFLOPS and TB/s at its bytes, which B
    dominates)."""
    lines = []
    for name, shape, _c, us, tf, tbps, _b, anchor in table:
        if not (anchor and "gbps" in anchor and tbps):
            continue
        n, k, rows = shape["n"], shape["k"], shape["valid_m"]
        anchor_us = shape["groups"] * n * k / (anchor["gbps"] * 1e9) * 1e6   # B's bytes only
        anchor_rows = anchor["tflops"] * 1e12 * anchor_us * 1e-6 / (2 * n * k)
        lines.append(f"{name} {shape['groups']} x {shape['expected_m']} {n}x{k}: {tbps:.2f} TB/s vs DeepGEMM's "
                     f"{anchor['gbps'] / 1e3:.1f} = {tbps * 1e3 / anchor['gbps']:.3f}; valid rows ours {rows:.0f}, "
                     f"DeepGEMM's ~{anchor_rows:.0f} (TFLOPS ratio {tf / anchor['tflops']:.3f})")
    return lines


def timed_pair(ours, baseline):
    """Medians of ours and the baseline, timed in alternation three times each (the GPU slows as
    it heats under its power cap; bench_gemm.py does the same)."""
    ours_times, baseline_times = [], []
    for _ in range(3):
        ours_times.append(testing.bench_graph(ours))
        baseline_times.append(testing.bench_graph(baseline))
    return statistics.median(ours_times), statistics.median(baseline_times)


def check_rows(d, expected, meaningful, what, threshold=THRESHOLD):
    out, ref = d[meaningful], expected[meaningful]
    if not torch.isfinite(out.float()).all():
        raise AssertionError(f"{what}: unwritten (NaN) or non-finite elements in valid rows")
    diff = float(testing.calc_diff(out, ref))
    if not diff < threshold:
        raise AssertionError(f"{what}: calc_diff {diff:.3g} >= {threshold}")
    return diff


def tile_label(c) -> str:
    """A grouped config as "BMxBN[c]sS" (c: a column-split FP8 tile, fp8_gemm.cuh kSplitColumns)."""
    return f"{c.block_m}x{c.block_n}{'c' if c.split_columns else ''}s{c.num_stages}"


def plan_config(function, portable_fallback=True):
    """The config of the latest CUDA plan of `function` ("portable" when the portable path ran; "?"
    when no plan of the function can be read)."""
    from dg_triton.kernels import sm90_grouped_gemm
    if portable_fallback and os.environ.get("DG_BACKEND") == "triton":
        return "portable"
    try:
        every_plan = {**sm90_grouped_gemm._plans, **getattr(sm90_grouped_gemm, "_fp8_plans", {})}
        plans = [p for key, p in every_plan.items()
                 if key[0] == function and p is not sm90_grouped_gemm._UNSUPPORTED]
        return tile_label(plans[-1].spec.config)
    except (AttributeError, IndexError, KeyError, TypeError):
        return "portable" if portable_fallback else "?"


def contiguous_groups(num_groups, expected):
    """Per-group sizes m_g = int(expected * U(0.7, 1.3)), their starts (aligned to ALIGNMENT), M,
    the per-row ids (-1 padding) and the per-group end rows (psum), both int32 on the GPU."""
    mk_layout.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    sizes = [int(expected * random.uniform(0.7, 1.3)) for _ in range(num_groups)]
    starts, start = [], 0
    for size in sizes:
        starts.append(start)
        start = align(start + size, ALIGNMENT)
    m = start
    ids = torch.full((m,), -1, dtype=torch.int32)
    for g, (s, size) in enumerate(zip(starts, sizes)):
        ids[s:s + size] = g
    ends = torch.tensor([s + size for s, size in zip(starts, sizes)], dtype=torch.int32, device="cuda")
    return sizes, starts, m, ids.cuda(), ends


def contiguous_case(num_groups, expected, n, k, psum):
    function = "m_grouped_bf16_gemm_nt_contiguous"
    sizes, starts, m, ids, ends = contiguous_groups(num_groups, expected)
    layout = ends if psum else ids
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    a[ids < 0] = 0
    b = torch.randn(num_groups, n, k, dtype=torch.bfloat16, device="cuda")
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    d_base = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    if psum:
        ours = lambda: dg_triton.m_grouped_bf16_gemm_nt_contiguous(  # noqa: E731
            a, b, d, layout, use_psum_layout=True, expected_m_for_psum_layout=expected)
    else:
        ours = lambda: dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)  # noqa: E731

    def baseline():
        for g, (s, size) in enumerate(zip(starts, sizes)):
            torch.matmul(a[s:s + size], b[g].T, out=d_base[s:s + size])

    d.fill_(float("nan"))
    ours()
    torch.cuda.synchronize()
    expected_d = reference_grouped.m_grouped_contiguous_reference(a, b, d, layout, psum, ALIGNMENT)
    meaningful = ids >= 0
    diff = check_rows(d, expected_d, meaningful, f"{function} G={num_groups} m={expected} n={n} k={k}")
    del expected_d
    us, baseline_us = timed_pair(ours, baseline)
    valid = sum(sizes)
    flops = 2 * valid * n * k
    name = function + (":psum" if psum else "") + NAME_SUFFIX
    shape = {"groups": num_groups, "expected_m": expected, "m": m, "valid_m": valid, "n": n, "k": k}
    return name, shape, us, baseline_us, flops, None, diff, plan_config(function), CONTIGUOUS_NOTE, None


def masked_case(num_groups, expected, n, k):
    function = "m_grouped_bf16_gemm_nt_masked"
    max_m = GROUPED_MASKED_MAX_M
    counts = [min(max_m, int(expected * random.uniform(0.7, 1.3))) for _ in range(num_groups)]
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    expected_m = int(expected * 1.2)
    a = torch.randn(num_groups, max_m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(num_groups, n, k, dtype=torch.bfloat16, device="cuda")
    d = torch.empty(num_groups, max_m, n, dtype=torch.bfloat16, device="cuda")
    rows = align(max(counts), 8)
    d_base = torch.empty(num_groups, rows, n, dtype=torch.bfloat16, device="cuda")
    b_t = b.transpose(1, 2)
    ours = lambda: dg_triton.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)  # noqa: E731
    baseline = lambda: torch.bmm(a[:, :rows], b_t, out=d_base)  # noqa: E731
    d.fill_(float("nan"))
    ours()
    torch.cuda.synchronize()
    expected_d = reference_grouped.m_grouped_masked_reference(a, b, d, masked_m)
    meaningful = reference_grouped.masked_meaningful_rows(masked_m, max_m)
    diff = check_rows(d, expected_d, meaningful, f"{function} G={num_groups} m={expected} n={n} k={k}")
    if not torch.isnan(d[~meaningful].float()).all():
        raise AssertionError(f"{function}: rows at or past masked_m were written")
    del expected_d
    us, baseline_us = timed_pair(ours, baseline)
    valid = sum(counts)
    flops = 2 * valid * n * k
    nbytes = 2 * (valid * k + num_groups * n * k + valid * n)
    shape = {"groups": num_groups, "expected_m": expected, "max_m": max_m, "valid_m": valid,
             "n": n, "k": k}
    return (function + NAME_SUFFIX, shape, us, baseline_us, flops, nbytes, diff, plan_config(function),
            MASKED_NOTE, None)


def fp8_b(num_groups, n, k):
    """Each expert's B [N, K] per 128x128 block: (B fp8 [G, N, K], sfb fp32 [G, ceil(N/128), ceil(K/128)])."""
    pairs = [dg_triton.per_block_cast_to_fp8(torch.randn(n, k, dtype=torch.bfloat16, device="cuda"), False)
             for _ in range(num_groups)]
    return torch.stack([q for q, _ in pairs]), torch.stack([sf for _, sf in pairs])


def cublas_fp8_groups(pieces):
    """cuBLAS block-wise FP8 once per group: `pieces` lists (a_q rows [m_g, K], sfa rows [m_g, K/128],
    b_q [N, K], sfb [N/128, K/128]) per non-empty group; scales laid out as bench_gemm.cublas_fp8."""
    prepared = [(a_q, sfa.t().contiguous().t(), b_q.t(), sfb.t()) for a_q, sfa, b_q, sfb in pieces]

    def baseline():
        for a_q, scale_a, b_t, scale_b in prepared:
            torch._scaled_mm(a_q, b_t, scale_a, scale_b, out_dtype=torch.bfloat16)
    return baseline


def fp8_anchor(kind, num_groups, expected, n, k):
    tflops = DEEPGEMM_FP8_GROUPED_TFLOPS[kind, num_groups, expected][GROUPED_NK.index((n, k))]
    anchor = {"tflops": tflops, "source": ANCHOR_SOURCE}
    tbps = DEEPGEMM_FP8_GROUPED_TBPS.get((num_groups, expected, n, k))
    if tbps:
        anchor["gbps"] = tbps * 1e3
    return anchor


def fp8_contiguous_case(num_groups, expected, n, k, psum):
    function = "m_grouped_fp8_gemm_nt_contiguous"
    sizes, starts, m, ids, ends = contiguous_groups(num_groups, expected)
    layout = ends if psum else ids
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    a[ids < 0] = 0
    a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
    del a
    b_q, sfb = fp8_b(num_groups, n, k)
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    if psum:
        ours = lambda: dg_triton.m_grouped_fp8_gemm_nt_contiguous(  # noqa: E731
            (a_q, sfa), (b_q, sfb), d, layout, use_psum_layout=True, expected_m_for_psum_layout=expected)
    else:
        ours = lambda: dg_triton.m_grouped_fp8_gemm_nt_contiguous((a_q, sfa), (b_q, sfb), d, layout)  # noqa: E731
    d.fill_(float("nan"))
    ours()
    torch.cuda.synchronize()
    expected_d = reference_grouped.m_grouped_fp8_contiguous_reference((a_q, sfa), (b_q, sfb), d, layout, psum,
                                                                      ALIGNMENT)
    diff = check_rows(d, expected_d, ids >= 0, f"{function} G={num_groups} m={expected} n={n} k={k}",
                      FP8_THRESHOLD)
    del expected_d
    # Each group's rows padded to its aligned segment (zero rows of A): cuBLAS block-wise refuses
    # row counts whose scale rows are not 16-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED, seen on the
    # H200 2026-12-01), so the baseline multiplies up to 127 more rows per group than ours must.
    baseline = cublas_fp8_groups([(a_q[s:s + padded], sfa[s:s + padded], b_q[g], sfb[g])
                                  for g, (s, size) in enumerate(zip(starts, sizes)) if size
                                  for padded in (min(-(-size // ALIGNMENT) * ALIGNMENT, m - s),)])
    valid = sum(sizes)
    name = function + (":psum" if psum else "")
    shape = {"groups": num_groups, "expected_m": expected, "m": m, "valid_m": valid, "n": n, "k": k}
    return (name, shape, ours, baseline, 2 * valid * n * k, None, diff, "m_grouped_fp8_fp4_gemm_nt_contiguous",
            FP8_CONTIGUOUS_NOTE,
            fp8_anchor("contiguous", num_groups, expected, n, k))


def fp8_masked_inputs(num_groups, expected, n, k):
    """A masked FP8 case's tensors: masked_m drawn from `random` (U(0.7, 1.3) x expected a group),
    A and B random and cast, d empty. Returns (counts, masked_m, expected_m, a_q, sfa_3d, sfa, b_q,
    sfb, d); sfa_3d is A's scales before the TMA-aligned layout (cuBLAS reads those)."""
    max_m = GROUPED_MASKED_MAX_M
    counts = [min(max_m, int(expected * random.uniform(0.7, 1.3))) for _ in range(num_groups)]
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    a_q, sfa_2d = dg_triton.per_token_cast_to_fp8(
        torch.randn(num_groups * max_m, k, dtype=torch.bfloat16, device="cuda"), False)
    a_q = a_q.view(num_groups, max_m, k)
    sfa_3d = sfa_2d.reshape(num_groups, max_m, -(-k // 128))
    sfa = dg_triton.get_mn_major_tma_aligned_tensor(sfa_3d)
    b_q, sfb = fp8_b(num_groups, n, k)
    d = torch.empty(num_groups, max_m, n, dtype=torch.bfloat16, device="cuda")
    return counts, masked_m, int(expected * 1.2), a_q, sfa_3d, sfa, b_q, sfb, d


def fp8_masked_case(num_groups, expected, n, k):
    function = "m_grouped_fp8_gemm_nt_masked"
    max_m = GROUPED_MASKED_MAX_M
    counts, masked_m, expected_m, a_q, sfa_3d, sfa, b_q, sfb, d = fp8_masked_inputs(num_groups, expected, n, k)
    sk = -(-k // 128)
    ours = lambda: dg_triton.m_grouped_fp8_gemm_nt_masked((a_q, sfa), (b_q, sfb), d, masked_m,  # noqa: E731
                                                          expected_m)
    d.fill_(float("nan"))
    ours()
    torch.cuda.synchronize()
    expected_d = reference_grouped.m_grouped_fp8_masked_reference((a_q, sfa), (b_q, sfb), d, masked_m)
    meaningful = reference_grouped.masked_meaningful_rows(masked_m, max_m)
    diff = check_rows(d, expected_d, meaningful, f"{function} G={num_groups} m={expected} n={n} k={k}",
                      FP8_THRESHOLD)
    del expected_d
    # Rows padded to a multiple of 16 (cuBLAS block-wise refuses others, as above).
    baseline = cublas_fp8_groups([(a_q[g, :padded], sfa_3d[g, :padded], b_q[g], sfb[g])
                                  for g, count in enumerate(counts) if count
                                  for padded in (min(-(-count // 16) * 16, max_m),)])
    valid = sum(counts)
    sn = -(-n // 128)
    nbytes = valid * k + 4 * valid * sk + num_groups * n * k + 4 * num_groups * sn * sk + 2 * valid * n
    shape = {"groups": num_groups, "expected_m": expected, "max_m": max_m, "valid_m": valid, "n": n, "k": k}
    return (function, shape, ours, baseline, 2 * valid * n * k, nbytes, diff, "m_grouped_fp8_fp4_gemm_nt_masked",
            FP8_MASKED_NOTE,
            fp8_anchor("masked", num_groups, expected, n, k))


def run_fp8_case(kind, case):
    """An FP8 case: checked, then ours and cuBLAS timed in alternation (cuBLAS left out, with a
    message, where it refuses the problem)."""
    result = fp8_contiguous_case(*case) if kind == "fp8_contiguous" else fp8_masked_case(*case)
    name, shape, ours, baseline, flops, nbytes, diff, kernel_function, note, anchor = result
    try:
        baseline()
        torch.cuda.synchronize()
    except (RuntimeError, ValueError) as error:  # torch raises either for an unsupported recipe
        print(f"    cublas block-wise unavailable for {name} {shape}: {str(error).splitlines()[0]}")
        baseline = None
    if baseline is None:
        us, baseline_us = statistics.median([testing.bench_graph(ours) for _ in range(3)]), None
    else:
        us, baseline_us = timed_pair(ours, baseline)
    return (name, shape, us, baseline_us, flops, nbytes, diff, plan_config(kernel_function, False), note, anchor)


def k_grouped_configs(kind, m, n, ks):
    """The tile config of the k-grouped plan ("portable" on the portable path)."""
    if os.environ.get("DG_BACKEND") == "triton":
        return "portable"
    from dg_triton.kernels import sm90_k_grouped_gemm
    plans = sm90_k_grouped_gemm._plans if kind == "k_grouped_fp8" else sm90_k_grouped_gemm._bf16_plans
    for key, plan in plans.items():
        if key[0][:3] == (m, n, tuple(ks)):
            c = plan.spec.config
            return f"{c.block_m}x{c.block_n}s{c.num_stages}"
    return "?"


def k_grouped_case(kind, num_groups, m, n, expected_k):
    """A k-grouped case (module docstring): checked, then ours and the dense GEMM at equal total K
    timed in alternation. d = c accumulates on every replay; the values only grow, never overflow."""
    fp8 = kind == "k_grouped_fp8"
    ks = [align(max(1, int(expected_k * random.uniform(0.7, 1.3))), K_GROUPED_SM90_K_ALIGNMENT)
          for _ in range(num_groups)]
    sum_k = sum(ks)
    grouped_layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    a = torch.randn(sum_k, m, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(sum_k, n, dtype=torch.bfloat16, device="cuda")
    d = torch.randn(num_groups, m, n, device="cuda").mul_(32)
    c_before = d.clone()
    d_dense = torch.randn(m, n, device="cuda")
    if fp8:
        function = "k_grouped_fp8_gemm_nt_contiguous"
        a_fp8 = reference_k_grouped.k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(a, False), ks)
        b_fp8 = reference_k_grouped.k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(b, False), ks)
        ours = lambda: dg_triton.k_grouped_fp8_gemm_nt_contiguous(  # noqa: E731
            a_fp8, b_fp8, d, ks, grouped_layout, c=d)
        # The dense problem's own operands (the k-grouped buffers are group-major, not [M, sum(ks)]).
        a_dense = dg_triton.per_token_cast_to_fp8(torch.randn(m, sum_k, dtype=torch.bfloat16, device="cuda"),
                                                  False, tma_aligned_sf=True)
        b_dense = dg_triton.per_token_cast_to_fp8(torch.randn(n, sum_k, dtype=torch.bfloat16, device="cuda"),
                                                  False, tma_aligned_sf=True)
        baseline = lambda: dg_triton.fp8_gemm_nt(a_dense, b_dense, d_dense, c=d_dense, recipe=(1, 1, 128))  # noqa: E731
        threshold, note = FP8_THRESHOLD, K_GROUPED_FP8_NOTE
    else:
        function = "k_grouped_bf16_gemm_tn_contiguous"
        ours = lambda: dg_triton.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, grouped_layout, c=d)  # noqa: E731
        baseline = lambda: dg_triton.bf16_gemm_tn(a, b, d_dense, c=d_dense)  # noqa: E731
        threshold, note = THRESHOLD, K_GROUPED_BF16_NOTE
    ours()
    torch.cuda.synchronize()
    expected = reference_k_grouped.k_grouped_bf16_tn_reference(a, b, c_before, ks)
    del c_before
    what = f"{function} G={num_groups} m={m} n={n} ks={ks}"
    diffs = [check_rows(d[g], expected[g], slice(None), f"{what} group {g}", threshold)
             for g in range(num_groups) if ks[g]]
    del expected
    us, baseline_us = timed_pair(ours, baseline)
    shape = {"groups": num_groups, "expected_k": expected_k, "m": m, "n": n, "k": sum_k, "ks": ks}
    return (function + NAME_SUFFIX, shape, us, baseline_us, 2 * m * n * sum_k, None, max(diffs),
            k_grouped_configs(kind, m, n, ks), note, None)


def host_overhead(rows, lines):
    """CPU time per warm call (testing.host_overhead_us), small problems so the GPU never lags."""
    mk_layout.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    a = torch.randn(256, 256, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(2, 256, 256, dtype=torch.bfloat16, device="cuda")
    d = torch.empty(256, 256, dtype=torch.bfloat16, device="cuda")
    ids = torch.tensor([0] * 128 + [1] * 128, dtype=torch.int32, device="cuda")
    contiguous = testing.host_overhead_us(lambda: dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ids))
    am = torch.randn(2, 64, 256, dtype=torch.bfloat16, device="cuda")
    dm = torch.empty(2, 64, 256, dtype=torch.bfloat16, device="cuda")
    masked_m = torch.tensor([10, 20], dtype=torch.int32, device="cuda")
    masked = testing.host_overhead_us(lambda: dg_triton.m_grouped_bf16_gemm_nt_masked(am, b, dm, masked_m, 16))
    add = testing.host_overhead_us(lambda: torch.add(a, a))
    for name, us, shape in (
            ("m_grouped_bf16_gemm_nt_contiguous", contiguous, {"groups": 2, "m": 256, "n": 256, "k": 256}),
            ("m_grouped_bf16_gemm_nt_masked", masked, {"groups": 2, "max_m": 64, "n": 256, "k": 256})):
        rows.append({"name": f"{name}{NAME_SUFFIX}:host_overhead", "shape": shape,
                     "ours": {"us": round(us, 2)}, "baselines": {"torch_eager": {"us": round(add, 2)}},
                     "note": "baseline torch_eager: a tiny torch.add, for the host's speed"})
    lines.append(f"host overhead per call: contiguous {contiguous:.1f} us, masked {masked:.1f} us "
                 f"(a tiny torch.add: {add:.1f} us)")


# ---------------------------------------------------------------------------------------------
# End-to-end MoE forward (--moe, on by default)

MOE_NOTE = ("ours: tests/moe_forward.py's FP8 pipeline (permute + 1x128 cast, m_grouped_fp8_gemm_nt_contiguous "
            "with W1, SwiGLU + 1x128 cast, m_grouped_fp8_gemm_nt_contiguous with W2, weighted combine; routing "
            "weights applied in the combine) as one CUDA graph; stages each as their own graph; baseline "
            "torch_eager: the same MoE in plain torch bf16 on the dequantized FP8 weights (gather the slots' "
            "tokens, a loop over the experts of torch.matmul, silu(gate) * up, torch.matmul, index_add_ of "
            "the weighted rows), as one CUDA graph, with its per-expert row counts read on the host before "
            "timing (a plain torch MoE needs them on the host; that sync is not timed)")
MOE_STAGES = ("permute", "linear1", "activation", "linear2", "combine")


def moe_case(pipeline, x, topk_ids, topk_weights, reference, name, shape, flops, baseline):
    """Checks the pipeline against the fp32 MoE, then times it: in alternation with `baseline`
    when that is a function, else alone, `baseline` being the us the torch baseline took earlier
    in the run. Returns (row, us, baseline_us, diff)."""
    y = pipeline(x, topk_ids, topk_weights)
    diff = check_rows(y, reference, slice(None), name, moe_forward.FP8_THRESHOLD)
    del y
    ours = lambda: pipeline(x, topk_ids, topk_weights)  # noqa: E731
    if callable(baseline):
        us, baseline_us = timed_pair(ours, baseline)
    else:
        us, baseline_us = statistics.median([testing.bench_graph(ours) for _ in range(3)]), baseline
    row = {"name": name, "shape": shape,
           "ours": {"us": round(us, 2), "tflops": round(flops / us / 1e6, 1), "gbps": None, "calc_diff": diff},
           "baselines": {"torch_eager": {"us": round(baseline_us, 2), "tflops": round(flops / baseline_us / 1e6, 1)}},
           "note": MOE_NOTE}
    return row, us, baseline_us, diff


def moe_stage_times(pipeline, x, topk_ids, topk_weights) -> dict:
    """Median us of each stage replayed alone, on the previous stage's output."""
    layout = pipeline.permute(x, topk_ids)
    h = pipeline.linear1(layout)
    act = pipeline.activation(h)
    out = pipeline.linear2(act, layout)
    stages = {"permute": lambda: pipeline.permute(x, topk_ids), "linear1": lambda: pipeline.linear1(layout),
              "activation": lambda: pipeline.activation(h), "linear2": lambda: pipeline.linear2(act, layout),
              "combine": lambda: pipeline.combine(out, layout, topk_weights)}
    return {stage: round(statistics.median([testing.bench_graph(stages[stage]) for _ in range(3)]), 2)
            for stage in MOE_STAGES}


def moe_forward_rows(rows, lines):
    """The MoE forward at DeepSeek-V3 sizes, index and psum layouts, beside the torch baseline."""
    tokens, hidden, intermediate, experts, topk = MOE_FORWARD_DEEPSEEK_V3
    mk_layout.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    w1 = moe_forward.quantize_expert_weights(moe_forward.random_expert_weights(experts, 2 * intermediate, hidden))
    w2 = moe_forward.quantize_expert_weights(moe_forward.random_expert_weights(experts, hidden, intermediate))
    x = moe_forward.random_tokens(tokens, hidden)
    topk_ids, topk_weights = moe_forward.random_routing(tokens, topk, experts)
    reference = moe_forward.fp32_reference(x, topk_ids, topk_weights, w1, w2)

    plan = moe_forward.routing_plan(topk_ids, experts)
    w1_bf16 = torch.stack([moe_forward.dequantize_expert(w1, e).to(torch.bfloat16) for e in range(experts)])
    w2_bf16 = torch.stack([moe_forward.dequantize_expert(w2, e).to(torch.bfloat16) for e in range(experts)])
    baseline = lambda: moe_forward.torch_moe_forward(  # noqa: E731
        x, topk_weights, plan, lambda e: (w1_bf16[e], w2_bf16[e]), torch.bfloat16)
    # The baseline must compute the same MoE (in bf16), or the comparison means nothing.
    baseline_diff = check_rows(baseline(), reference, slice(None), "torch baseline", moe_forward.FP8_THRESHOLD)

    slots = sum(plan.counts)
    flops = 6 * slots * hidden * intermediate  # 2*S*(2I)*H + 2*S*H*I over the used slots only
    shape = {"tokens": tokens, "hidden": hidden, "intermediate": intermediate, "experts": experts, "topk": topk,
             "groups": experts, "expected_m": slots // experts}
    index = moe_forward.MoEForward(w1, w2)
    row, us, baseline_us, diff = moe_case(index, x, topk_ids, topk_weights, reference, "moe_forward_fp8", shape,
                                          flops, baseline)
    stages = moe_stage_times(index, x, topk_ids, topk_weights)
    row["ours"]["stages_us"] = stages
    row["baselines"]["torch_eager"]["calc_diff"] = baseline_diff
    psum_row, psum_us, _, psum_diff = moe_case(moe_forward.MoEForward(w1, w2, use_psum_layout=True), x, topk_ids,
                                               topk_weights, reference, "moe_forward_fp8:psum", shape, flops,
                                               baseline_us)
    rows += [row, psum_row]
    lines += ["", f"MoE forward, DeepSeek-V3 routed experts (T={tokens}, H={hidden}, I={intermediate}, E={experts}, "
              f"top-{topk}; TFLOPS over the {slots} used slots). {MOE_NOTE}.", "",
              "| pipeline | ours us | ours TFLOPS | calc_diff | torch bf16 us | vs torch |",
              "|---|---|---|---|---|---|"]
    for name, t, d in (("moe_forward_fp8", us, diff), ("moe_forward_fp8:psum", psum_us, psum_diff)):
        lines.append(f"| {name} | {t:.1f} | {flops / t / 1e6:.0f} | {d:.2e} | {baseline_us:.1f} | "
                     f"{baseline_us / t:.2f} |")
    lines += ["", "stages of moe_forward_fp8, each replayed alone: "
              + ", ".join(f"{stage} {t:.1f} us" for stage, t in stages.items())
              + f" (sum {sum(stages.values()):.1f} us, whole graph {us:.1f} us)"]
    print(f"moe_forward_fp8: {us:.1f} us ({flops / us / 1e6:.0f} TFLOPS), psum {psum_us:.1f} us, torch bf16 "
          f"{baseline_us:.1f} us ({baseline_us / us:.2f}x); stages {stages}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--psum", action="store_true", help="also the contiguous psum layout")
    parser.add_argument("--no-masked", action="store_true")
    parser.add_argument("--no-contiguous", action="store_true")
    parser.add_argument("--fp8", action=argparse.BooleanOptionalAction, default=True,
                        help="the FP8 grouped rows as well (default on; --no-fp8: BF16 only)")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                        help="the BF16 m-grouped rows (default on; --no-bf16 leaves them out)")
    parser.add_argument("--moe", action=argparse.BooleanOptionalAction, default=True,
                        help="the end-to-end MoE forward at DeepSeek-V3 sizes as well (default on)")
    parser.add_argument("--k-grouped", action=argparse.BooleanOptionalAction, default=True,
                        help="the k-grouped rows as well (default on; --no-k-grouped leaves them out)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "triton"],
                        help="triton: time the portable Triton path (DG_BACKEND=triton; BF16 and k-grouped only)")
    args = parser.parse_args()
    args.family = FAMILY
    global NAME_SUFFIX
    k_grouped_fp8 = args.k_grouped and args.fp8   # the portable path has it: decided before the override
    if args.backend == "triton":
        os.environ["DG_BACKEND"] = "triton"
        NAME_SUFFIX = ":portable"
        if args.fp8:
            print("bench_grouped: no portable FP8 m-grouped kernel; FP8 m-grouped rows left out")
            args.fp8 = False
        if args.moe:
            print("bench_grouped: the MoE forward is FP8 (SM90 kernels); its rows left out")
            args.moe = False
    if not torch.cuda.is_available():
        print("bench_grouped: no CUDA device; nothing to time")
        return 0
    random.seed(0)
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name()
    dtypes = (("bf16",) if args.bf16 else ()) + (("fp8",) if args.fp8 else ())
    cases = []
    for dtype in dtypes:
        prefix = "fp8_" if dtype == "fp8" else ""
        if not args.no_contiguous:
            for psum in (False, True) if args.psum else (False,):
                for num_groups, expected in GROUPED_CONTIGUOUS_GM:
                    for n, k in GROUPED_NK:
                        cases.append((prefix + "contiguous", (num_groups, expected, n, k, psum)))
        if not args.no_masked:
            for num_groups, expected in GROUPED_MASKED_GM:
                for n, k in GROUPED_NK:
                    cases.append((prefix + "masked", (num_groups, expected, n, k)))
    if args.k_grouped:
        for kind in (("k_grouped_fp8",) if k_grouped_fp8 else ()) + ("k_grouped_bf16",):
            for case in K_GROUPED_GMNK:
                cases.append((kind, case))

    runners = {"contiguous": contiguous_case, "masked": masked_case,
               "k_grouped_fp8": lambda *case: k_grouped_case("k_grouped_fp8", *case),
               "k_grouped_bf16": lambda *case: k_grouped_case("k_grouped_bf16", *case)}
    rows, table, k_grouped_table, failures = [], [], [], []
    for kind, case in cases:
        label = f"{kind} {case}"
        try:
            result = run_fp8_case(kind, case) if kind.startswith("fp8_") else runners[kind](*case)
        except Exception as error:  # a failing case is recorded; the others still run
            traceback.print_exc()
            failures.append(f"{label}: {type(error).__name__}: {error}")
            if kind.startswith("k_grouped_"):
                num_groups, m, n, expected_k = case
                name = ("k_grouped_fp8_gemm_nt_contiguous" if kind == "k_grouped_fp8"
                        else "k_grouped_bf16_gemm_tn_contiguous")
                shape = {"groups": num_groups, "expected_k": expected_k, "m": m, "n": n}
            else:
                num_groups, expected, n, k = case[:4]
                dtype, layout = ("fp8", kind[4:]) if kind.startswith("fp8_") else ("bf16", kind)
                name = f"m_grouped_{dtype}_gemm_nt_{layout}"
                shape = {"groups": num_groups, "expected_m": expected, "n": n, "k": k}
            rows.append({"name": name + NAME_SUFFIX, "shape": shape, "ours": None, "baselines": {},
                         "error": f"{type(error).__name__}: {error}"})
            torch.cuda.empty_cache()
            continue
        name, shape, us, baseline_us, flops, nbytes, diff, config, note, anchor = result
        tbps = nbytes / us / 1e6 if nbytes else None
        baselines = {}
        if baseline_us is not None:
            baselines[BASELINE_KEYS.get(kind, "cublas")] = {"us": round(baseline_us, 2),
                                                            "tflops": round(flops / baseline_us / 1e6, 1)}
        if anchor is not None:
            baselines["deepgemm_anchor"] = anchor
        rows.append({"name": name, "shape": shape,
                     "ours": {"us": round(us, 2), "tflops": round(flops / us / 1e6, 1),
                              "gbps": round(tbps * 1e3, 1) if tbps else None, "calc_diff": diff,
                              "config": config},
                     "baselines": baselines, "note": note})
        (k_grouped_table if kind.startswith("k_grouped_") else table).append(
            (name, shape, config, us, flops / us / 1e6, tbps, baseline_us, anchor))
        print(f"{name} {shape}: {us:.1f} us ({flops / us / 1e6:.0f} TFLOPS), baseline "
              f"{f'{baseline_us:.1f} us' if baseline_us else 'unavailable'}"
              + (f", DeepGEMM {anchor['tflops']} TFLOPS" if anchor else ""), flush=True)
        torch.cuda.empty_cache()
    extra = []
    try:
        host_overhead(rows, extra)
    except Exception as error:
        failures.append(f"host overhead: {type(error).__name__}: {error}")
    if args.moe:
        torch.cuda.empty_cache()
        try:
            moe_forward_rows(rows, extra)
        except Exception as error:  # recorded like a failing case
            traceback.print_exc()
            failures.append(f"moe forward: {type(error).__name__}: {error}")
        torch.cuda.empty_cache()

    notes = f"contiguous: {CONTIGUOUS_NOTE}; masked: {MASKED_NOTE}."
    if args.fp8:
        notes += f" FP8 contiguous: {FP8_CONTIGUOUS_NOTE}; FP8 masked: {FP8_MASKED_NOTE}."
    if args.k_grouped:
        notes += f" k-grouped FP8: {K_GROUPED_FP8_NOTE}; k-grouped BF16: {K_GROUPED_BF16_NOTE}."
    lines = [f"# {FAMILY} on {gpu}, {datetime.date.today()}", "",
             f"versions: {json.dumps(versions())}", f"command: python {' '.join(sys.argv)}", "",
             f"{notes} TFLOPS over valid rows; DeepGEMM: {ANCHOR_SOURCE}.", "",
             "| function | groups x m | N | K | config | ours us | ours TFLOPS | ours TB/s | baseline us "
             "| vs baseline | DeepGEMM TFLOPS | vs DeepGEMM |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, shape, config, us, tf, tbps, baseline_us, anchor in table:
        base = f"{baseline_us:.1f} | {baseline_us / us:.3f}" if baseline_us else "- | -"
        deepgemm = f"{anchor['tflops']} | {tf / anchor['tflops']:.3f}" if anchor else "- | -"
        lines.append(f"| {name} | {shape['groups']} x {shape['expected_m']} | {shape['n']} | {shape['k']} | "
                     f"{config} | {us:.1f} | {tf:.0f} | {f'{tbps:.2f}' if tbps else '-'} | {base} | {deepgemm} |")
    lines.append("")
    if k_grouped_table:
        lines += ["| function | groups | M | N | expected K | sum K | configs | ours us | ours TFLOPS | dense us "
                  "| dense TFLOPS | ours / dense |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, shape, config, us, tf, _tb, dense_us, _a in k_grouped_table:
            dense = (f"{dense_us:.1f} | {shape['m'] * shape['n'] * shape['k'] * 2 / dense_us / 1e6:.0f} | "
                     f"{dense_us / us:.3f}" if dense_us else "- | - | -")
            lines.append(f"| {name} | {shape['groups']} | {shape['m']} | {shape['n']} | {shape['expected_k']} | "
                         f"{shape['k']} | {config} | {us:.1f} | {tf:.0f} | {dense} |")
        lines.append("")
        for prefix, target in (("k_grouped_fp8_gemm_nt_contiguous", 0.85), ("k_grouped_bf16_gemm_tn_contiguous", None)):
            ratios = [b / us for name, _s, _c, us, _t, _tb, b, _a in k_grouped_table if name.startswith(prefix) and b]
            if ratios:
                lines.append(f"{prefix}: geomean TFLOPS vs the dense GEMM at equal total K {geomean(ratios):.3f} "
                             f"(worst {min(ratios):.3f})" + (f"; issue 5 target >= {target}" if target else ""))
        lines.append("")
    for prefix in ("m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked",
                   "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked"):
        ratios = [b / us for name, _s, _c, us, _t, _tb, b, _a in table if name.startswith(prefix) and b]
        if ratios:
            lines.append(f"{prefix}: geomean vs baseline {geomean(ratios):.3f} (worst {min(ratios):.3f})")
        vs_deepgemm = [tf / a["tflops"] for name, _s, _c, _us, tf, _tb, _b, a in table if name.startswith(prefix) and a]
        if vs_deepgemm:
            lines.append(f"{prefix}: geomean TFLOPS vs DeepGEMM (ANCHORS.md) {geomean(vs_deepgemm):.3f} "
                         f"(worst {min(vs_deepgemm):.3f})")
    lines += decode_tbps_lines(table)
    lines += extra
    lines += [f"FAILED {f}" for f in failures]
    write_results(args, gpu, rows, "\n".join(lines), [])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
