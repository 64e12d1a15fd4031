"""Probe: launch variants of the FP4 cast, the FP4 transpose and the per-channel cast (issue 3) at
the bench_prologue sizes, each checked bitwise against the library's default launch (on random data
and on data with NaN and Inf planted) and timed beside a copy of the same bytes in the same run
(the copy as bench_prologue times it). First, the division helpers of
dg_triton.triton.exact_math are checked against div_rn for every positive fp32 bit pattern.
Prints one table; NOTES.md keeps the conclusions.

    python benchmarks/probe_prologue.py [--kernels fp4,transpose_fp4,per_channel] [--rounds N] [--skip-division-check]
"""
import argparse
import functools
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import probe_prologue_kernels as variants  # noqa: E402
from dg_triton import testing  # noqa: E402
from dg_triton.triton.fp4 import per_token_cast_to_fp4_triton, transpose_packed_fp4_triton  # noqa: E402
from dg_triton.triton.quant import per_channel_cast_to_fp8_triton  # noqa: E402

SHAPES = ((4096, 7168), (16384, 7168))
# Overrides of the launchers' tiles (the defaults are the winners of the 2026-12-02 runs, which
# also tried the grid's axis order and div_rn against exact_math's divisions: NOTES.md session 15).
# sat_compares False: the E2M1 index's 0.25 / 0.75 midpoints by compare and select (before session 20);
# maxnreg 255: ptxas's widest cap (the default caps at 64 with the saturating FMAs; with 255 ptxas
# may take more registers than the 72 it takes with no cap at all).
FP4_VARIANTS = ({}, {"maxnreg": 255}, {"sat_compares": False}, {"sat_compares": False, "maxnreg": 64},
                {"block_m": 8, "num_warps": 2})
TRANSPOSE_VARIANTS = ({}, {"bytes_fast": False}, {"block_bytes": 128}, {"block_bytes": 128, "bytes_fast": True},
                      {"block_rows": 512}, {"num_warps": 8, "block_bytes": 128})
PER_CHANNEL = ({}, {"block_n": 64, "num_warps": 4}, {"block_n": 128, "num_warps": 4})
# per-channel in two passes: (block_n, num_warps, rows per slice)
TWO_PASS = ((64, 2, 64), (64, 2, 32))


def check_divisions(lines):
    """Every fp32 in [2^-100, 2^120) (the casts' domain: amax >= 1e-4, sf <= 3.4e38 / 448), then
    [2^120, +Inf] for information (1 / x is subnormal above 2^126)."""
    names = ("div_rn_by_448(a) vs div_rn(a, 448)", "div_rn_by_6(a) vs div_rn(a, 6)",
             "reciprocal_rn(a) vs div_rn(1, a)")
    results = []
    for label, start, stop in (("[2^-100, 2^120)", 0x0D800000, 0x7B800000), ("[2^120, +Inf]", 0x7B800000, 0x7F800001)):
        counts = torch.zeros(3, dtype=torch.int32, device="cuda")
        first = torch.full((3,), 2**31 - 1, dtype=torch.int32, device="cuda")
        block, chunk = 1024, 1 << 30
        for begin in range(start, stop, chunk):
            count = min(chunk, stop - begin)
            variants.division_mismatch_kernel[(triton.cdiv(count, block),)](counts, first, begin, count,
                                                                             BLOCK=block)
        torch.cuda.synchronize()
        for name, c, f in zip(names, counts.tolist(), first.tolist()):
            lines.append(f"exhaustive {name} over {label} ({stop - start} values): {c} mismatches"
                         + (f", first at bits 0x{f:08x}" if c else ""))
            print(lines[-1], flush=True)
        results.append(counts.tolist())
    return results


def copy_us(num_bytes: int) -> float:
    src = torch.empty(num_bytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return testing.bench(functools.partial(dst.copy_, src), num_warmups=3, num_tests=20,
                         high_precision=True) * 1e6


def nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def with_specials(x):
    """A copy of x with NaN, +-Inf and a zero column planted in a few places."""
    y = x.clone()
    y[3, 5] = float("nan")
    y[200, 77] = float("inf")
    y[1000, 1000] = -float("inf")
    y[:, 300] = 0
    return y


def probe(name, fn, variant_list, x, lines, specials=True):
    reference = fn(x, {})
    special_input = with_specials(x) if specials else None
    special_reference = fn(special_input, {}) if specials else None
    moved = nbytes(x, *reference)
    copy = copy_us(moved)
    for kwargs in variant_list:
        run = functools.partial(fn, x, kwargs)
        try:
            for ours, ref in zip(run(), reference):
                testing.assert_bitwise_equal(ours.contiguous(), ref.contiguous(), f"{name} {kwargs}")
            if specials:
                for ours, ref in zip(fn(special_input, kwargs), special_reference):
                    testing.assert_bitwise_equal(ours.contiguous(), ref.contiguous(), f"{name} {kwargs} specials")
        except AssertionError as error:
            lines.append(f"| {name} | {'x'.join(map(str, x.shape))} | {kwargs or 'default'} | FAILED {error} | | |")
            print(lines[-1], flush=True)
            continue
        us = testing.bench_graph(run)
        lines.append(f"| {name} | {'x'.join(map(str, x.shape))} | {kwargs or 'default'} | {us:.1f} | "
                     f"{copy:.1f} | {copy / us:.2f} |")
        print(lines[-1], flush=True)


def per_channel(x, kwargs):
    if "chunk" not in kwargs:
        return per_channel_cast_to_fp8_triton(x, False, **kwargs)
    m, n = x.shape
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn, device=x.device)
    sf = torch.empty((m // 128, n), dtype=torch.float32, device=x.device)
    variants.per_channel_two_pass_kernel[(triton.cdiv(n, kwargs["block_n"]), m // 128)](
        x, q, sf, n, x.stride(0), x.stride(1), GRAN_K=128, BLOCK_N=kwargs["block_n"],
        CHUNK=kwargs["chunk"], num_warps=kwargs["num_warps"])
    return q, sf


def fp4(x, kwargs):
    return per_token_cast_to_fp4_triton(x, True, 32, True, **kwargs)


def transpose_fp4(packed, kwargs):
    return (transpose_packed_fp4_triton(packed, **kwargs),)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernels", default="fp4,per_channel", help="comma-separated: fp4, transpose_fp4, per_channel")
    parser.add_argument("--rounds", type=int, default=1, help="times through every variant, in turn")
    parser.add_argument("--skip-division-check", action="store_true")
    args = parser.parse_args()
    kernels = args.kernels.split(",")
    lines = []
    if not args.skip_division_check:
        check_divisions(lines)
    lines += ["", "| kernel | shape | variant | us | copy us | vs copy |", "|---|---|---|---|---|---|"]
    two_pass = [{"block_n": bn, "num_warps": w, "chunk": ch} for bn, w, ch in TWO_PASS]
    for _ in range(args.rounds):
        for m, k in SHAPES:
            x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            if "fp4" in kernels:
                probe("per_token_cast_to_fp4", fp4, FP4_VARIANTS, x, lines)
            if "transpose_fp4" in kernels:
                probe("transpose_packed_fp4", transpose_fp4, TRANSPOSE_VARIANTS, fp4(x, {})[0], lines,
                      specials=False)
            if "per_channel" in kernels:
                probe("per_channel_cast_to_fp8", per_channel, list(PER_CHANNEL) + two_pass, x, lines)
            del x
    print("\n".join(lines))


if __name__ == "__main__":
    main()
