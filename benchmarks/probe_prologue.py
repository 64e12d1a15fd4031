"""Probe: launch variants of the prologue kernels still under 0.8 of a copy (FP4 per-token cast rows
per program, per-channel FP8 cast tile and warps) at the bench_prologue sizes, each checked
bitwise against the library's default launch and timed beside a copy of the same bytes in the
same run (the copy as bench_prologue times it). Prints one table; NOTES.md keeps the conclusions.

    python benchmarks/probe_prologue.py
"""
import functools
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dg_triton import testing  # noqa: E402
from dg_triton.triton.fp4 import per_token_cast_to_fp4_triton  # noqa: E402
from dg_triton.triton.quant import per_channel_cast_to_fp8_triton  # noqa: E402

SHAPES = ((4096, 7168), (16384, 7168))
FP4_VARIANTS = ({}, {"block_m": 32}, {"block_m": 8})
PER_CHANNEL_VARIANTS = ({}, {"block_n": 128, "num_warps": 4}, {"block_n": 64, "num_warps": 4},
                        {"block_n": 32, "num_warps": 2})


def copy_us(num_bytes: int) -> float:
    src = torch.empty(num_bytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return testing.bench(functools.partial(dst.copy_, src), num_warmups=3, num_tests=20,
                         high_precision=True) * 1e6


def nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def probe(name, fn, variants, x, lines):
    reference = fn(x)
    moved = nbytes(x, *reference)
    copy = copy_us(moved)
    for kwargs in variants:
        run = functools.partial(fn, x, **kwargs)
        for ours, ref in zip(run(), reference):
            testing.assert_bitwise_equal(ours.contiguous(), ref.contiguous(), f"{name} {kwargs}")
        us = testing.bench_graph(run)
        lines.append(f"| {name} | {x.shape[0]}x{x.shape[1]} | {kwargs or 'default'} | {us:.1f} | "
                     f"{copy:.1f} | {copy / us:.2f} |")
        print(lines[-1], flush=True)


def main():
    lines = ["| kernel | shape | variant | us | copy us | vs copy |", "|---|---|---|---|---|---|"]
    for m, k in SHAPES:
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        probe("per_token_cast_to_fp4", lambda x, **kw: per_token_cast_to_fp4_triton(x, True, 32, True, **kw),
              FP4_VARIANTS, x, lines)
        probe("per_channel_cast_to_fp8", lambda x, **kw: per_channel_cast_to_fp8_triton(x, False, **kw),
              PER_CHANNEL_VARIANTS, x, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
