"""``python -m dg_triton.tune <family> [--shapes MxNxK ...]``: sweep the portable Triton GEMM's
configs on the current GPU and write the winners to ``autotune_configs/<arch>/<family>_portable.json``
(format in dg_triton/portable.py), which the portable path then reads (nearest bucket).

Families: ``bf16_gemm`` (A, B K-major, bf16 D), ``fp8_gemm_1d2d`` (bf16 D), ``fp8_gemm_1d1d``
(fp32 D). Default shapes, the dense shapes of API.md 8 each family serves: forward (M in {1, 64,
128, 4096} x the seven DeepSeek-V3 (N, K); BF16 also the fp32-out router and LM head) and dgrad
(M = 4096, N = K, K = N of the forward) for bf16_gemm and fp8_gemm_1d2d; wgrad (M = N, N = 4096,
K = K of the forward) for bf16_gemm and fp8_gemm_1d1d (the recipe SM90 wgrad uses). A problem of
another layout or D type takes the entry of its (M, N, K) all the same.

Each candidate (tile, warps, stages, split-K; then the winner's group size) is timed from a CUDA
graph (testing.bench_graph); candidates that fail to compile (shared memory, registers) or spill
registers are skipped; the winner of each shape is checked against the reference before it is
written. The file is rewritten after every shape, so an interrupted sweep keeps what it measured;
entries already in the file for other shapes are kept. A progress bar goes to stderr.
Needs a CUDA GPU.
"""
import argparse
import itertools
import sys
import time

import torch

from dg_triton import portable, tuned_files
from dg_triton.portable import PortableGemmConfig

FORWARD_M = (1, 64, 128, 4096)
DEFAULT_NK = ((2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
              (7168, 2048))
# BF16 only: the MoE router and the LM head, fp32 out.
FP32_OUT_NK = ((256, 7168), (129280, 7168))
# The tokens of the forward pass, M of dgrad and N of wgrad.
BACKWARD_TOKENS = 4096
# Group sizes tried on each shape's winning tile (candidates() use 8).
GROUP_SIZES = (1, 4, 8, 16, 32)
_THRESHOLD = {portable.BF16_GEMM: 1e-5, portable.FP8_GEMM_1D2D: 1e-3, portable.FP8_GEMM_1D1D: 1e-3}


def default_shapes(family: str) -> list[tuple[int, int, int]]:
    weights = DEFAULT_NK + (FP32_OUT_NK if family == portable.BF16_GEMM else ())
    wgrad = [(n, BACKWARD_TOKENS, k) for n, k in weights]
    if family == portable.FP8_GEMM_1D1D:
        return wgrad
    shapes = [(m, n, k) for m in FORWARD_M for n, k in weights]
    shapes += [(BACKWARD_TOKENS, k, n) for n, k in weights]  # dgrad
    if family == portable.BF16_GEMM:
        shapes += wgrad
    return list(dict.fromkeys(shapes))  # a wgrad shape can equal a forward one


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is MxNxK (e.g. 4096x2112x7168), got {text!r}") from None
    if min(m, n, k) <= 0:
        raise argparse.ArgumentTypeError(f"a shape needs positive M, N, K, got {text!r}")
    return m, n, k


def _tiles(m: int, fp8: bool):
    """(block_m, block_n, num_warps) worth timing at M = m: narrow 16-row tiles (mma.sync) only
    for decode-sized M; 64-row tiles on one warpgroup (two for 256 columns), 128-row ones on two;
    256-row BF16 tiles where M fills them (FP8 keeps two FP32 tiles live, the sum and the block's
    partial, which spills beyond 128 x 128 per two warpgroups)."""
    if m <= 32:
        return [(block_m, block_n, 4) for block_m in (16, 64) for block_n in (32, 64, 128)]
    tiles = [(64, 32, 4), (64, 64, 4), (64, 128, 4), (64, 256, 8), (128, 64, 8), (128, 128, 8)]
    if not fp8:
        tiles += [(128, 256, 8)] + ([(256, 128, 8)] if m > 256 else [])
    return tiles


def candidates(family: str, m: int, k: int, shared_memory_bytes: int) -> list[PortableGemmConfig]:
    """Configs worth timing for M = m, K = k: tiles by M (_tiles), pipelines of 3-4 stages (deeper
    for decode tiles, which wait on memory) that fit in shared memory, and split-K for M <= 256,
    where the output tiles alone do not fill the GPU (portable.DECODE_MAX_M), as long as each slice
    keeps 2+ K blocks."""
    fp8 = family != portable.BF16_GEMM
    block_ks = [portable.FP8_BLOCK_K] if fp8 else [64, 128]
    stages = (3, 4, 6) if m <= 32 else (3, 4)
    configs = []
    for (block_m, block_n, num_warps), block_k, num_stages in itertools.product(_tiles(m, fp8), block_ks, stages):
        stage_bytes = (block_m + block_n) * block_k * (1 if fp8 else 2)
        if stage_bytes * num_stages > shared_memory_bytes - 8 * 1024:
            continue
        k_blocks = -(-k // block_k)
        for split_k in (1, 2, 4, 8, 16) if m <= portable.DECODE_MAX_M else (1,):
            if split_k > 1 and k_blocks < 2 * split_k:
                break
            configs.append(PortableGemmConfig(block_m, block_n, block_k, 8, num_warps, num_stages, split_k))
    return configs


def _problem(family: str, m: int, n: int, k: int):
    """(run(config) -> the compiled GEMM kernel, check(): calc_diff of the last run against the
    reference)."""
    import dg_triton
    from dg_triton import reference_fp8
    from dg_triton.testing import calc_diff
    from dg_triton.triton import gemm_portable
    from dg_triton.utils.layout import get_mn_major_tma_aligned_tensor

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    if family == portable.BF16_GEMM:
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

        def run(config):
            return gemm_portable.bf16_gemm("tune", a, b, d, False, config)

        return run, lambda: calc_diff(d.float(), a.float() @ b.float().T)
    per_token_b = family == portable.FP8_GEMM_1D1D
    a_fp8 = dg_triton.per_token_cast_to_fp8(a, False)
    b_fp8 = dg_triton.per_token_cast_to_fp8(b, False) if per_token_b else dg_triton.per_block_cast_to_fp8(b, False)
    sfa = get_mn_major_tma_aligned_tensor(a_fp8[1])
    sfb = get_mn_major_tma_aligned_tensor(b_fp8[1]) if per_token_b else b_fp8[1]
    kind = "1d1d" if per_token_b else "1d2d"
    # 1D1D is timed without accumulation (D written, not read), so the check is the plain product.
    d = torch.zeros(m, n, device="cuda", dtype=torch.float32 if per_token_b else torch.bfloat16)

    def run(config):
        return gemm_portable.fp8_gemm("tune", a_fp8[0], sfa, b_fp8[0], sfb, d, kind, False, config=config)

    recipe = (1, 1, 128) if per_token_b else None
    return run, lambda: calc_diff(d.float(), reference_fp8.fp8_gemm_reference(a_fp8, b_fp8, d, None, recipe).float())


def _progress(done: int, total: int, label: str, started: float) -> None:
    width = 30
    filled = width * done // max(total, 1)
    elapsed = time.perf_counter() - started
    print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {elapsed:6.0f} s  {label:<40}",
          end="", file=sys.stderr, flush=True)


def sweep(family: str, shapes, out_root=None, rep_ms: float = 20) -> dict:
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    from dg_triton.testing import bench_graph

    device = torch.device("cuda", torch.cuda.current_device())
    arch = portable.arch_name(portable.device_capability(device))
    path = portable.tuned_file_path(arch, family, out_root)
    # The file's entries by shape; each measured shape replaces its own as it finishes, so an
    # interrupted or failing sweep leaves the others as they were.
    existing = tuned_files.read_document(path, "portable")
    by_shape = {(e["m"], e["n"], e["k"]): e for e in existing["entries"]} if existing else {}
    kept = len(by_shape)
    shared_memory = torch.cuda.get_device_properties(device).shared_memory_per_block_optin
    plans = [(shape, candidates(family, shape[0], shape[2], shared_memory)) for shape in shapes]
    total = sum(len(configs) for _, configs in plans)
    done, started = 0, time.perf_counter()
    entries, skipped = [], []
    for (m, n, k), configs in plans:
        run, check = _problem(family, m, n, k)
        best = None

        def consider(config):
            """Times one candidate into `best`; skips it where it does not fit or spills."""
            nonlocal best
            try:
                compiled = run(config)
                if compiled.n_spills:  # not a candidate: the compile tests hold every shipped config to no spills
                    skipped.append(f"{m}x{n}x{k} {tuple(config)}: {compiled.n_spills} spilled registers")
                    return
                microseconds = bench_graph(lambda: run(config), warmup_ms=5, rep_ms=rep_ms)
            except (OutOfResources, CompilationError) as error:  # too big for this GPU: not a candidate
                skipped.append(f"{m}x{n}x{k} {tuple(config)}: {type(error).__name__}")
                return
            if best is None or microseconds < best[0]:
                best = (microseconds, config)

        for config in configs:
            _progress(done, total, f"{m}x{n}x{k} {tuple(config)}", started)
            done += 1
            consider(config)
        # The group size (tile rows per band of the launch order, for L2 reuse of B) only matters
        # with several tile rows and columns; it is tried on the winner alone.
        if best is not None and m > best[1].block_m and n > best[1].block_n:
            for group_m in GROUP_SIZES:
                if group_m != best[1].group_m:
                    consider(best[1]._replace(group_m=group_m))
        if best is None:
            print(f"\nno config ran for {m}x{n}x{k}", file=sys.stderr)
            continue
        run(best[1])
        torch.cuda.synchronize()
        diff = float(check())
        if not diff < _THRESHOLD[family]:
            raise RuntimeError(f"{family} {m}x{n}x{k}: the winner {best[1]} gives calc_diff {diff:.3g}")
        entry = {"m": m, "n": n, "k": k, "config": best[1], "time_us": round(best[0], 2),
                 "tflops": round(2 * m * n * k / best[0] / 1e6, 1)}
        entries.append(entry)
        by_shape[m, n, k] = entry
        document = portable.make_tuned_document(family, arch, torch.cuda.get_device_name(device),
                                                list(by_shape.values()))
        portable.write_tuned_file(path, document)
    _progress(done, total, "done", started)
    print(file=sys.stderr)
    portable.clear_caches()
    print(f"wrote {len(entries)} entries to {path} ({len(by_shape)} in the file, {kept} before) in "
          f"{time.perf_counter() - started:.0f} s; {len(skipped)} candidates skipped (did not fit this GPU "
          f"or spilled)", file=sys.stderr)
    return portable.make_tuned_document(family, arch, torch.cuda.get_device_name(device), list(by_shape.values()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dg_triton.tune", description=__doc__.split("\n\n")[0])
    parser.add_argument("family", choices=portable.FAMILIES)
    parser.add_argument("--shapes", nargs="+", type=parse_shape, metavar="MxNxK",
                        help="problem sizes (default: the API.md 8 dense shapes of the family)")
    parser.add_argument("--out", default=None, help="root folder instead of the package's autotune_configs/")
    parser.add_argument("--rep-ms", type=float, default=20, help="timing per candidate (ms of replays)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("dg_triton.tune: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    sweep(args.family, args.shapes or default_shapes(args.family), args.out, args.rep_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
