"""M-grouped BF16 GEMM benchmark (issue 5): the ANCHORS.md grouped shapes in BF16, each checked
against dg_triton.reference_grouped, then timed beside a torch baseline in the same run
(ANCHORS.md "Method": CUDA-graph replay of one call, L2 flushed, median; bench_gemm.py's helpers).

    python benchmarks/bench_grouped.py                   # contiguous (index layout) and masked
    python benchmarks/bench_grouped.py --psum            # also the contiguous psum layout
    python benchmarks/bench_grouped.py --backend triton  # the portable path (rows ":portable")

- contiguous: G groups of m_g = int(expected * U(0.7, 1.3)) rows each, every group padded with -1
  rows to the mk alignment (128); baseline "cublas": a loop of torch.matmul, one per group, over
  the group's rows (its ranges known to the host, so it is captured in the same kind of graph);
- masked: max_m 4096, masked_m = int(expected * U(0.7, 1.3)), called with expected_m =
  int(expected * 1.2); baseline "cublas": one torch.bmm over the first max(masked_m) rows of every
  group (the rows any group needs; bmm cannot skip per-group rows).
TFLOPS count 2 * m_g * N * K over valid rows only (BENCH_FORMAT.md); TB/s (masked) counts A's
valid rows, all of B and D's valid rows once. A case that fails is recorded ("error" in its row)
and the others still run; the exit status is 1 if any failed.

Prints one table last and writes benchmarks/results/grouped_gemm-<gpu>.json (family
"grouped_gemm") and .md. FP8 grouped rows will join this file when the FP8 grouped kernels land
(same schedulers, see dg_triton/kernels/sm90_grouped_gemm.py): add a `kind` here and its runner.
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
from dg_triton import reference_grouped, testing  # noqa: E402
from dg_triton.utils import layout as mk_layout  # noqa: E402
from dg_triton.utils.math import align  # noqa: E402
from bench_gemm import geomean, versions, write_results  # noqa: E402
from shapes import GROUPED_CONTIGUOUS_GM, GROUPED_MASKED_GM, GROUPED_MASKED_MAX_M, GROUPED_NK  # noqa: E402

FAMILY = "grouped_gemm"
THRESHOLD = 1e-5
ALIGNMENT = 128
NAME_SUFFIX = ""
CONTIGUOUS_NOTE = "baseline cublas: a loop of torch.matmul per group over its rows"
MASKED_NOTE = "baseline cublas: torch.bmm over the first max(masked_m) rows of every group"


def timed_pair(ours, baseline):
    """Medians of ours and the baseline, timed in alternation three times each (the GPU slows as
    it heats under its power cap; bench_gemm.py does the same)."""
    ours_times, baseline_times = [], []
    for _ in range(3):
        ours_times.append(testing.bench_graph(ours))
        baseline_times.append(testing.bench_graph(baseline))
    return statistics.median(ours_times), statistics.median(baseline_times)


def check_rows(d, expected, meaningful, what):
    out, ref = d[meaningful], expected[meaningful]
    if not torch.isfinite(out.float()).all():
        raise AssertionError(f"{what}: unwritten (NaN) or non-finite elements in valid rows")
    diff = float(testing.calc_diff(out, ref))
    if not diff < THRESHOLD:
        raise AssertionError(f"{what}: calc_diff {diff:.3g} >= {THRESHOLD}")
    return diff


def plan_config(function):
    """The config of the latest CUDA plan of `function` ("portable" when the portable path ran)."""
    from dg_triton.kernels import sm90_grouped_gemm
    plans = [p for key, p in sm90_grouped_gemm._plans.items()
             if key[0] == function and p is not sm90_grouped_gemm._UNSUPPORTED]
    if os.environ.get("DG_BACKEND") == "triton" or not plans:
        return "portable"
    c = plans[-1].spec.config
    return f"{c.block_m}x{c.block_n}s{c.num_stages}"


def contiguous_case(num_groups, expected, n, k, psum):
    function = "m_grouped_bf16_gemm_nt_contiguous"
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
    ids = ids.cuda()
    ends = torch.tensor([s + size for s, size in zip(starts, sizes)], dtype=torch.int32, device="cuda")
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
    return name, shape, us, baseline_us, flops, None, diff, plan_config(function), CONTIGUOUS_NOTE


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
            MASKED_NOTE)


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--psum", action="store_true", help="also the contiguous psum layout")
    parser.add_argument("--no-masked", action="store_true")
    parser.add_argument("--no-contiguous", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "triton"],
                        help="triton: time the portable Triton path (DG_BACKEND=triton)")
    args = parser.parse_args()
    args.family = FAMILY
    global NAME_SUFFIX
    if args.backend == "triton":
        os.environ["DG_BACKEND"] = "triton"
        NAME_SUFFIX = ":portable"
    if not torch.cuda.is_available():
        print("bench_grouped: no CUDA device; nothing to time")
        return 0
    random.seed(0)
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name()
    cases = []
    if not args.no_contiguous:
        for psum in (False, True) if args.psum else (False,):
            for num_groups, expected in GROUPED_CONTIGUOUS_GM:
                for n, k in GROUPED_NK:
                    cases.append(("contiguous", (num_groups, expected, n, k, psum)))
    if not args.no_masked:
        for num_groups, expected in GROUPED_MASKED_GM:
            for n, k in GROUPED_NK:
                cases.append(("masked", (num_groups, expected, n, k)))

    rows, table, failures = [], [], []
    for kind, case in cases:
        label = f"{kind} {case}"
        try:
            result = contiguous_case(*case) if kind == "contiguous" else masked_case(*case)
        except Exception as error:  # a failing case is recorded; the others still run
            traceback.print_exc()
            failures.append(f"{label}: {type(error).__name__}: {error}")
            num_groups, expected, n, k = case[:4]
            rows.append({"name": f"m_grouped_bf16_gemm_nt_{kind}{NAME_SUFFIX}",
                         "shape": {"groups": num_groups, "expected_m": expected, "n": n, "k": k},
                         "ours": None, "baselines": {}, "error": f"{type(error).__name__}: {error}"})
            torch.cuda.empty_cache()
            continue
        name, shape, us, baseline_us, flops, nbytes, diff, config, note = result
        tbps = nbytes / us / 1e6 if nbytes else None
        rows.append({"name": name, "shape": shape,
                     "ours": {"us": round(us, 2), "tflops": round(flops / us / 1e6, 1),
                              "gbps": round(tbps * 1e3, 1) if tbps else None, "calc_diff": diff,
                              "config": config},
                     "baselines": {"cublas": {"us": round(baseline_us, 2),
                                              "tflops": round(flops / baseline_us / 1e6, 1)}},
                     "note": note})
        table.append((name, shape, config, us, flops / us / 1e6, tbps, baseline_us))
        print(f"{name} {shape}: {us:.1f} us ({flops / us / 1e6:.0f} TFLOPS), "
              f"baseline {baseline_us:.1f} us", flush=True)
        torch.cuda.empty_cache()
    extra = []
    try:
        host_overhead(rows, extra)
    except Exception as error:
        failures.append(f"host overhead: {type(error).__name__}: {error}")

    lines = [f"# {FAMILY} on {gpu}, {datetime.date.today()}", "",
             f"versions: {json.dumps(versions())}", f"command: python {' '.join(sys.argv)}", "",
             f"contiguous: {CONTIGUOUS_NOTE}; masked: {MASKED_NOTE}. TFLOPS over valid rows.", "",
             "| function | groups x m | N | K | config | ours us | ours TFLOPS | ours TB/s | baseline us | vs baseline |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, shape, config, us, tf, tbps, baseline_us in table:
        lines.append(f"| {name} | {shape['groups']} x {shape['expected_m']} | {shape['n']} | {shape['k']} | "
                     f"{config} | {us:.1f} | {tf:.0f} | {f'{tbps:.2f}' if tbps else '-'} | "
                     f"{baseline_us:.1f} | {baseline_us / us:.3f} |")
    lines.append("")
    for prefix in ("m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked"):
        ratios = [b / us for name, _s, _c, us, _t, _b, b in table if name.startswith(prefix)]
        if ratios:
            lines.append(f"{prefix}: geomean vs baseline {geomean(ratios):.3f} (worst {min(ratios):.3f})")
    lines += extra
    lines += [f"FAILED {f}" for f in failures]
    write_results(args, gpu, rows, "\n".join(lines), [])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
