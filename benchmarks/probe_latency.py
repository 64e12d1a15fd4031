"""Probe: where the time of a small GEMM goes. For decode and small-M shapes, each call's graph-replay
time (ANCHORS.md "Method", as bench_gemm.py measures it) next to the device time of its kernels
(testing.device_us_per_call: CUPTI, the same replays, an L2 flush before each), for ours (tensor-core
and, at M=1, the GEMV) and cuBLAS. The difference is what the method charges outside the kernels
(graph launch, the flush's tail, kernel launch latency); a tiny torch kernel gives the method's own
floor. Every call is checked against the reference first (output poisoned).

    python benchmarks/probe_latency.py [--ms 1,64,128] [--dtypes bf16,fp8]

Prints one table: replay us, kernel us (sum over the call's kernels, mean per call), replay -
kernels, and the kernels seen.
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
from bench_gemm import cublas_fp8  # noqa: E402
from dg_triton import settings, testing  # noqa: E402
from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.triton import gemv  # noqa: E402
from probe_gemv import variant_config  # noqa: E402

SHAPES = ((576, 7168), (2112, 7168), (4096, 7168), (7168, 2048))
REPLAYS = 30


def measure(name, fn, rows):
    replay = statistics.median(testing.bench_graph(fn, warmup_ms=5, rep_ms=20) for _ in range(3))
    kernel, names = testing.device_us_per_call(testing.capture_graph(fn).replay, REPLAYS)
    names = [kernel_name[:60] for kernel_name in names]
    rows.append((name, replay, kernel, names))
    print(f"| {name} | {replay:.1f} | {kernel:.1f} | {replay - kernel:.1f} | {'; '.join(names)} |", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ms", default="1,64,128")
    parser.add_argument("--dtypes", default="bf16,fp8")
    args = parser.parse_args()
    heuristics.FP8_GEMV_MAX_M = heuristics.BF16_GEMV_MAX_M = 0   # the tensor-core kernel, named
    rows = []
    print("| call | replay us | kernels us | replay - kernels us | kernels |\n|---|---|---|---|---|")
    tiny = torch.zeros(256, device="cuda")
    measure("tiny torch add_ (the method's floor)", lambda: tiny.add_(1.0), rows)
    for dtype in args.dtypes.split(","):
        for m in (int(x) for x in args.ms.split(",")):
            for n, k in SHAPES:
                a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
                ref = a.float() @ b.float().T
                d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
                shape = f"{dtype} {m}x{n}x{k}"
                if dtype == "fp8":
                    a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
                    b_q, sfb = dg_triton.per_block_cast_to_fp8(b, False)
                    calls = {"ours": lambda: dg_triton.fp8_gemm_nt((a_q, sfa), (b_q, sfb), d)}
                    if m == 1:
                        for cfg in ("default", "w4"):
                            config = variant_config(cfg, m, n, k, settings.device_sm_count())
                            calls[f"gemv {cfg}"] = (lambda config=config: gemv.fp8_gemv(
                                "probe", a_q, sfa, b_q, sfb, d, "1d2d", False, config=config))
                    threshold = 1e-3
                    baseline = cublas_fp8(a_q, sfa, b_q, sfb, blockwise=m > 1)
                else:
                    calls = {"ours": lambda: dg_triton.bf16_gemm_nt(a, b, d)}
                    if m == 1:
                        calls["gemv default"] = lambda: gemv.bf16_gemv("probe", a, b, d, False)
                    threshold = 1e-5
                    baseline = lambda: torch.matmul(a, b.T, out=d)  # noqa: E731
                for name, fn in calls.items():
                    d.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    diff = float(testing.calc_diff(d.float(), ref))
                    assert torch.isfinite(d).all() and diff < threshold, f"{name} {shape}: calc_diff {diff}"
                    measure(f"{shape} {name}", fn, rows)
                measure(f"{shape} cuBLAS", baseline, rows)
    print("\n| call | replay us | kernels us | replay - kernels us |\n|---|---|---|---|")
    for name, replay, kernel, _ in rows:
        print(f"| {name} | {replay:.1f} | {kernel:.1f} | {replay - kernel:.1f} |")


if __name__ == "__main__":
    main()
