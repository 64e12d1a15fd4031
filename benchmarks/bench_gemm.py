"""Dense GEMM benchmark: every shape is checked against the reference, then timed beside cuBLAS
in the same run (ANCHORS.md "Method": CUDA-graph replay of one call, L2 flushed, median).

    python benchmarks/bench_gemm.py --family bf16_gemm            # the API.md 8 shapes
    python benchmarks/bench_gemm.py --family bf16_gemm --sweep    # also time every candidate config

Prints one table and writes benchmarks/results/<family>-<gpu>.json (BENCH_FORMAT.md) and .md.
"""
import argparse
import datetime
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
from dg_triton import testing, validation  # noqa: E402
from dg_triton.heuristics import sm90 as heuristics  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm  # noqa: E402

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
    row = {"name": "bf16_gemm_nt", "shape": {"m": m, "n": n, "k": k, "out": str(out_dtype)},
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
    plan = next(p for kk, p in sm90_bf16_gemm._plans.items()
                if kk[0][:3] == (m, n, k) and kk[0][6][0] == out_dtype and kk[4] is None)
    cfg = plan.spec.config
    table.append((m, n, k, str(out_dtype).replace("torch.", ""),
                  f"{cfg.block_m}x{cfg.block_n}s{cfg.num_stages}" + (f"k{cfg.num_splits}" if cfg.num_splits > 1 else "")
                  + (f"c{cfg.cluster_n}" if cfg.cluster_n > 1 else "")
                  + (f"cm{cfg.cluster_m}" if cfg.cluster_m > 1 else ""),
                  us, tflops(m, n, k, us), cublas_us, anchor_us))
    if sweep:
        best = sweep_configs(m, n, k, a, b, d, ref)
        tuned.append({"key": [m, n, k, d.element_size(), 1, 132],
                      "config": {"block_m": best[1].block_m, "block_n": best[1].block_n,
                                 "num_splits": best[1].num_splits, "cluster_n": best[1].cluster_n,
                                 "cluster_m": best[1].cluster_m},
                      "us": round(best[0], 2), "heuristic_us": round(us, 2)})
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", default="bf16_gemm", choices=["bf16_gemm"])
    parser.add_argument("--sweep", action="store_true", help="also time every candidate config")
    parser.add_argument("--ms", default="4096,128,64,1", help="comma-separated M values")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_gemm: no CUDA device; nothing to time")
        return 0
    gpu = torch.cuda.get_device_name()
    rows, table, tuned = [], [], []
    ms = [int(x) for x in args.ms.split(",")]
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
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        results = ROOT / "benchmarks" / "results"
        results.mkdir(parents=True, exist_ok=True)
        slug = "h200" if "H200" in gpu else gpu.lower().replace(" ", "_")
        payload = {"family": args.family, "gpu": gpu, "date": str(datetime.date.today()),
                   "versions": versions(), "command": f"python {' '.join(sys.argv)}", "rows": rows}
        (results / f"{args.family}-{slug}.json").write_text(json.dumps(payload, indent=1) + "\n")
        (results / f"{args.family}-{slug}.md").write_text(text + "\n")
        if tuned:
            (results / f"{args.family}-{slug}-tuned.json").write_text(json.dumps({"entries": tuned}, indent=1) + "\n")
        out_dir = os.environ.get("OUT")
        if out_dir:
            (Path(out_dir) / f"{args.family}-{slug}.json").write_text(json.dumps(payload, indent=1) + "\n")
            (Path(out_dir) / f"{args.family}-{slug}.md").write_text(text + "\n")
            if tuned:
                (Path(out_dir) / f"{args.family}-{slug}-tuned.json").write_text(
                    json.dumps({"entries": tuned}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
