"""Probe: BF16 GEMM kernel variants (compile-time macros, Bf16GemmKernelSpec.probe_defines) side
by side with cuBLAS (torch.matmul) on the M=4096 shapes of API.md section 8, each checked against
the reference before it is timed, all timed in alternation (the GPU's clock drifts under its power
cap). Prints one table; NOTES.md keeps the conclusions.

    python benchmarks/probe_bf16.py [--variants ",DG_SOME_MACRO"] [--shapes 4096x4096x7168,...]
                                    [--accumulate [--bitwise]] [--configs pick,128x144s4,...]

--configs times forced tile configs instead of macro variants: BMxBNsS (stages S, up to what fits
beside the narrowest epilogue staging) with an optional gG (the L2 group), each beside the
heuristics' pick ("pick"); a config that does not fit is timed as the pick.

A macro the kernel does not read builds the baseline under another name. Probe macros today:
DG_PROBE_EARLY_C_LOAD (c loaded under the K loop; with --accumulate, which times FP32 D += c,
and --bitwise, which requires every variant's output to equal the first's); DG_PROBE_NO_STMATRIX
(the epilogue's pair stores instead of stmatrix, epilogue.cuh: bitwise the same output);
DG_PROBE_STAGGER_<d> (warpgroup 1 starts its first tile d K blocks late; with
DG_PROBE_STAGGER_EVERY_TILE every tile: bf16_gemm.cuh, bitwise the same output). 2026-12-02's
DG_PROBE_OVERLAP_EPILOGUE / DG_PROBE_DIRECT_STORE (NOTES.md, session 12) were measured slower and
removed; their code is in commit 15c1cd3. The cuBLAS column is always torch.matmul with a bf16 D
and no c.
"""
import argparse
import dataclasses
import re
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dg_triton import testing, validation  # noqa: E402
from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm  # noqa: E402
from tests.shapes import BF16_DENSE_BF16_OUT_NK as DENSE_NK  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", default="",
                        help="comma-separated macro sets ('+' joins macros; empty = baseline)")
    parser.add_argument("--shapes", default=",".join(f"4096x{n}x{k}" for n, k in DENSE_NK),
                        help="comma-separated MxNxK")
    parser.add_argument("--accumulate", action="store_true", help="time FP32 D += c instead")
    parser.add_argument("--bitwise", action="store_true",
                        help="require every variant's output to equal the first's, bit for bit")
    parser.add_argument("--configs", default="",
                        help="comma-separated forced configs BMxBNsS[gG] or 'pick' (instead of --variants)")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.shapes.split(",")]
    if args.configs:
        variants = [((), name) for name in args.configs.split(",")]
        names = [name for _, name in variants] + ["cuBLAS"]
    else:
        variants = [(tuple(v for v in group.split("+") if v), "pick") for group in args.variants.split(",")]
        names = [("+".join(v) or "baseline") for v, _ in variants] + ["cuBLAS"]
    lines = ["| shape | " + " | ".join(names) + " | " + " | ".join(f"{x} / cuBLAS" for x in names[:-1]) + " |",
             "|---" * (1 + 2 * len(names) - 1) + "|"]
    ratios = [[] for _ in variants]
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.float32 if args.accumulate else torch.bfloat16)
        # c as large as the product, so that a c read late, stale or not at all shows
        c = torch.randn(m, n, device="cuda").mul_(k ** 0.5) if args.accumulate else None
        ref = a.float() @ b.float().T + (c if c is not None else 0)
        result = validation.bf16_gemm("probe", a, b, d, d if args.accumulate else None)
        problem, addresses = result[:7], result[7]
        runs, first = [], None
        for defines, config_name in variants:
            config = forced_config(config_name, m, n, k, d.element_size())
            if config_name != "pick" and config is None:
                print(f"{m}x{n}x{k} {config_name}: does not fit, timed as the pick", flush=True)
            run = (lambda defines=defines, config=config: sm90_bf16_gemm.run(
                "probe", a, b, d, problem, addresses, args.accumulate, "nk", config, defines))
            if c is not None:
                d.copy_(c)   # the timed repeats keep adding to it; only this run is checked
            else:
                d.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            diff = float(testing.calc_diff(d.float(), ref))
            assert torch.isfinite(d).all() and diff < 1e-5, f"{defines} {config_name}: calc_diff {diff}"
            if first is None:
                first = d.clone()
            elif args.bitwise:
                assert torch.equal(d, first), f"{defines} {config_name}: differs from {variants[0]}"
            runs.append(run)
        d_cublas = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        runs.append(lambda: torch.matmul(a, b.T, out=d_cublas))
        times = [[] for _ in runs]
        for _ in range(3):
            for i, run in enumerate(runs):
                times[i].append(testing.bench_graph(run, warmup_ms=5, rep_ms=30))
        medians = [statistics.median(t) for t in times]
        for i in range(len(variants)):
            ratios[i].append(medians[-1] / medians[i])
        cells = " | ".join(f"{us:.1f} us {2 * m * n * k / us / 1e6:.0f} TF" for us in medians)
        lines.append(f"| {m}x{n}x{k} | {cells} | "
                     + " | ".join(f"{medians[-1] / us:.3f}" for us in medians[:-1]) + " |")
        print(lines[-1], flush=True)
    lines.append("geomean vs cuBLAS: " + ", ".join(
        f"{name} {statistics.geometric_mean(r):.3f}" for name, r in zip(names, ratios)))
    print("\n".join(lines))


def forced_config(name: str, m: int, n: int, k: int, out_bytes: int):
    """The config `name` (BMxBNsS[gG]) for this shape, None for "pick" or when it does not fit."""
    if name == "pick":
        return None
    block_m, block_n, stages, group = re.fullmatch(r"(\d+)x(\d+)s(\d+)(?:g(\d+))?", name).groups()
    config = heuristics.make_config(m, n, int(block_m), int(block_n), 1, k, out_bytes, 132)
    if config is None or int(stages) > heuristics.max_stages(int(block_m), int(block_n), out_bytes,
                                                             cap=int(stages), narrow_staging=True):
        return None
    return dataclasses.replace(config, num_stages=int(stages),
                               group_m=int(group) if group else config.group_m)


if __name__ == "__main__":
    main()
