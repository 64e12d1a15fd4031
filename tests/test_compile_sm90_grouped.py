"""Compile-only checks of the SM90 M-grouped BF16 and FP8 GEMM kernels (bf16_gemm.cuh with the schedulers of
scheduler_grouped.cuh), no GPU needed.

Every binary the heuristics (choose_m_grouped_bf16_config) pick for the grouped shapes of API.md 8
(contiguous index and psum layouts with B K-major and MN-major, masked), plus every block N each
layout can get at its widest block M and at block M 64, compiled through the project's JIT and
checked as the dense BF16 variants are (tests/test_compile_sm90.py's helpers): no spills, no stack
frame, wgmma not serialized (C7510), and in the SASS HGMMA as wide as the tile, TMA loads and stores,
no CALL.ABS. The layouts that can end a warpgroup's rows inside a tile (psum, masked) also carry
the plain-store path (RowLimitedStoreEpilogue): their SASS must hold global stores (STG). The
FP8 kernels (fp8_gemm.cuh with the same schedulers, choose_m_grouped_fp8_config) get the same
checks with QGMMA.
"""
import math
import re

import pytest
from shapes import GROUPED_CONTIGUOUS_GM, GROUPED_MASKED_GM, GROUPED_MASKED_MAX_M, GROUPED_NK
from test_compile_sm90 import _check_ptxas_report, _check_sass, jit_cache_dir  # noqa: F401 (fixture)

from dg_triton.heuristics import sm90 as heuristics
from dg_triton.jit import compiler
from dg_triton.kernels import sm90_grouped_gemm
from dg_triton.kernels.sm90_grouped_gemm import (INDEX, MASKED, PSUM, GroupedFp8GemmKernelSpec,
                                                 GroupedGemmKernelSpec)

pytestmark = pytest.mark.compile

_NUM_SMS = 132
_ALIGNMENT = 128


def _chosen(layout, num_groups, rows_per_group, rows, n, k, b_k_major=True, alignment=_ALIGNMENT):
    kind = heuristics.GROUPED_MASKED if layout == MASKED else heuristics.GROUPED_CONTIGUOUS
    config = heuristics.choose_m_grouped_bf16_config(kind, num_groups, rows_per_group, rows, n, k,
                                                     _NUM_SMS, alignment, b_k_major)
    assert config is not None
    return GroupedGemmKernelSpec(config, layout, b_k_major, n, k)


def _forced(layout, block_m, block_n, b_k_major=True):
    config = heuristics.make_config(block_m, 4096, block_m, block_n, 1, 4096, 2, _NUM_SMS)
    return GroupedGemmKernelSpec(config, layout, b_k_major)


def _variants():
    specs = {}
    for num_groups, expected in GROUPED_CONTIGUOUS_GM:
        for n, k in GROUPED_NK:
            for layout in (INDEX, PSUM):
                for b_k_major in (True, False):
                    spec = _chosen(layout, num_groups, expected, num_groups * expected, n, k, b_k_major)
                    specs[spec] = spec
    for num_groups, expected in GROUPED_MASKED_GM:
        for n, k in GROUPED_NK:
            spec = _chosen(MASKED, num_groups, int(expected * 1.2), GROUPED_MASKED_MAX_M, n, k)
            specs[spec] = spec
    # Every block N: the index layout at block M 128 (the default alignment), the masked layout
    # at block M 64 (decode); MN-major B's 64-column atoms at both block M; psum and masked at the
    # other block M for the widest and narrowest tiles.
    for block_n in range(16, 257, 16):
        for spec in (_forced(INDEX, 128, block_n), _forced(MASKED, 64, block_n)):
            specs[spec] = spec
    for block_m in (64, 128):
        for block_n in (64, 128, 192, 256):
            spec = _forced(INDEX, block_m, block_n, b_k_major=False)
            specs[spec] = spec
        for block_n in (16, 256):
            for layout in (PSUM, MASKED):
                spec = _forced(layout, block_m, block_n)
                specs[spec] = spec
    return list(specs.values())


_VARIANTS = _variants()


def test_contiguous_block_m_divides_the_alignment_and_other_alignments_are_refused():
    assert heuristics.grouped_contiguous_block_m(128) == 128
    assert heuristics.grouped_contiguous_block_m(256) == 128
    assert heuristics.grouped_contiguous_block_m(192) == 64
    assert heuristics.grouped_contiguous_block_m(64) == 64
    assert heuristics.grouped_contiguous_block_m(32) is None
    assert heuristics.choose_m_grouped_bf16_config(heuristics.GROUPED_CONTIGUOUS, 4, 100, 512, 4096,
                                                   4096, _NUM_SMS, 48) is None


def test_masked_block_m_follows_expected_m_and_the_grid_never_exceeds_the_tiles():
    small = heuristics.choose_m_grouped_bf16_config(heuristics.GROUPED_MASKED, 6, 24, 4096, 4096,
                                                    7168, _NUM_SMS)
    assert small.block_m == 64
    large = heuristics.choose_m_grouped_bf16_config(heuristics.GROUPED_MASKED, 6, 1228, 4096, 4096,
                                                    7168, _NUM_SMS)
    assert large.block_m in (64, 128) and large.num_sms == _NUM_SMS
    tiny = heuristics.choose_m_grouped_bf16_config(heuristics.GROUPED_MASKED, 1, 8, 8, 128, 128,
                                                   _NUM_SMS)
    assert tiny.num_sms == math.ceil(128 / tiny.block_n)
    mn_major = heuristics.choose_m_grouped_bf16_config(heuristics.GROUPED_CONTIGUOUS, 4, 8192, 32768,
                                                       6144, 7168, _NUM_SMS, 128, b_k_major=False)
    assert mn_major.block_n % 64 == 0


def test_variant_list_holds_every_chosen_config_and_fits_shared_memory():
    assert len(set(_VARIANTS)) == len(_VARIANTS)
    for spec in _VARIANTS:
        assert spec.shared_memory <= heuristics.SMEM_LIMIT
        assert spec.config.num_stages == heuristics.max_stages(spec.config.block_m, spec.config.block_n, 2)
        assert spec.config.cluster_size == 1 and spec.config.num_splits == 1
    assert {spec.layout for spec in _VARIANTS} == {INDEX, PSUM, MASKED}
    assert any(not spec.b_k_major for spec in _VARIANTS)


@pytest.mark.parametrize("spec", _VARIANTS, ids=[spec.name + (f"_n{spec.shape_n}k{spec.shape_k}"
                                                              if spec.shape_n else "")
                                                  for spec in _VARIANTS])
def test_grouped_variant_compiles_without_spills_with_hgmma_and_tma(spec):
    compiled = sm90_grouped_gemm.compile_spec(spec)
    assert compiled.cubin[:4] == b"\x7fELF"
    assert (compiled.entry_dir / "kernel.cu").read_text() == spec.source()
    _check_ptxas_report(compiled)
    _check_sass(compiled, spec.config.block_n)
    if spec.layout != INDEX and compiler.cuobjdump_path() is not None:
        sass = compiler.disassemble(compiled.entry_dir / "kernel.cubin")
        assert "STG.E" in sass, f"{compiled.name}: no plain global store for a partial tile"


# ---- M-grouped FP8 (fp8_gemm.cuh, 1D2D, with the same schedulers) --------------------------------
def _fp8_variants():
    specs = {}
    for num_groups, expected in GROUPED_CONTIGUOUS_GM:
        for n, k in GROUPED_NK:
            for layout in (INDEX, PSUM):
                config = heuristics.choose_m_grouped_fp8_config(
                    heuristics.GROUPED_CONTIGUOUS, num_groups, expected, num_groups * expected, n, k,
                    _NUM_SMS, _ALIGNMENT)
                spec = GroupedFp8GemmKernelSpec(config, layout, n, k)
                specs[spec.source()] = spec  # one per binary
    for num_groups, expected in GROUPED_MASKED_GM:
        for n, k in GROUPED_NK:
            config = heuristics.choose_m_grouped_fp8_config(
                heuristics.GROUPED_MASKED, num_groups, int(expected * 1.2), GROUPED_MASKED_MAX_M, n, k,
                _NUM_SMS)
            # As the API builds it: at decode sizes B under L2 evict-first.
            evict_first = sm90_grouped_gemm.fp8_b_loads_evict_first(MASKED, num_groups, int(expected * 1.2),
                                                                    n, k, config)
            spec = GroupedFp8GemmKernelSpec(config, MASKED, n, k, b_evict_first=evict_first)
            specs[spec.source()] = spec  # one per binary
    # The masked decode tiles with K compiled in as 2048 (16 K blocks, 8 stages), where the
    # producer once spilled at 40 registers.
    for block_n in heuristics._MASKED_DECODE_BLOCK_NS:
        config = heuristics.make_fp8_config("1d2d", 64, 4096, 64, block_n, 1, 2048, 2, _NUM_SMS)
        spec = GroupedFp8GemmKernelSpec(config, MASKED, 4096, 2048)
        specs[spec.source()] = spec  # one per binary
    # The widest tile the FP8 register budget allows at each block M, and the narrowest.
    for block_m in (64, 128):
        for block_n in (16, heuristics.FP8_MAX_BLOCK_N["1d2d"]):
            config = heuristics.make_fp8_config("1d2d", block_m, 4096, block_m, block_n, 1, 4096, 2, _NUM_SMS)
            for layout in (INDEX, PSUM, MASKED):
                if layout == MASKED and block_m == 128 and block_n > 160:
                    continue  # never chosen: spills (choose_m_grouped_fp8_config)
                spec = GroupedFp8GemmKernelSpec(config, layout)
                specs[spec.source()] = spec  # one per binary
    # Column-split tiles (kSplitColumns): each warpgroup m64n(block_n / 2); at the widest, both
    # stage counts that fit beside whole-row and one-slab staging.
    for block_n, num_stages in ((256, None), (256, 4), (192, None), (128, 6)):
        config = heuristics.make_fp8_split_columns_config(block_n, _NUM_SMS, num_stages)
        spec = GroupedFp8GemmKernelSpec(config, MASKED)
        specs[spec.source()] = spec
    # ... and the widest with N and K compiled in (the API's default), K as 2048: 16 K blocks, where
    # the producer at 40 registers spilled at 4 stages (96 B; 64x128c at 8: 160 B).
    config = heuristics.make_fp8_split_columns_config(256, _NUM_SMS)
    spec = GroupedFp8GemmKernelSpec(config, MASKED, 4096, 2048)
    specs[spec.source()] = spec
    return sorted(specs.values(), key=lambda spec: (spec.name, spec.shape_n, spec.shape_k))


_FP8_VARIANTS = _fp8_variants()


@pytest.mark.parametrize("spec", _FP8_VARIANTS, ids=[spec.name + (f"_n{spec.shape_n}k{spec.shape_k}"
                                                                  if spec.shape_n else "")
                                                      for spec in _FP8_VARIANTS])
def test_grouped_fp8_variant_compiles_without_spills_with_qgmma_and_tma(spec):
    compiled = sm90_grouped_gemm.compile_fp8_spec(spec)
    assert compiled.cubin[:4] == b"\x7fELF"
    _check_ptxas_report(compiled)
    if compiler.cuobjdump_path() is None:
        return
    sass = compiler.disassemble(compiled.entry_dir / "kernel.cubin")
    mma_n = spec.config.block_n // (2 if spec.config.split_columns else 1)   # one warpgroup's columns
    assert f"QGMMA.64x{mma_n}x32.F32.E4M3.E4M3" in sass, sorted(set(re.findall(r"QGMMA\.\S+", sass)))
    assert "UTMALDG" in sass and "UTMASTG" in sass, f"{compiled.name}: TMA load/store missing"
    assert "CALL.ABS" not in sass, f"{compiled.name}: calls a fallback (wrong architecture?)"
    if spec.layout != INDEX:
        assert "STG.E" in sass, f"{compiled.name}: no plain global store for a partial tile"
    # B's loads carry the evict-first cache policy (a descriptor operand) exactly when chosen.
    hinted = [line for line in sass.splitlines() if "UTMALDG" in line and "desc[" in line]
    assert bool(hinted) == spec.b_evict_first, f"{compiled.name}: {len(hinted)} cache-hinted TMA loads"
