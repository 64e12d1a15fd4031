"""Compile-only checks of every SM90 BF16 GEMM kernel the heuristics can choose (no GPU needed).

Each variant is compiled through the project's own JIT (NVRTC by default) into a per-session
temporary cache, then checked for what makes a Hopper GEMM fast and correct: no register spills and
no stack frame (ptxas report), wgmma not serialized (warning C7510), and in the SASS the tensor-core
MMA (HGMMA as wide as the tile's N), TMA loads (and TMA stores, except split-K, which reduces
through plain global stores), and no call into a fallback (CALL.ABS), the failure mode of a kernel
built for the wrong architecture (TOOLCHAIN.md "Pitfalls").

A binary is fixed by (block_m, block_n, stages, split-K) x A/B major-ness x out dtype x accumulate.
The heuristics use the most stages that fit (`max_stages`; up to DEEP_PIPELINE_STAGES instead of
MAX_STAGES for narrow tiles at long K, and one more for 128-row tiles beside narrower epilogue
staging, `with_pipeline_depth`), and take tiles from
`bf16_gemm_candidates`; the full product is several hundred binaries. This file compiles a covering
subset (see `_variants`): every tile shape in two opposite corners of the layout/dtype/accumulate
space, and all 16 layout/dtype/accumulate combinations for the largest and the smallest tile.
Split-K binaries cost 1-8 s of ptxas and up to 4 s of disassembly each, so they are sampled: every
64-column step of block_n and the narrowest, and all 16 combinations for 64x64.
"""
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch

from dg_triton.heuristics import sm90 as heuristics
from dg_triton.heuristics.sm90 import Bf16GemmConfig
from dg_triton.jit import cache, compiler
from dg_triton.kernels import sm90_bf16_gemm
from dg_triton.kernels.sm90_bf16_gemm import Bf16GemmKernelSpec

pytestmark = pytest.mark.compile

_OUT_BYTES = {torch.bfloat16: 2, torch.float32: 4}
_NUM_SMS = 132
_GROUP_M = 8
_WIDE_N = 1 << 16   # an N wide enough that the candidate list is not clipped
# Variables that would change what this file compiles or how: the compiler choice, resource checks
# (which would turn an assertion failure here into a compile error), dumps.
_JIT_VARIABLES = ("USE_NVRTC", "NVCC_COMPILER", "CHECK_NO_SPILLS", "CHECK_NO_LOCAL_MEMORY",
                  "PTXAS_CHECK", "DUMP_ASM", "DUMP_PTX", "DUMP_SASS", "WITH_LINEINFO", "DEBUG",
                  "CPP_STANDARD")


@pytest.fixture(scope="session", autouse=True)
def jit_cache_dir(tmp_path_factory):
    """One fresh kernel cache per test session (per xdist worker), so every variant is compiled."""
    with pytest.MonkeyPatch.context() as patch:
        root = tmp_path_factory.mktemp("jit_cache")
        patch.setenv("DG_JIT_CACHE_DIR", str(root))
        patch.delenv("DJ_JIT_CACHE_DIR", raising=False)
        for variable in _JIT_VARIABLES:
            patch.delenv(f"DG_JIT_{variable}", raising=False)
            patch.delenv(f"DJ_JIT_{variable}", raising=False)
        cache.clear_memo()
        yield root
        cache.clear_memo()


@dataclass(frozen=True)
class Tile:
    """One (block_m, block_n, split-K) the heuristics may choose, with the stages each out dtype gets
    (absent when fewer than 3 fit) and whether B may be MN-major with it."""
    block_m: int
    block_n: int
    split_k: bool
    stages: tuple  # ((out_dtype, num_stages), ...)
    b_mn_major_ok: bool
    deep_stages: tuple = ()  # ((out_dtype, num_stages), ...) where with_pipeline_depth adds stages

    def stages_for(self, out_dtype):
        return dict(self.stages).get(out_dtype)

    def deep_stages_for(self, out_dtype):
        return dict(self.deep_stages).get(out_dtype)


def chosen_tiles() -> list[Tile]:
    """Every candidate tile over decode (M=1) and prefill (M=4096) sizes, both B layouts, with and
    without split-K, that fits at least 3 stages for some out dtype (make_config's rule)."""
    shapes: dict[tuple, bool] = {}
    for m in (1, 4096):
        for b_k_major in (True, False):
            for block_m, block_n in heuristics.bf16_gemm_candidates(m, _WIDE_N, b_k_major):
                shapes[(block_m, block_n)] = shapes.get((block_m, block_n), False) or not b_k_major
    tiles = []
    for (block_m, block_n), b_mn_major_ok in sorted(shapes.items()):
        for split_k in (False, True):
            stages = tuple((dtype, s) for dtype, size in _OUT_BYTES.items()
                           if (s := heuristics.max_stages(block_m, block_n, size, split_k)) >= 3)
            # The long-K stage counts of with_pipeline_depth, where they differ.
            deep = tuple((dtype, s) for dtype, size in _OUT_BYTES.items()
                         if (s := heuristics.max_stages(block_m, block_n, size, split_k,
                                                        cap=heuristics.DEEP_PIPELINE_STAGES))
                         > dict(stages).get(dtype, s))
            if stages:
                tiles.append(Tile(block_m, block_n, split_k, stages, b_mn_major_ok, deep))
    return tiles


def _spec(tile: Tile, a_k_major, b_k_major, out_dtype, accumulate, deep=False,
          **dims) -> Bf16GemmKernelSpec:
    stages = tile.deep_stages_for(out_dtype) if deep else tile.stages_for(out_dtype)
    config = Bf16GemmConfig(block_m=tile.block_m, block_n=tile.block_n,
                            num_stages=stages, group_m=_GROUP_M,
                            num_sms=_NUM_SMS, num_splits=2 if tile.split_k else 1)
    return Bf16GemmKernelSpec(config, a_k_major, b_k_major, out_dtype, accumulate, **dims)


def _find(tiles, block_m, block_n, split_k=False) -> Tile:
    return next(t for t in tiles if (t.block_m, t.block_n, t.split_k) == (block_m, block_n, split_k))


def _corners(tile: Tile) -> list[Bf16GemmKernelSpec]:
    """Two opposite corners: (K, K, bf16, overwrite) and (MN, MN, fp32, accumulate); B stays
    K-major where the tile cannot take an MN-major B."""
    specs = []
    if tile.stages_for(torch.bfloat16):
        specs.append(_spec(tile, True, True, torch.bfloat16, False))
    if tile.stages_for(torch.float32):
        specs.append(_spec(tile, False, not tile.b_mn_major_ok, torch.float32, True))
    return specs


def _all_combos(tile: Tile, out_dtypes=(torch.bfloat16, torch.float32)) -> list[Bf16GemmKernelSpec]:
    return [_spec(tile, a_k_major, b_k_major, out_dtype, accumulate)
            for a_k_major in (True, False) for b_k_major in (True, False)
            for out_dtype in out_dtypes for accumulate in (False, True)
            if tile.stages_for(out_dtype) and (b_k_major or tile.b_mn_major_ok)]


def _largest(tiles, out_dtype, split_k=False) -> Tile:
    """The largest tile that takes every layout (block_n a multiple of 64) and fits `out_dtype`."""
    fitting = [t for t in tiles if t.split_k == split_k and t.b_mn_major_ok and t.stages_for(out_dtype)]
    return max(fitting, key=lambda t: (t.block_m * t.block_n, t.block_m))


def _variants() -> list[tuple[Bf16GemmKernelSpec, bool]]:
    """(spec, check SASS too) for the covering subset described in the module docstring."""
    tiles = chosen_tiles()
    full_sass, ptxas_only = [], []
    for tile in tiles:
        if not tile.split_k:
            full_sass += _corners(tile)
        elif tile.block_n % 64 == 0 or tile.block_n == min(t.block_n for t in tiles):
            # Alternate the corner by tile so both kinds meet both block_m.
            corners = _corners(tile)
            full_sass.append(corners[(tile.block_n // 64 + tile.block_m // 64) % len(corners)])
        # with_pipeline_depth's deeper rings (narrow tiles at long K): the corner the dense
        # forward GEMMs run (K-major, BF16 D, no c) at the deep stage count.
        if tile.deep_stages_for(torch.bfloat16):
            full_sass.append(_spec(tile, True, True, torch.bfloat16, False, deep=True))
        # ... and the one stage more it gives 128-row tiles beside narrower epilogue staging
        # (NARROW_STAGING_FOR_DEPTH), in the same corner.
        if not tile.split_k and tile.stages_for(torch.bfloat16):
            base = _spec(tile, True, True, torch.bfloat16, False)
            narrowed = heuristics.with_pipeline_depth(base.config, 1024, 7168, 2, 2, narrow_staging=True)
            if narrowed.num_stages > base.config.num_stages:
                full_sass.append(replace(base, config=narrowed))
    # Narrow staging with c (each chunk's c loaded on its own), as the GPU deep-ring tests build it:
    # 128x144 FP32 in chunks of two slabs (the last of one), 128x112 FP32 in one-slab chunks.
    for block_n in (144, 112):
        base = _spec(_find(tiles, 128, block_n), True, True, torch.float32, True)
        deepest = heuristics.max_stages(128, block_n, 4, cap=12, narrow_staging=True)
        full_sass.append(replace(base, config=replace(base.config, num_stages=deepest)))
    for out_dtype in (torch.bfloat16, torch.float32):
        full_sass += _all_combos(_largest(tiles, out_dtype), (out_dtype,))
    full_sass += _all_combos(_find(tiles, 64, 64))
    # The split-K 64x64 combinations share their mainloop (the SASS facts) with the non-split ones.
    ptxas_only += _all_combos(_find(tiles, 64, 64, split_k=True))
    # The load of c under the K loop (DG_PROBE_EARLY_C_LOAD, probe builds) on an accumulating tile
    # of each block M, both majors.
    for block_m, block_n in ((128, 256), (64, 64)):
        for k_major in (True, False):
            spec = _spec(_find(tiles, block_m, block_n), k_major, k_major, torch.float32, True)
            full_sass.append(replace(spec, probe_defines=("DG_PROBE_EARLY_C_LOAD",)))
    # The epilogue's c added one pair at a time (DG_PROBE_SERIAL_C_ADD, the order before the
    # batched add), with an FP32 and a BF16 D.
    for out_dtype in (torch.float32, torch.bfloat16):
        spec = _spec(_find(tiles, 128, 256), True, True, out_dtype, True)
        full_sass.append(replace(spec, probe_defines=("DG_PROBE_SERIAL_C_ADD",)))
    # B under L2 evict-first (heuristics.sm90.b_evict_first, off by default): the chosen tile's
    # (K, K, bf16) corner at decode-sized M, as the API would build it with the switch on.
    for m, n, k in ((64, 7168, 16384), (128, 4096, 7168), (128, 576, 7168)):
        config = heuristics.choose_bf16_gemm_config(m, n, k, 2, _NUM_SMS, 1, True)
        full_sass.append(Bf16GemmKernelSpec(config, True, True, torch.bfloat16, False, b_evict_first=True))
    unique = dict.fromkeys(full_sass, True)
    for spec in ptxas_only:
        unique.setdefault(spec, False)
    return list(unique.items())


_VARIANTS = _variants()


def test_variant_list_covers_every_chosen_tile_and_all_combos_of_the_extremes():
    tiles = chosen_tiles()
    # The candidate set must not silently shrink: block_m 64/128 x block_n 16..256 in steps of 16
    # (64-column atoms for an MN-major B).
    shapes = {(t.block_m, t.block_n) for t in tiles}
    assert shapes == {(bm, bn) for bm in (64, 128) for bn in range(16, 257, 16)}
    assert {(t.block_m, t.block_n) for t in tiles if t.b_mn_major_ok} == {
        (bm, bn) for bm in (64, 128) for bn in (64, 128, 192, 256)}
    # 128x256 with an FP32 D fits 3 stages only because rows wider than 256 bytes are staged
    # half at a time (SwizzledTmaStoreEpilogue::kNumChunks); BF16 gets a 4th stage the same way.
    assert _find(tiles, 128, 256).stages_for(torch.float32) == 3
    assert _find(tiles, 128, 256).stages_for(torch.bfloat16) == 4
    assert _find(tiles, 128, 256, split_k=True).stages_for(torch.float32) is not None

    specs = [spec for spec, _ in _VARIANTS]
    covered = {(s.config.block_m, s.config.block_n, s.config.num_stages, s.out_dtype)
               for s in specs if not s.split_k}
    for tile in tiles:
        if not tile.split_k:
            for out_dtype, stages in tile.stages:
                assert (tile.block_m, tile.block_n, stages, out_dtype) in covered
    for block_m, block_n, split_k in ((64, 64, False), (64, 64, True), (128, 256, False)):
        combos = {(s.a_k_major, s.b_k_major, s.out_dtype, s.accumulate) for s in specs
                  if (s.config.block_m, s.config.block_n, s.split_k) == (block_m, block_n, split_k)}
        assert len(combos) >= (16 if (block_m, block_n) == (64, 64) else 8)
    # Every chosen config fits the shared-memory limit the kernel's static_assert enforces.
    for spec in specs:
        assert spec.shared_memory <= heuristics.SMEM_LIMIT
        assert spec.config.num_stages in {
            heuristics.max_stages(spec.config.block_m, spec.config.block_n,
                                  _OUT_BYTES[spec.out_dtype], spec.split_k, cap=cap,
                                  narrow_staging=narrow)
            for cap in (heuristics.MAX_STAGES, heuristics.DEEP_PIPELINE_STAGES)
            for narrow in (False, True)}
    # The deep rings are covered for every tile that has one.
    deep = {(s.config.block_m, s.config.block_n, s.split_k) for s in specs
            if s.config.num_stages > heuristics.MAX_STAGES}
    assert deep == {(t.block_m, t.block_n, t.split_k) for t in tiles
                    if t.deep_stages_for(torch.bfloat16)}


def _check_ptxas_report(compiled: compiler.CompiledKernel) -> None:
    usage = compiled.resources
    assert usage.spill_store_bytes == 0, f"{compiled.name}: {usage}"
    assert usage.spill_load_bytes == 0, f"{compiled.name}: {usage}"
    assert usage.stack_frame_bytes == 0, f"{compiled.name}: {usage}"
    assert usage.registers <= 255
    assert "C7510" not in compiled.ptxas_log, compiled.ptxas_log
    assert "wgmma.mma_async instructions are serialized" not in compiled.ptxas_log, compiled.ptxas_log


def _check_sass(compiled: compiler.CompiledKernel, block_n: int, tma_store: bool = True) -> None:
    if compiler.cuobjdump_path() is None:
        return  # the ptxas checks above still ran; SASS needs cuobjdump
    sass = compiler.disassemble(compiled.entry_dir / "kernel.cubin")
    assert re.search(r"code for sm_90a\b", sass), f"{compiled.name}: not an sm_90a cubin"
    assert "HGMMA" in sass, f"{compiled.name}: no wgmma in SASS"
    # The MMA is the tile's full N wide (one m64nNk16 per 16 of K), BF16 in, FP32 accumulators.
    assert f"HGMMA.64x{block_n}x16.F32.BF16" in sass, sorted(set(re.findall(r"HGMMA\.\S+", sass)))
    assert "UTMALDG" in sass, f"{compiled.name}: no TMA load in SASS"
    if tma_store:
        assert "UTMASTG" in sass, f"{compiled.name}: no TMA store in SASS"
    assert "CALL.ABS" not in sass, f"{compiled.name}: calls a fallback (wrong architecture?)"


@pytest.mark.parametrize("spec, check_sass", _VARIANTS, ids=[spec.name for spec, _ in _VARIANTS])
def test_bf16_gemm_variant_compiles_without_spills_with_hgmma_and_tma(spec, check_sass):
    compiled = sm90_bf16_gemm.compile_spec(spec)
    assert compiled.name == spec.name
    assert compiled.entry_dir.parent.parent == Path(os.environ["DG_JIT_CACHE_DIR"])
    assert compiled.cubin[:4] == b"\x7fELF"
    assert (compiled.entry_dir / "kernel.cu").read_text() == spec.source()
    _check_ptxas_report(compiled)
    if check_sass:
        _check_sass(compiled, spec.config.block_n, tma_store=not spec.split_k)
    if compiler.cuobjdump_path() is not None:
        # B's loads carry the evict-first cache policy (a descriptor operand) exactly when chosen.
        sass = compiler.disassemble(compiled.entry_dir / "kernel.cubin")
        hinted = [line for line in sass.splitlines() if "UTMALDG" in line and "desc[" in line]
        assert bool(hinted) == spec.b_evict_first, f"{spec.name}: {len(hinted)} cache-hinted TMA loads"


# 2-CTA clusters: along N sharing A by TMA multicast, each way load_a_tile splits A (K-major rows,
# one MN-major atom of two, half the K rows of a single MN-major atom); along M sharing B, each way
# load_b_tile splits B (K-major rows, half the K rows of every MN-major atom); plain and split-K.
_CLUSTER_VARIANTS = [
    # (cluster_m, cluster_n, block_m, block_n, splits, a_k_major, b_k_major, out_dtype, accumulate)
    (1, 2, 128, 256, 1, True, True, torch.bfloat16, False),
    (1, 2, 128, 128, 1, False, True, torch.float32, True),
    (1, 2, 64, 128, 1, False, False, torch.bfloat16, True),
    (1, 2, 64, 64, 4, True, False, torch.float32, False),
    (1, 2, 128, 64, 4, False, True, torch.bfloat16, True),
    (2, 1, 128, 256, 1, True, True, torch.bfloat16, False),
    (2, 1, 128, 192, 1, True, False, torch.bfloat16, True),
    (2, 1, 64, 128, 3, False, True, torch.float32, False),
    (2, 1, 128, 64, 1, False, False, torch.float32, True),
]


@pytest.mark.parametrize("cluster_m,cluster_n,block_m,block_n,splits,a_k_major,b_k_major,out_dtype,"
                         "accumulate", _CLUSTER_VARIANTS)
def test_cluster_variants_compile_with_multicast_tma_loads(cluster_m, cluster_n, block_m, block_n,
                                                          splits, a_k_major, b_k_major, out_dtype,
                                                          accumulate):
    config = heuristics.make_config(4096, 4096, block_m, block_n, splits, 7168,
                                    _OUT_BYTES[out_dtype], _NUM_SMS, cluster_n=cluster_n,
                                    cluster_m=cluster_m)
    assert config is not None and config.cluster_size == 2 and config.num_sms % 2 == 0
    spec = Bf16GemmKernelSpec(config, a_k_major, b_k_major, out_dtype, accumulate)
    compiled = sm90_bf16_gemm.compile_spec(spec)
    _check_ptxas_report(compiled)
    _check_sass(compiled, block_n, tma_store=splits == 1)
    if compiler.cuobjdump_path() is not None:
        sass = compiler.disassemble(compiled.entry_dir / "kernel.cubin")
        assert "MULTICAST" in sass, f"{compiled.name}: no multicast TMA load"


def test_cluster_configs_need_an_even_number_of_blocks_along_the_cluster():
    assert heuristics.make_config(128, 64 * 33, 64, 64, 1, 7168, 2, _NUM_SMS, cluster_n=2) is None
    assert heuristics.make_config(128, 64 * 34, 64, 64, 1, 7168, 2, _NUM_SMS, cluster_n=2) is not None
    assert heuristics.make_config(64 * 33, 128, 64, 64, 1, 7168, 2, _NUM_SMS, cluster_m=2) is None
    assert heuristics.make_config(64 * 34, 128, 64, 64, 1, 7168, 2, _NUM_SMS, cluster_m=2) is not None
    assert heuristics.make_config(256, 256, 64, 64, 1, 7168, 2, _NUM_SMS, cluster_n=2,
                                  cluster_m=2) is None


def test_bf16_gemm_with_compiled_dims_compiles_to_its_own_entry():
    tile = _find(chosen_tiles(), 128, 128)
    runtime_dims = _spec(tile, True, True, torch.bfloat16, False)
    baked = _spec(tile, True, True, torch.bfloat16, False, shape_n=7168, shape_k=2048)
    assert "7168" in baked.source() and "2048" in baked.source()
    compiled = sm90_bf16_gemm.compile_spec(baked)
    assert compiled.entry_dir != sm90_bf16_gemm.compile_spec(runtime_dims).entry_dir
    _check_ptxas_report(compiled)
    _check_sass(compiled, tile.block_n)


def test_architectures_other_than_sm90a_and_sm100a_are_refused():
    with pytest.raises(compiler.JitCompileError, match="sm_80"):
        compiler.common_flags("sm_80")
    with pytest.raises(compiler.JitCompileError, match="sm_90'"):
        compiler.common_flags("sm_90")  # no 'a': CuTe-style fallbacks would compile without GMMA


def _nvcc_available() -> bool:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return False
    # nvcc < 12 cannot build sm_90a; the JIT needs a CUDA 12.3+ toolkit.
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"release (\d+)\.(\d+)", out)
    return bool(match) and (int(match.group(1)), int(match.group(2))) >= (12, 3)


@pytest.mark.skipif(not _nvcc_available(), reason="no nvcc (CUDA >= 12.3) on PATH")
def test_nvcc_path_builds_sm90a_cubin_with_hgmma(monkeypatch):
    monkeypatch.setenv("DG_JIT_USE_NVRTC", "0")
    assert compiler.use_nvcc()
    assert compiler.compiler_signature().startswith("NVCC")
    tile = _find(chosen_tiles(), 128, 128)
    spec = _spec(tile, False, True, torch.float32, True)
    compiled = sm90_bf16_gemm.compile_spec(spec)
    assert "nvcc" in (compiled.entry_dir / "command.txt").read_text()
    assert "code=sm_90a" in (compiled.entry_dir / "command.txt").read_text()
    _check_ptxas_report(compiled)
    if compiler.cuobjdump_path() is None:
        pytest.skip("cuobjdump not found: cannot read the cubin's architecture and SASS")
    _check_sass(compiled, tile.block_n)
