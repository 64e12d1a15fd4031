"""Probe: the L2 group of the persistent tile order (group_m, scheduler.cuh) for the BF16 and FP8
1D2D GEMMs on the M=4096 shapes of API.md 8, beside cuBLAS in the same run.

Why: Nsight Compute read 327 MB of DRAM for our BF16 4096x4096x7168 (128x256, group 8) against
cuBLAS's 264 MB; the bytes each wave of the grid fetches if nothing survives in L2 from one wave
to the next are 327 at group 8 and 261 at group 16 (heuristics.sm90.tile_order_hbm_bytes, whose
model MB column also counts blocks reused from L2). Under
the H200's 700 W cap fewer DRAM bytes are more clock. For each shape: the heuristic pick (tuned
entry or cost model) with every group of --group-ms, the model's MB for each, checked against the
reference (NaN-poisoned output; BF16 calc_diff < 1e-5, FP8 < 1e-3) and timed in alternation with
cuBLAS (--rounds rounds, CUDA-graph replay, L2 flushed). Compiled dims as the API's defaults ("nk").

    python benchmarks/probe_l2_group.py [--families bf16,fp8] [--group-ms 4,8,16,32 | 8,model]
                                        [--cluster-ms 1,2] [--shapes 4096x4096x7168,...] [--rounds 3]
    python benchmarks/probe_l2_group.py --prebuild   # compile every binary (no GPU) into DG_JIT_CACHE_DIR
"""
import argparse
import dataclasses
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm, sm90_fp8_gemm  # noqa: E402

SHAPES = [(4096, 2112, 7168), (4096, 576, 7168), (4096, 24576, 1536), (4096, 32768, 512),
          (4096, 7168, 16384), (4096, 4096, 7168), (4096, 7168, 2048)]
NUM_SMS = 132


def pick(family, m, n, k):
    if family == "bf16":
        return heuristics.choose_bf16_gemm_config(m, n, k, 2, NUM_SMS)
    return heuristics.choose_fp8_gemm_config(m, n, k, 2, NUM_SMS, "1d2d")


def spec_for(family, config, n, k):
    if family == "bf16":
        return sm90_bf16_gemm.Bf16GemmKernelSpec(config, True, True, torch.bfloat16, False, 0, n, k)
    return sm90_fp8_gemm.Fp8GemmKernelSpec(config, False, torch.bfloat16, False, 0, n, k)


def configs_for(family, m, n, k, group_ms, cluster_ms=(1,)):
    """The heuristic pick with each group of group_ms ("model" is the pick's own group,
    heuristics.sm90.with_l2_group, listed once) and each cluster of cluster_ms along M (2: the pair
    of CTAs shares B through TMA multicast; where the pick's block rows are even)."""
    base = pick(family, m, n, k)
    configs = []
    for cluster_m in cluster_ms:
        if cluster_m > 1 and ((m + base.block_m - 1) // base.block_m) % cluster_m:
            continue
        for g in group_ms:
            config = dataclasses.replace(base, group_m=base.group_m if g == "model" else int(g),
                                         cluster_m=cluster_m)
            if config not in configs:
                configs.append(config)
    return configs


def model_mb(family, config, m, n, k):
    return heuristics.tile_order_hbm_bytes(m, n, k, config.block_m, config.block_n, config.group_m,
                                           config.num_sms, 2 if family == "bf16" else 1,
                                           config.cluster_m, config.cluster_n) / 1e6


def _compile(item):
    family, config, n, k = item
    spec = spec_for(family, config, n, k)
    (sm90_bf16_gemm if family == "bf16" else sm90_fp8_gemm).compile_spec(spec)
    return spec.name


def prebuild(families, shapes, group_ms, cluster_ms):
    items = {}
    for family in families:
        for m, n, k in shapes:
            for config in configs_for(family, m, n, k, group_ms, cluster_ms):
                items.setdefault(spec_for(family, config, n, k).source(), (family, config, n, k))
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        for name in pool.map(_compile, items.values()):
            print(f"    built {name}", flush=True)
    print(f"{len(items)} binaries into {os.environ.get('DG_JIT_CACHE_DIR', 'the default cache')}")


def runs_for(family, m, n, k, configs):
    """(checked runs of each config, the cuBLAS run, the reference and the output)."""
    if family == "fp8":
        from fp8_probe_operands import fp8_1d2d_operands
        ops = fp8_1d2d_operands(m, n, k)
        return [lambda c=c: ops.run(c, "nk") for c in configs], ops.cublas_blockwise(), ops.ref, ops.d, 1e-3
    from dg_triton import validation
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    result = validation.bf16_gemm("probe", a, b, d, None)
    problem, addresses = result[:7], result[7]
    runs = [lambda c=c: sm90_bf16_gemm.run("probe", a, b, d, problem, addresses, False, "nk", c)
            for c in configs]
    d_ref = torch.empty_like(d)
    return runs, (lambda: torch.matmul(a, b.T, out=d_ref)), a.float() @ b.float().T, d, 1e-5


def measure(families, shapes, group_ms, cluster_ms, rounds):
    from dg_triton import testing
    lines = ["| family | shape | config | group | model MB | us | TFLOPS | vs first | vs cuBLAS |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratios = {}
    for family in families:
        for m, n, k in shapes:
            configs = configs_for(family, m, n, k, group_ms, cluster_ms)
            runs, cublas, ref, d, threshold = runs_for(family, m, n, k, configs)
            for config, run in zip(configs, runs):
                d.fill_(float("nan"))
                run()
                torch.cuda.synchronize()
                diff = float(testing.calc_diff(d.float(), ref))
                assert torch.isfinite(d).all() and diff < threshold, \
                    f"{family} {m}x{n}x{k} group {config.group_m}: calc_diff {diff:.3g}"
            times = [[] for _ in range(len(runs) + 1)]
            for _ in range(rounds):
                for i, run in enumerate(runs + [cublas]):
                    times[i].append(testing.bench_graph(run, warmup_ms=5, rep_ms=30))
            medians = [statistics.median(t) for t in times]
            base = medians[0]
            chosen = pick(family, m, n, k)
            for config, us in zip(configs, medians):
                label = f"{config.group_m}" + (f" cm{config.cluster_m}" if config.cluster_m > 1 else "")
                ratios.setdefault((family, label), []).append(medians[-1] / us)
                if config == chosen:
                    ratios.setdefault((family, "model"), []).append(medians[-1] / us)
                lines.append(f"| {family} | {m}x{n}x{k} | {config.block_m}x{config.block_n}"
                             f"s{config.num_stages} | {label} | "
                             f"{model_mb(family, config, m, n, k):.0f} | {us:.1f} | "
                             f"{2 * m * n * k / us / 1e6:.0f} | {base / us:.3f} | {medians[-1] / us:.3f} |")
                print(lines[-1], flush=True)
            lines.append(f"| {family} | {m}x{n}x{k} | cuBLAS | - | - | {medians[-1]:.1f} | "
                         f"{2 * m * n * k / medians[-1] / 1e6:.0f} | - | 1.000 |")
            print(lines[-1], flush=True)
    print("\n".join(lines))
    for (family, group), values in sorted(ratios.items()):
        print(f"{family} group {group}: geomean vs cuBLAS {statistics.geometric_mean(values):.3f} "
              f"over {len(values)} shapes")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default="bf16,fp8")
    parser.add_argument("--group-ms", default="4,8,16,32",
                        help='comma-separated groups; "model": the heuristics\' own choice')
    parser.add_argument("--cluster-ms", default="1", help="comma-separated CTAs per cluster along M (1, 2)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated timing rounds")
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--prebuild", action="store_true", help="compile only (no GPU needed)")
    args = parser.parse_args()
    families = args.families.split(",")
    group_ms = [x if x == "model" else int(x) for x in args.group_ms.split(",")]
    cluster_ms = [int(x) for x in args.cluster_ms.split(",")]
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    if args.prebuild:
        prebuild(families, shapes, group_ms, cluster_ms)
    else:
        measure(families, shapes, group_ms, cluster_ms, args.rounds)


if __name__ == "__main__":
    main()
