"""Dense GEMM benchmark: every shape is checked against the reference, then timed beside cuBLAS
in the same run (ANCHORS.md "Method": CUDA-graph replay of one call, L2 flushed, median).

    python benchmarks/bench_gemm.py --family bf16_gemm            # the API.md 8 shapes
    python benchmarks/bench_gemm.py --family bf16_gemm --sweep    # also time every candidate config
    python benchmarks/bench_gemm.py --family fp8_gemm             # FP8 1D2D and 1D1D (issue 4)
    python benchmarks/bench_gemm.py --family fp8_gemm --backend triton   # the portable path (issue 6)

With --backend triton (DG_BACKEND=triton) rows are named "<name>:portable"; they replace the
portable rows of the family's JSON file and keep the CUDA rows (BENCH_FORMAT.md), and the table
goes to <family>-<gpu>-portable.md.

Prints one table and writes benchmarks/results/<family>-<gpu>.json (BENCH_FORMAT.md) and .md.
"""
import argparse
import datetime
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dg_triton  # noqa: E402
from dg_triton import dispatch, portable, settings, testing, tuned_files, validation  # noqa: E402
from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm  # noqa: E402

# ":portable" when --backend triton: appended to every row name.
NAME_SUFFIX = ""

NK_PAIRS = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
            (7168, 2048)]
# ANCHORS.md, DeepGEMM bf16 TFLOPS on our H200 (M=1: microseconds).
DEEPGEMM_BF16_TFLOPS = {
    4096: [685, 683, 671, 612, 693, 684, 694],
    128: [192, 69, 303, 222, 416, 275, 229],
    64: [99, 34, 161, 121, 203, 144, 114],
}
DEEPGEMM_BF16_M1_US = [19.1, 14.7, 29.7, 17.1, 72.8, 25.6, 16.0]


def versions() -> dict:
    # The GPU machine gets a copy of the tree without .git: the sha can come in DG_TRITON_SHA.
    sha = os.environ.get("DG_TRITON_SHA", "")
    try:
        sha = sha or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    sha = sha or "unknown"
    import triton
    from cuda.bindings import driver
    driver_version = driver.cuDriverGetVersion()[1]
    return {"dg_triton": sha, "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "driver": f"{driver_version // 1000}.{driver_version % 1000 // 10}"}


def check(fn, d: torch.Tensor, ref: torch.Tensor, threshold: float = 1e-5) -> float:
    d.fill_(float("nan"))
    fn()
    torch.cuda.synchronize()
    if not torch.isfinite(d).all():
        raise AssertionError("output has unwritten (NaN) or non-finite elements")
    diff = float(testing.calc_diff(d.float(), ref))
    if not diff < threshold:
        raise AssertionError(f"calc_diff {diff:.3g} >= {threshold}")
    return diff


def _portable_config_name(family, m, n, k) -> str:
    """The config a call without a tensor-core plan ran: the SM90 GEMV's (heuristics.takes_gemv),
    as 'gemv <config>', else the portable path's (tuned entry or default), as 'portable <name>'."""
    device = torch.device("cuda", torch.cuda.current_device())
    if dispatch.backend("bench", device, (dispatch.SM90,)) == dispatch.SM90 \
            and heuristics.takes_gemv(m, k, family is not portable.BF16_GEMM):
        from dg_triton.triton import gemv
        num_sms = settings._num_sms or settings.device_sm_count()
        return str(gemv.choose_config(m, n, k, num_sms, family is not portable.BF16_GEMM))
    config = portable.choose_config(family, m, n, k, device)
    return f"portable {portable.config_name(config)}"


def tflops(m, n, k, us):
    return 2 * m * n * k / us / 1e6


def sweep_configs(m, n, k, a, b, d, ref):
    """Times every candidate (block_m, block_n[, split]) config on this shape; returns the best."""
    m_, n_, k_, a_k, b_k, device_index, layout, addresses = validation.bf16_gemm("sweep", a, b, d, None)
    problem = (m_, n_, k_, a_k, b_k, device_index, layout)
    best = None
    small = math.ceil(m / 128) * math.ceil(n / 128) < 132
    for block_m, block_n in heuristics.bf16_gemm_candidates(m, n):
        if block_n % 32 and block_n not in (16, 48, 144, 176, 208, 240):
            continue  # keep the sweep within the lease: multiples of 32 plus a few
        for splits in ((1, 2, 3, 4, 6, 8) if small and block_n <= 128 else (1,)):
            for cluster_m, cluster_n in ((1, 1), (2, 1), (1, 2)):
                config = heuristics.make_config(m, n, block_m, block_n, splits, k, d.element_size(),
                                                132, cluster_n, cluster_m)
                if config is None or config.num_splits != splits:
                    continue
                run = lambda: sm90_bf16_gemm.run("sweep", a, b, d, problem, addresses, False, "",  # noqa: E731
                                                 config)
                check(run, d, ref)
                t = testing.bench_graph(run, warmup_ms=5, rep_ms=20)
                print(f"    sweep {m}x{n}x{k} {block_m}x{block_n} split {config.num_splits} "
                      f"cluster {cluster_m}x{cluster_n}: {t:8.1f} us", flush=True)
                if best is None or t < best[0]:
                    best = (t, config)
    print(f"    best {best[1]} {best[0]:.1f} us", flush=True)
    return best


def bench_shape(m, n, k, out_dtype, anchor_us, sweep, rows, table, tuned):
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    d = torch.empty(m, n, dtype=out_dtype, device="cuda")
    ref = a.float() @ b.float().T
    ours = lambda: dg_triton.bf16_gemm_nt(a, b, d)  # noqa: E731
    diff = check(ours, d, ref)
    d_cublas = torch.empty(m, n, dtype=out_dtype, device="cuda")
    cublas = lambda: torch.matmul(a, b.T, out=d_cublas)  # noqa: E731
    # The GPU slows 5-10 % as it heats under its power cap, so ours and cuBLAS are timed in
    # alternation, three times each, and each side reports its median.
    ours_times, cublas_times = [], []
    for _ in range(3):
        ours_times.append(testing.bench_graph(ours))
        if out_dtype == torch.bfloat16:
            cublas_times.append(testing.bench_graph(cublas))
    us = statistics.median(ours_times)
    cublas_us = statistics.median(cublas_times) if cublas_times else None
    row = {"name": "bf16_gemm_nt" + NAME_SUFFIX, "shape": {"m": m, "n": n, "k": k, "out": str(out_dtype)},
           "ours": {"us": round(us, 2), "tflops": round(tflops(m, n, k, us), 1), "gbps": None,
                    "calc_diff": diff},
           "baselines": {}}
    if cublas_us:
        row["baselines"]["cublas"] = {"us": round(cublas_us, 2), "tflops": round(tflops(m, n, k, cublas_us), 1)}
    if anchor_us:
        row["baselines"]["deepgemm_anchor"] = {"us": round(anchor_us, 2),
                                               "tflops": round(tflops(m, n, k, anchor_us), 1),
                                               "source": "ANCHORS.md"}
    rows.append(row)
    plan = next((p for kk, p in sm90_bf16_gemm._plans.items()
                 if kk[0][:3] == (m, n, k) and kk[0][6][0] == out_dtype and kk[4] is None), None)
    cfg = plan.spec.config if plan else None
    table.append((m, n, k, str(out_dtype).replace("torch.", ""),
                  _portable_config_name(portable.BF16_GEMM, m, n, k) if cfg is None else
                  f"{cfg.block_m}x{cfg.block_n}s{cfg.num_stages}" + (f"k{cfg.num_splits}" if cfg.num_splits > 1 else "")
                  + (f"c{cfg.cluster_n}" if cfg.cluster_n > 1 else "")
                  + (f"cm{cfg.cluster_m}" if cfg.cluster_m > 1 else "")
                  + (f"g{cfg.group_m}" if cfg.group_m != heuristics.DEFAULT_L2_GROUP else ""),
                  us, tflops(m, n, k, us), cublas_us, anchor_us))
    if sweep:
        best = sweep_configs(m, n, k, a, b, d, ref)
        tuned.append({"m": m, "n": n, "k": k, "out_bytes": d.element_size(), "b_k_major": True,
                      "num_sms": 132,
                      "config": {"block_m": best[1].block_m, "block_n": best[1].block_n,
                                 "num_splits": best[1].num_splits, "cluster_n": best[1].cluster_n,
                                 "cluster_m": best[1].cluster_m},
                      "time_us": round(best[0], 2), "heuristic_us": round(us, 2)})
    del a, b, d, ref, d_cublas


def host_overhead(rows, table_lines):
    for m, n, k in ((1, 256, 256), (64, 2112, 7168)):
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        ours = testing.host_overhead_us(lambda: dg_triton.bf16_gemm_nt(a, b, d))
        cublas = testing.host_overhead_us(lambda: torch.matmul(a, b.T, out=d))
        rows.append({"name": "bf16_gemm_nt:host_overhead", "shape": {"m": m, "n": n, "k": k},
                     "ours": {"us": round(ours, 2)}, "baselines": {"cublas": {"us": round(cublas, 2)}}})
        table_lines.append(f"host overhead per call m={m} n={n} k={k}: ours {ours:.1f} us, "
                           f"torch.matmul {cublas:.1f} us")


def jit_times(rows, table_lines):
    """Cold start in a fresh process with an empty cache dir (NVRTC compile + load + first run;
    NVRTC remembers programs within a process, so an in-process recompile would flatter it), then
    the first call of another fresh process served from that disk cache. Each figure is the first
    call alone, measured inside the child, import of dg_triton/torch excluded."""
    m, n, k = 4096, 4096, 7168
    child = (
        "import time, torch, dg_triton\n"
        "start = time.perf_counter(); import cuda.bindings.driver, cuda.bindings.nvrtc\n"
        "print('import', (time.perf_counter() - start) * 1e6)\n"
        f"a = torch.randn({m}, {k}, dtype=torch.bfloat16, device='cuda')\n"
        f"b = torch.randn({n}, {k}, dtype=torch.bfloat16, device='cuda')\n"
        f"d = torch.empty({m}, {n}, dtype=torch.bfloat16, device='cuda')\n"
        "torch.cuda.synchronize(); start = time.perf_counter()\n"
        "dg_triton.bf16_gemm_nt(a, b, d); torch.cuda.synchronize()\n"
        "print((time.perf_counter() - start) * 1e6)\n")
    results = {}
    with tempfile.TemporaryDirectory() as cache_dir:
        env = dict(os.environ, DG_JIT_CACHE_DIR=cache_dir, PYTHONPATH=str(ROOT))
        for label in ("cold_compile", "warm_load"):
            out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True,
                                 text=True, check=True).stdout.strip().splitlines()
            results[label] = float(out[-1])
            results["import"] = float(out[0].split()[1])
            rows.append({"name": f"bf16_gemm_nt:{label}", "shape": {"m": m, "n": n, "k": k},
                         "ours": {"us": round(results[label], 1)}, "baselines": {}})
    table_lines.append(f"first call, fresh process, empty JIT cache (NVRTC compile + load + run): "
                       f"{results['cold_compile'] / 1e3:.0f} ms; fresh process, disk cache hit: "
                       f"{results['warm_load'] / 1e3:.1f} ms (both after importing cuda.bindings, "
                       f"which took {results['import'] / 1e3:.0f} ms)")


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


# ANCHORS.md, DeepGEMM FP8 1D2D TFLOPS on our H200 (M=1: microseconds).
DEEPGEMM_FP8_TFLOPS = {
    4096: [1181, 942, 1174, 968, 1282, 1265, 1198],
    128: [266, 82, 470, 306, 637, 433, 303],
    64: [143, 41, 243, 171, 340, 221, 164],
}
# ANCHORS.md, vLLM's Triton block-FP8 kernel with its tuned H200 configs, TFLOPS.
VLLM_TRITON_FP8_TFLOPS = {
    4096: [575, 416, 602, 471, 637, 659, 635],
    128: [127, 32, 309, 240, 384, 193, 241],
    64: [56, 24, 221, 163, 223, 97, 116],
}
DEEPGEMM_FP8_M1_US = [16.4, 13.8, 20.8, 12.3, 45.3, 19.0, 12.3]


def cublas_fp8(a_q, sfa, b_q, sfb, blockwise: bool):
    """cuBLAS FP8 through torch._scaled_mm: block-wise (1x128 A scales M-major, 128x128 B scales as
    [K/128, N/128]) or per-tensor (unit scales; the M=1 proxy, block-wise refuses M=1)."""
    if blockwise:
        scale_a = sfa.t().contiguous().t()
        scale_b = sfb.t()
    else:
        scale_a = scale_b = torch.ones((), device="cuda")
    return lambda: torch._scaled_mm(a_q, b_q.t(), scale_a, scale_b, out_dtype=torch.bfloat16)


def fp8_shape(m, n, k, kind, group, anchor_us, rows, table, sweep=False):
    """One FP8 shape: check ours against the unquantized reference, time ours, cuBLAS block-wise
    (or per-tensor at M=1) in alternation; 1D1D (wgrad recipe, fp32 D accumulated) has no cuBLAS
    counterpart and is compared with 1D2D on the same shape in the summary."""
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    # Per-token scales as the cast writes them in the kernel's layout (TMA-aligned MN-major, API.md
    # 2.3), as cuBLAS gets its scales in its own layout below: neither call transforms scales
    # inside the timed region.
    a_fp8 = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
    per_token_b = kind == "1d1d"
    b_fp8 = (dg_triton.per_token_cast_to_fp8(b, False, tma_aligned_sf=True) if per_token_b
             else dg_triton.per_block_cast_to_fp8(b, False))
    ref = a.float() @ b.float().T
    if kind == "1d1d":
        d = torch.zeros(m, n, dtype=torch.float32, device="cuda")
        ours = lambda: dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d, c=d, recipe=(1, 1, 128))  # noqa: E731
        d.zero_()
        ours()
        torch.cuda.synchronize()
        diff = float(testing.calc_diff(d, ref))
        if not diff < 1e-3:
            raise AssertionError(f"fp8 1d1d {m}x{n}x{k}: calc_diff {diff:.3g}")
    else:
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        ours = lambda: dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)  # noqa: E731
        diff = check(ours, d, ref, threshold=1e-3)
    baseline, baseline_fn = None, None
    if kind == "1d2d":
        baseline = "cublas_blockwise" if m > 1 else "cublas_per_tensor"
        try:
            baseline_fn = cublas_fp8(a_fp8[0], a_fp8[1], b_fp8[0], b_fp8[1], m > 1)
            baseline_fn()
        except RuntimeError as error:  # an unsupported cuBLAS recipe: say so, keep ours
            print(f"    {baseline} unavailable for {m}x{n}x{k}: {str(error).splitlines()[0]}")
            baseline, baseline_fn = None, None
    ours_times, base_times = [], []
    for _ in range(3):
        ours_times.append(testing.bench_graph(ours))
        if baseline_fn:
            base_times.append(testing.bench_graph(baseline_fn))
    us = statistics.median(ours_times)
    base_us = statistics.median(base_times) if base_times else None
    name = ("fp8_gemm_nt" if kind == "1d2d" else "fp8_gemm_nt:1d1d") + NAME_SUFFIX
    row = {"name": name, "shape": {"m": m, "n": n, "k": k},
           "ours": {"us": round(us, 2), "tflops": round(tflops(m, n, k, us), 1), "calc_diff": diff,
                    "gbps": round((m * k + n * k + m * n * d.element_size()) / us / 1e3, 1) if m <= 64 else None},
           "baselines": {}}
    if base_us:
        row["baselines"][baseline] = {"us": round(base_us, 2), "tflops": round(tflops(m, n, k, base_us), 1)}
    if anchor_us:
        row["baselines"]["deepgemm_anchor"] = {"us": round(anchor_us, 2),
                                               "tflops": round(tflops(m, n, k, anchor_us), 1),
                                               "source": "ANCHORS.md"}
    vllm = VLLM_TRITON_FP8_TFLOPS.get(m)
    if vllm and group == "forward":
        tf = vllm[NK_PAIRS.index((n, k))]
        row["baselines"]["vllm_triton_anchor"] = {"us": round(2 * m * n * k / tf / 1e6, 2), "tflops": tf,
                                                  "source": "ANCHORS.md"}
    from dg_triton.kernels import sm90_fp8_gemm
    plan = next((p for key, p in sm90_fp8_gemm._plans.items()
                 if key[0][:4] == (m, n, k, kind) and key[4] is None), None)
    row["ours"]["config"] = plan.spec.name if plan else _portable_config_name(
        portable.FP8_GEMM_1D2D if kind == "1d2d" else portable.FP8_GEMM_1D1D, m, n, k)
    rows.append(row)
    table.append((kind, group, m, n, k, us, tflops(m, n, k, us), baseline, base_us, anchor_us,
                  row["ours"]["config"]))
    if sweep:
        best = fp8_sweep(m, n, k, kind, a, b, ref)
        if best:
            row["ours"]["sweep_best"] = {"us": round(best[0][0], 2), "config": best[0][1]}
            config = best[0][2]
            FP8_TUNED.append({"kind": kind, "m": m, "n": n, "k": k, "out_bytes": 2 if kind == "1d2d" else 4,
                              "num_sms": 132,
                              "config": {"block_m": config.block_m, "block_n": config.block_n,
                                         "num_splits": config.num_splits,
                                         "cluster_n": config.cluster_n, "cluster_m": config.cluster_m},
                              "time_us": round(best[0][0], 2), "heuristic_us": round(us, 2)})
            print(f"    heuristic {row['ours']['config']} {us:.1f} us; sweep best {best[0][1]} "
                  f"{best[0][0]:.1f} us", flush=True)


def fp8_sweep_configs(m, n, k, kind, out_bytes):
    """The configs fp8_sweep times on one shape (benchmarks/prebuild_sweep.py compiles them ahead).
    Kept within the lease: block M 128 and 2-CTA clusters along M for large M; block M 64, narrow
    tiles and split-K for small M, and at M = 128 also 128-row tiles, which read B once instead
    of twice (added 2026-12-02, not swept yet); for large M and 1D2D also the 256x128 tile
    (two row waves per consumer warpgroup, benchmarks/probe_fp8_256.py)."""
    small = m <= 128
    if not small and kind == "1d2d" and out_bytes == 2:
        config = heuristics.make_fp8_config(kind, m, n, 256, 128, 1, k, out_bytes, 132)
        if config is not None:
            yield config
    for block_m in ((64, 128) if m == 128 else (64,)) if small else (128,):
        narrow = (16, 32, 48, 64, 96, 128) if block_m == 64 else (64, 96, 128, 192)
        for block_n in narrow if small else range(96, 193, 16):
            if not heuristics.fp8_block_n_fits(kind, block_m, block_n):
                continue
            for splits in FP8_SWEEP_SPLITS if small else (1,):
                for cluster_m, cluster_n in ((1, 1),) if small else ((1, 1), (2, 1)):
                    config = heuristics.make_fp8_config(kind, m, n, block_m, block_n, splits, k,
                                                        out_bytes, 132, cluster_n, cluster_m)
                    if config is not None and config.num_splits == splits:
                        yield config


def fp8_sweep(m, n, k, kind, a, b, ref):
    """Times FP8 tile configs on one shape through the kernel layer (forced configs, as
    tests/test_fp8_gemm_kernel_gpu.py runs them); returns [(us, config name)], fastest first.
    Each config is checked against the reference before it is timed."""
    from dg_triton.kernels import sm90_fp8_gemm
    out_dtype = torch.bfloat16 if kind == "1d2d" else torch.float32
    d = torch.empty(m, n, dtype=out_dtype, device="cuda")
    a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
    if kind == "1d2d":
        b_q, sfb = dg_triton.per_block_cast_to_fp8(b, False)
    else:
        b_q, sfb = dg_triton.per_token_cast_to_fp8(b, False, tma_aligned_sf=True)
    layout = (d.dtype, a_q.stride(), b_q.stride(), d.stride(), sfa.stride(), sfb.stride())
    problem = sm90_fp8_gemm.Fp8GemmProblem(m, n, k, kind, d.device.index, None, layout)
    results = []
    for config in fp8_sweep_configs(m, n, k, kind, d.element_size()):
        run = functools.partial(sm90_fp8_gemm.run, "sweep", a_q, sfa, b_q, sfb, d,  # noqa: E731
                                problem, False, "", config)
        # Printed before the config runs, so a log cut off by a time limit names the last one.
        print(f"    sweep {kind} {m}x{n}x{k} trying {config}", flush=True)
        try:
            check(run, d, ref, threshold=1e-3)
        except (AssertionError, RuntimeError, ValueError) as error:
            print(f"    sweep {kind} {m}x{n}x{k} {config}: FAILED {error}", flush=True)
            continue
        t = testing.bench_graph(run, warmup_ms=5, rep_ms=20)
        results.append((t, f"{config.block_m}x{config.block_n} split {config.num_splits} "
                           f"cluster {config.cluster_m}x{config.cluster_n}", config))
    results.sort(key=lambda r: r[0])
    for t, name, _ in results[:5]:
        print(f"    sweep {kind} {m}x{n}x{k} {name}: {t:8.1f} us", flush=True)
    return results


# M values whose forward shapes --sweep tries configs on (--sweep-ms), whether it sweeps the wgrad
# shapes too (--sweep-wgrad), and the split-K counts tried at small M.
SWEEP_MS = (4096, 128, 64)
SWEEP_WGRAD = False
FP8_WGRAD = True
FP8_TUNED = []   # sweep winners, written to <family>-<gpu>-tuned.json
FP8_SWEEP_SPLITS = (1, 2, 3, 4, 6, 8)


def fp8_main(ms, rows, failures, sweep=False):
    table = []

    def shape(*args):
        # A failed check is recorded and the other shapes still run (one call must not lose the
        # whole table); main() then exits non-zero.
        try:
            fp8_shape(*args, rows, table, sweep and (args[0] in SWEEP_MS if args[4] == "forward"
                                                     else SWEEP_WGRAD))
        except (AssertionError, RuntimeError) as error:
            failures.append(f"{args[3]} {args[0]}x{args[1]}x{args[2]}: {error}")
            print(f"    FAILED {failures[-1]}", flush=True)

    for m in ms:
        for i, (n, k) in enumerate(NK_PAIRS):
            if m in DEEPGEMM_FP8_TFLOPS:
                anchor = 2 * m * n * k / DEEPGEMM_FP8_TFLOPS[m][i] / 1e6
            else:
                anchor = DEEPGEMM_FP8_M1_US[i] if m == 1 else None
            shape(m, n, k, "1d2d", "forward", anchor)
    for n, k in NK_PAIRS if FP8_WGRAD else ():  # wgrad shapes (API.md 8): M=n, N=4096, K=k, both recipes
        shape(n, 4096, k, "1d2d", "wgrad", None)
        shape(n, 4096, k, "1d1d", "wgrad", None)
    lines = ["| recipe | M | N | K | config | ours us | ours TFLOPS | baseline | baseline us | vs baseline | vs DeepGEMM anchor |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for kind, _, m, n, k, us, tf, baseline, base_us, anchor, config in table:
        config = config.replace("sm90_fp8_gemm_", "")
        lines.append(f"| {kind} | {m} | {n} | {k} | {config} | {us:.1f} | {tf:.0f} | {baseline or '-'} | "
                     f"{base_us and f'{base_us:.1f}' or '-'} | {base_us and f'{base_us / us:.3f}' or '-'} | "
                     f"{anchor and f'{anchor / us:.3f}' or '-'} |")
    lines.append("")
    for m in ms:
        ratios = [b / us for kind, group, mm, n, k, us, tf, _, b, a, _c in table
                  if mm == m and b and group == "forward"]
        lines.append(f"M={m}: 1D2D geomean vs cuBLAS ({'per-tensor' if m == 1 else 'block-wise'}) "
                     f"{geomean(ratios):.3f} (worst {min(ratios) if ratios else float('nan'):.3f})")
    for m in ms:
        vllm = [row["baselines"]["vllm_triton_anchor"]["us"] / row["ours"]["us"] for row in rows
                if row["shape"]["m"] == m and "vllm_triton_anchor" in row["baselines"]]
        if vllm:
            lines.append(f"M={m}: 1D2D geomean vs vLLM's Triton kernel (ANCHORS.md) {geomean(vllm):.3f}")
    wgrad = {}
    for kind, group, m, n, k, us, tf, *_ in table:
        if group == "wgrad":
            wgrad.setdefault((m, k), {})[kind] = tf
    pairs = [v["1d1d"] / v["1d2d"] for v in wgrad.values() if "1d1d" in v and "1d2d" in v]
    if pairs:   # none with --no-wgrad
        lines.append(f"wgrad shapes: 1D1D TFLOPS / 1D2D TFLOPS geomean {geomean(pairs):.3f} "
                     f"(min {min(pairs):.3f})")
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", default="bf16_gemm", choices=["bf16_gemm", "fp8_gemm"])
    parser.add_argument("--sweep", action="store_true", help="also time every candidate config")
    parser.add_argument("--ms", default="4096,128,64,1", help="comma-separated M values")
    parser.add_argument("--sweep-ms", default="4096,128,64", help="fp8 --sweep: forward M values to sweep")
    parser.add_argument("--sweep-wgrad", action="store_true", help="fp8 --sweep: also the wgrad shapes")
    parser.add_argument("--no-wgrad", action="store_true", help="fp8: forward shapes only")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "triton"],
                        help="triton: time the portable Triton path (DG_BACKEND=triton)")
    args = parser.parse_args()
    global NAME_SUFFIX
    if args.backend == "triton":
        os.environ["DG_BACKEND"] = "triton"
        NAME_SUFFIX = ":portable"
        args.sweep = False  # the sweep times CUDA configs
    if not torch.cuda.is_available():
        print("bench_gemm: no CUDA device; nothing to time")
        return 0
    gpu = torch.cuda.get_device_name()
    rows, table, tuned = [], [], []
    ms = [int(x) for x in args.ms.split(",")]
    if args.family == "fp8_gemm":
        global SWEEP_MS, SWEEP_WGRAD, FP8_WGRAD
        SWEEP_MS = tuple(int(x) for x in args.sweep_ms.split(","))
        SWEEP_WGRAD = args.sweep_wgrad
        FP8_WGRAD = not args.no_wgrad
        lines = [f"# fp8_gemm on {gpu}, {datetime.date.today()}", "",
                 f"versions: {json.dumps(versions())}", f"command: python {' '.join(sys.argv)}", ""]
        failures = []
        lines += fp8_main(ms, rows, failures, args.sweep)
        lines += [f"FAILED {f}" for f in failures]
        write_results(args, gpu, rows, "\n".join(lines), FP8_TUNED)
        return 1 if failures else 0
    for m in ms:
        for i, (n, k) in enumerate(NK_PAIRS):
            if m in DEEPGEMM_BF16_TFLOPS:
                anchor = 2 * m * n * k / DEEPGEMM_BF16_TFLOPS[m][i] / 1e6
            else:
                anchor = DEEPGEMM_BF16_M1_US[i] if m == 1 else None
            bench_shape(m, n, k, torch.bfloat16, anchor, args.sweep, rows, table, tuned)
    for n, k in ((256, 7168), (129280, 7168)):  # fp32-out shapes of API.md 8
        bench_shape(4096, n, k, torch.float32, None, False, rows, table, tuned)
    extra = []
    if args.backend == "cuda":
        host_overhead(rows, extra)
        jit_times(rows, extra)

    lines = [f"# bf16_gemm on {gpu}, {datetime.date.today()}", "",
             f"versions: {json.dumps(versions())}", f"command: python {' '.join(sys.argv)}", "",
             "| M | N | K | out | config | ours us | ours TFLOPS | cuBLAS us | vs cuBLAS | vs DeepGEMM anchor |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for m, n, k, out, cfg, us, tf, cb, anchor in table:
        lines.append(f"| {m} | {n} | {k} | {out} | {cfg} | {us:.1f} | {tf:.0f} | "
                     f"{cb and f'{cb:.1f}' or '-'} | {cb and f'{cb / us:.3f}' or '-'} | "
                     f"{anchor and f'{anchor / us:.3f}' or '-'} |")
    lines.append("")
    for m in ms:
        ratios = [cb / us for mm, *_x, us, tf, cb, anchor in table if mm == m and cb and _x[2] == "bfloat16"]
        worst = min(ratios) if ratios else float("nan")
        lines.append(f"M={m}: geomean vs cuBLAS {geomean(ratios):.3f} (worst {worst:.3f})")
    lines += extra
    return write_results(args, gpu, rows, "\n".join(lines), tuned)


def write_results(args, gpu, rows, text, tuned):
    print(text)
    if not args.no_write:
        results = ROOT / "benchmarks" / "results"
        results.mkdir(parents=True, exist_ok=True)
        slug = "h200" if "H200" in gpu else gpu.lower().replace(" ", "_")
        json_path = results / f"{args.family}-{slug}.json"
        # One file per family and GPU holds both paths: keep the other path's rows.
        kept = []
        if json_path.is_file():
            portable = args.backend == "triton"
            kept = [row for row in json.loads(json_path.read_text()).get("rows", [])
                    if row["name"].endswith(":portable") != portable]
        payload = {"family": args.family, "gpu": gpu, "date": str(datetime.date.today()),
                   "versions": versions(), "command": f"python {' '.join(sys.argv)}", "rows": kept + rows}
        json_path.write_text(json.dumps(payload, indent=1) + "\n")
        suffix = "-portable" if args.backend == "triton" else ""
        (results / f"{args.family}-{slug}{suffix}.md").write_text(text + "\n")
        # The sweep's winners as a tuned file of the CUDA path (dg_triton/tuned_files.py), ready to
        # become autotune_configs/sm90/<family>.json.
        tuned_document = tuned_files.make_document(
            args.family, "cuda", "sm90", gpu, tuned,
            about=f"winners of python {' '.join(sys.argv)}; time_us: the sweep's time, heuristic_us: "
                  "the cost model's pick in the same run") if tuned else None
        if tuned:
            (results / f"{args.family}-{slug}-tuned.json").write_text(json.dumps(tuned_document, indent=1) + "\n")
        out_dir = os.environ.get("OUT")
        if out_dir:
            (Path(out_dir) / f"{args.family}-{slug}.json").write_text(json.dumps(payload, indent=1) + "\n")
            (Path(out_dir) / f"{args.family}-{slug}{suffix}.md").write_text(text + "\n")
            if tuned:
                (Path(out_dir) / f"{args.family}-{slug}-tuned.json").write_text(
                    json.dumps(tuned_document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
