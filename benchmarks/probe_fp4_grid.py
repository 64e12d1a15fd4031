"""Probe: the FP4 cast with its 2-D grid (the default) against the flat 1-D grid it falls back
to above 65535 row blocks, at the bench_prologue sizes: bitwise equal, timed in alternation.

    python benchmarks/probe_fp4_grid.py
"""
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dg_triton import testing  # noqa: E402
from dg_triton.triton import fp4  # noqa: E402


def main():
    cast = functools.partial(fp4.per_token_cast_to_fp4_triton, use_ue8m0=True, gran_k=32,
                             use_packed_ue8m0=True)
    limit = fp4._MAX_GRID_Y
    for m, n in ((4096, 7168), (16384, 7168)):
        x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
        times = {"2-D": [], "flat": []}
        want = cast(x)
        for _ in range(3):
            for name, grid_limit in (("2-D", limit), ("flat", 0)):
                fp4._MAX_GRID_Y = grid_limit
                for got, ref in zip(cast(x), want):
                    testing.assert_bitwise_equal(got, ref, f"{name} {m}x{n}")
                times[name].append(testing.bench_graph(functools.partial(cast, x)))
        fp4._MAX_GRID_Y = limit
        print(f"{m}x{n}: " + ", ".join(f"{k} {sorted(v)[1]:.1f} us (runs {', '.join(f'{t:.1f}' for t in v)})"
                                      for k, v in times.items()), flush=True)


if __name__ == "__main__":
    main()
