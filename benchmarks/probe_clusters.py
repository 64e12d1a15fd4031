"""Do 2-CTA clusters pay at M=4096? For each benchmark shape, times its chosen tile without a
cluster, with a cluster along M (B shared by TMA multicast, as cuBLAS's nvjet kernels do) and
along N (A shared), and cuBLAS, in alternation; then reads the SM clock and power while each runs
sustained (the H200 runs at its power cap here, so fewer L2 -> SM bytes may mean higher clocks).

    python benchmarks/probe_clusters.py
"""
import functools
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dg_triton import testing, validation  # noqa: E402
from dg_triton.heuristics.sm90 import choose_bf16_gemm_config, make_config  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm  # noqa: E402

SHAPES = ((4096, 2112, 7168), (4096, 576, 7168), (4096, 24576, 1536), (4096, 32768, 512),
          (4096, 7168, 16384), (4096, 4096, 7168), (4096, 7168, 2048))


def clock_and_power(fn, seconds=1.0):
    """SM clock (MHz) and power (W) read by nvidia-smi while `fn` replays back to back."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    replays = max(1, int(seconds * 1e3 / start.elapsed_time(end)))
    for _ in range(replays):
        graph.replay()
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    torch.cuda.synchronize()
    clock, power = (float(x) for x in out.strip().split(","))
    return clock, power


def main():
    print("| shape | tile | none us | cluster M us | cluster N us | cuBLAS us | best vs cuBLAS |"
          " MHz/W none | MHz/W M | MHz/W cuBLAS |", flush=True)
    for m, n, k in SHAPES:
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        ref = a.float() @ b.float().T
        problem = validation.bf16_gemm("probe", a, b, d, None)
        base = choose_bf16_gemm_config(m, n, k, 2, 132)
        variants = {"none": make_config(m, n, base.block_m, base.block_n, 1, k, 2, 132),
                    "M": make_config(m, n, base.block_m, base.block_n, 1, k, 2, 132, 1, 2),
                    "N": make_config(m, n, base.block_m, base.block_n, 1, k, 2, 132, 2, 1)}
        fns = {}
        for name, config in variants.items():
            if config is None:
                continue
            fn = functools.partial(sm90_bf16_gemm.run, "probe", a, b, d, problem[:7], problem[7],
                                   False, "", config)
            d.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            diff = float(testing.calc_diff(d.float(), ref))
            assert torch.isfinite(d).all() and diff < 1e-5, (name, diff)
            fns[name] = fn
        fns["cuBLAS"] = functools.partial(torch.matmul, a, b.T)
        times = {name: [] for name in fns}
        for _ in range(3):
            for name, fn in fns.items():
                times[name].append(testing.bench_graph(fn, warmup_ms=5, rep_ms=30))
        med = {name: statistics.median(t) for name, t in times.items()}
        best = min(v for key, v in med.items() if key != "cuBLAS")
        clocks = {name: clock_and_power(fns[name]) for name in ("none", "M", "cuBLAS") if name in fns}
        fmt = lambda name: f"{med[name]:.1f}" if name in med else "-"  # noqa: E731
        cp = lambda name: f"{clocks[name][0]:.0f}/{clocks[name][1]:.0f}" if name in clocks else "-"  # noqa: E731
        print(f"| {m}x{n}x{k} | {base.block_m}x{base.block_n} | {fmt('none')} | {fmt('M')} | "
              f"{fmt('N')} | {fmt('cuBLAS')} | {med['cuBLAS'] / best:.3f} | {cp('none')} | "
              f"{cp('M')} | {cp('cuBLAS')} |", flush=True)
        del a, b, d, ref


if __name__ == "__main__":
    main()
