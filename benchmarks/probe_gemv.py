"""Probe: the CUDA-core GEMV (dg_triton/triton/gemv.py) against the SM90 tensor-core kernel and
cuBLAS (FP8: per-tensor `_scaled_mm`; BF16: `torch.matmul`) at decode M, on the 7 (N, K) pairs of
API.md 8, to set heuristics.sm90's FP8/BF16_GEMV_MAX_M and FP8/BF16_GEMV_MIN_K. Every variant is checked against the
unquantized reference (calc_diff < 1e-3, output poisoned first) before it is timed; times are
medians of graph replays (L2 flushed), the variants timed in alternation three times over.

    python benchmarks/probe_gemv.py [--dtype fp8|bf16] [--ms 1,2,4,8]
                                    [--variants default,n8,n32,split_half,split_double,w4,w8]

Prints one table (us; ratios to the tensor-core kernel and to per-tensor cuBLAS in the same run)
and, per M, the geomean of the best GEMV variant over the tensor-core kernel.
"""
import argparse
import math
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import dg_triton  # noqa: E402
from bench_gemm import NK_PAIRS, cublas_fp8  # noqa: E402
from dg_triton import settings, testing  # noqa: E402
from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.triton import gemv  # noqa: E402


def variant_config(name: str, m: int, n: int, k: int, num_sms: int, scaled: bool = True) -> gemv.GemvConfig:
    """The default config, or one knob of it moved (`scaled`: FP8's default, else BF16's)."""
    config = gemv.choose_config(m, n, k, num_sms, scaled)
    k_groups = -(-k // (128 * config.groups))
    if name == "default":
        return config
    if name in ("n8", "n32"):
        block_n = int(name[1:])
        programs = -(-n // block_n)
        split = max(1, min(-(-4 * num_sms // programs), k_groups))
        return config._replace(block_n=block_n, split_k=split)
    if name == "split_half":
        return config._replace(split_k=max(1, config.split_k // 2))
    if name == "split_double":
        return config._replace(split_k=min(k_groups, 2 * config.split_k))
    if name in ("w4", "w8"):
        return config._replace(num_warps=int(name[1:]))
    if name == "g2":
        return config._replace(groups=max(1, config.groups // 2))
    raise ValueError(f"unknown variant {name}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="fp8", choices=["fp8", "bf16"])
    parser.add_argument("--ms", default="1,2,4,8")
    parser.add_argument("--variants", default="default,n8,n32,split_half,split_double,w4,w8")
    args = parser.parse_args()
    ms = [int(x) for x in args.ms.split(",")]
    variants = args.variants.split(",")
    # The "tensor-core" column goes through the public call: keep the GEMV out of it.
    shipped = heuristics.FP8_GEMV_MAX_M, heuristics.BF16_GEMV_MAX_M
    heuristics.FP8_GEMV_MAX_M = heuristics.BF16_GEMV_MAX_M = 0
    num_sms = settings.device_sm_count()
    fp8 = args.dtype == "fp8"
    header = ["M", "N", "K", "tensor-core us", "cuBLAS per-tensor us" if fp8 else "torch.matmul us"]
    header += [f"gemv {v} us" for v in variants]
    lines = ["| " + " | ".join(header) + " | best gemv vs tensor-core | best gemv vs cuBLAS |",
             "|" + "---|" * (len(header) + 2)]
    best_ratios = {m: [] for m in ms}
    for m in ms:
        for n, k in NK_PAIRS:
            a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
            ref = a.float() @ b.float().T
            d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            if fp8:
                a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
                b_q, sfb = dg_triton.per_block_cast_to_fp8(b, False)
                runs = {"tensor-core": lambda: dg_triton.fp8_gemm_nt((a_q, sfa), (b_q, sfb), d),
                        "cublas": cublas_fp8(a_q, sfa, b_q, sfb, blockwise=False)}
                threshold = 1e-3
            else:
                runs = {"tensor-core": lambda: dg_triton.bf16_gemm_nt(a, b, d),
                        "cublas": lambda: torch.matmul(a, b.T, out=d)}
                threshold = 1e-5
            try:
                runs["cublas"]()
            except RuntimeError as error:   # a shape per-tensor _scaled_mm refuses: say so
                print(f"    cuBLAS per-tensor unavailable at {m}x{n}x{k}: {str(error).splitlines()[0]}")
                del runs["cublas"]
            for name in variants:
                config = variant_config(name, m, n, k, num_sms, fp8)
                if fp8:
                    runs[name] = (lambda config=config: gemv.fp8_gemv(
                        "probe", a_q, sfa, b_q, sfb, d, "1d2d", False, config=config))
                else:
                    runs[name] = (lambda config=config: gemv.bf16_gemv("probe", a, b, d, False, config=config))
            for name, run in runs.items():
                if name == "cublas" and fp8:
                    continue   # unit scales: another product, timed only
                d.fill_(float("nan"))
                run()
                torch.cuda.synchronize()
                diff = float(testing.calc_diff(d.float(), ref))
                assert torch.isfinite(d).all() and diff < threshold, f"{name} {m}x{n}x{k}: calc_diff {diff}"
            times = {name: [] for name in runs}
            for _ in range(3):
                for name, run in runs.items():
                    times[name].append(testing.bench_graph(run, warmup_ms=5, rep_ms=20))
            us = {name: statistics.median(t) for name, t in times.items()}
            us.setdefault("cublas", float("nan"))
            best = min(variants, key=lambda v: us[v])
            best_ratios[m].append(us["tensor-core"] / us[best])
            cells = [str(m), str(n), str(k), f"{us['tensor-core']:.1f}", f"{us['cublas']:.1f}"]
            cells += [f"{us[v]:.1f}" for v in variants]
            cells += [f"{us['tensor-core'] / us[best]:.2f} ({best})", f"{us['cublas'] / us[best]:.2f}"]
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    print("\n".join(lines))
    for m in ms:
        ratios = best_ratios[m]
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"M={m}: best GEMV vs tensor-core kernel geomean {geomean:.3f} (worst {min(ratios):.3f})")
    print(f"(shipped: heuristics.sm90.FP8_GEMV_MAX_M {shipped[0]}, BF16_GEMV_MAX_M {shipped[1]})")


if __name__ == "__main__":
    main()
