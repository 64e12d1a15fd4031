"""Probe: where the FP8 1D1D (wgrad) kernel's time goes against 1D2D, on the wgrad shapes.

The 1D1D promotion costs each consumer thread an FMUL (sfa[row] * sfb[col]) and an FFMA per
accumulator element per 128-wide K block, plus the loads of its columns' sfb; 1D2D costs one FFMA.
At 128x112 that is 166 issued instructions per K block and warp against 1D2D 128x128's 105
(the SASS of the two builds). Cost probes (fp8_gemm.cuh, DG_PROBE_1D1D_*) take parts of that
away, each right only for inputs whose omitted scales are all 1, which is what they get here:

    a-only      one FFMA with sfa, no sfb loads (94 instructions; sfb = 1)
    b-only      one FFMA with sfb, sfb loads kept (106; sfa = 1)
    no-scales   acc += partial (92; sfa = sfb = 1)

against the shipped 1D1D build (real scales, and all-ones scales: the values must not matter),
the same without c (FP32 D, no accumulation: what the epilogue's c costs), and 1D2D 128x128
(BF16 D) on the same problem. (Since 2026-12-05 the shipped build loads c under the K loop; the
table in results/probe_1d1d_cost-h100.txt was taken before, with c loaded at the store, which
the -late-c variants build.) Each variant is checked against the dequantized product of the
inputs it got, then timed in alternation (graph replay, L2 flushed; the clock drifts under the
power cap). `--once VARIANT` runs one call between cudaProfilerStart/Stop for Nsight Compute.

    python benchmarks/probe_1d1d_cost.py [--shapes MxNxK,...] [--rounds 3]
    ncu --profile-from-start off ... python benchmarks/probe_1d1d_cost.py --once no-scales --shapes 4096x4096x7168
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import dg_triton  # noqa: E402
from probe_ncu import profile_one_call  # noqa: E402
from dg_triton import testing  # noqa: E402
from dg_triton.heuristics.sm90 import make_fp8_config  # noqa: E402
from dg_triton.reference_fp8 import dequantize_operand  # noqa: E402
from dg_triton.kernels import sm90_fp8_gemm  # noqa: E402

# wgrad shapes of API.md 8: (M = n, N = 4096, K = k)
SHAPES = [(4096, 4096, 7168), (2112, 4096, 7168), (7168, 4096, 2048)]

# label: (kind, block_n, accumulate, probe defines, sfa all ones, sfb all ones)
VARIANTS = {
    "1d1d": ("1d1d", 112, True, (), False, False),
    "1d1d-ones": ("1d1d", 112, True, (), True, True),
    "1d1d-no-c": ("1d1d", 112, False, (), False, False),
    "a-only": ("1d1d", 112, True, ("DG_PROBE_1D1D_SCALE_A_ONLY",), False, True),
    "b-only": ("1d1d", 112, True, ("DG_PROBE_1D1D_SCALE_B_ONLY",), True, False),
    "no-scales": ("1d1d", 112, True, ("DG_PROBE_1D1D_NO_SCALES",), True, True),
    "1d2d": ("1d2d", 128, False, (), False, False),
    # where the tile's c is loaded: under the K loop (the default) or at the store
    "1d1d-late-c": ("1d1d", 112, True, ("DG_PROBE_LATE_C_LOAD",), False, False),
    "1d1d-144": ("1d1d", 144, True, (), False, False),
    "1d1d-144-late-c": ("1d1d", 144, True, ("DG_PROBE_LATE_C_LOAD",), False, False),
}


def ones_like_layout(t: torch.Tensor) -> torch.Tensor:
    """All ones in t's exact strides (the TMA-aligned MN-major scale layout has padding)."""
    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).fill_(1.0)


def make_call(label: str, m: int, n: int, k: int, a: torch.Tensor, b: torch.Tensor):
    kind, block_n, accumulate, defines, ones_a, ones_b = VARIANTS[label]
    a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
    if kind == "1d2d":
        b_q, sfb = dg_triton.per_block_cast_to_fp8(b, False)
    else:
        b_q, sfb = dg_triton.per_token_cast_to_fp8(b, False, tma_aligned_sf=True)
    if ones_a:
        sfa = ones_like_layout(sfa)
    if ones_b:
        sfb = ones_like_layout(sfb)
    ref = (dequantize_operand(a_q, sfa, m, 1, 128)
           @ dequantize_operand(b_q, sfb, n, 128 if kind == "1d2d" else 1, 128).T)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16 if kind == "1d2d" else torch.float32)
    c = torch.randn(m, n, device="cuda").mul_(float(ref.abs().mean())) if accumulate else None
    layout = (d.dtype, a_q.stride(), b_q.stride(), d.stride(), sfa.stride(), sfb.stride())
    problem = sm90_fp8_gemm.Fp8GemmProblem(m, n, k, kind, d.device.index, None, layout)
    config = make_fp8_config(kind, m, n, 128, block_n, 1, k, d.element_size(), 132)

    def call():
        sm90_fp8_gemm.run("probe", a_q, sfa, b_q, sfb, d, problem, accumulate, "", config, defines)

    # Check once: c (the timed repeats keep adding to it) or a poisoned D.
    if accumulate:
        d.copy_(c)
    else:
        d.fill_(float("nan"))
    call()
    torch.cuda.synchronize()
    expected = ref + c if accumulate else ref
    diff = float(testing.calc_diff(d.float(), expected))
    assert torch.isfinite(d).all() and diff < 1e-3, f"{label} {m}x{n}x{k}: calc_diff {diff}"
    return call, config


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--once", default=None, help="one call of this variant, for Nsight Compute")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    labels = args.variants.split(",")
    torch.manual_seed(0)
    if args.once:
        m, n, k = shapes[0]
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        call, _ = make_call(args.once, m, n, k, a, b)
        profile_one_call(call, warmups=1)
        return
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, rounds {args.rounds}")
    header = "| shape (M x N x K) | " + " | ".join(labels) + " |"
    lines = [header, "|---" * (1 + len(labels)) + "|"]
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        calls = [make_call(label, m, n, k, a, b)[0] for label in labels]
        times = [[] for _ in labels]
        for _ in range(args.rounds):
            for i, call in enumerate(calls):
                times[i].append(testing.bench_graph(call, warmup_ms=5, rep_ms=30))
        medians = [statistics.median(t) for t in times]
        base = medians[labels.index("1d1d")] if "1d1d" in labels else medians[0]
        cells = " | ".join(f"{us:.1f} us {2 * m * n * k / us / 1e6:.0f} TF ({base / us:.2f})"
                           for us in medians)
        lines.append(f"| {m}x{n}x{k} | {cells} |")
        print(lines[-1], flush=True)
    print("(each cell: median us, TFLOPS, and speed relative to the shipped 1d1d build)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
