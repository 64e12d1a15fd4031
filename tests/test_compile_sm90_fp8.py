"""Compile-only checks of the SM90 FP8 GEMM kernels (cuda_kernels/sm90/fp8_gemm.cuh), no GPU needed.

Every binary the heuristics pick for the FP8 shapes of API.md 8 (forward at M in {1, 64, 128,
4096}, dgrad, wgrad with the 1D1D recipe, skip-head-mid), plus the widest tiles each recipe
allows and 2-CTA multicast clusters, compiled through the project's JIT and checked as the BF16
variants are: no spills, no stack frame, wgmma not serialized (C7510), and in the SASS the FP8
tensor-core MMA (QGMMA as wide as the tile's N, E4M3 inputs), TMA loads and stores, no CALL.ABS.
"""
import re

import pytest
import torch
from shapes import (FP8_DENSE_DGRAD_MNK, FP8_DENSE_FORWARD_M, FP8_DENSE_NK, FP8_DENSE_WGRAD_MNK,
                    FP8_SKIP_HEAD_MID_MNK, FP8_SKIP_HEAD_MID_SPLITS)
from test_compile_sm90 import _check_ptxas_report, jit_cache_dir  # noqa: F401 (fixture)

from dg_triton.heuristics import sm90 as heuristics
from dg_triton.jit import compiler
from dg_triton.kernels import sm90_fp8_gemm
from dg_triton.kernels.sm90_fp8_gemm import Fp8GemmKernelSpec

pytestmark = pytest.mark.compile

_NUM_SMS = 132


def _chosen(m, n, k, kind, block_n_divides=None):
    out = torch.float32 if kind == "1d1d" else torch.bfloat16
    config = heuristics.choose_fp8_gemm_config(m, n, k, out.itemsize, _NUM_SMS, kind, block_n_divides)
    return Fp8GemmKernelSpec(config, kind == "1d1d", out, kind == "1d1d",
                             b_evict_first=sm90_fp8_gemm.b_loads_evict_first(m, n, k, config))


def _variants():
    specs = {}
    for m in FP8_DENSE_FORWARD_M:
        for n, k in FP8_DENSE_NK:
            spec = _chosen(m, n, k, "1d2d")
            specs[spec.name] = spec
    for m, n, k in FP8_DENSE_DGRAD_MNK:
        spec = _chosen(m, n, k, "1d2d")
        specs[spec.name] = spec
    for m, n, k in FP8_DENSE_WGRAD_MNK:
        spec = _chosen(m, n, k, "1d1d")
        specs[spec.name] = spec
    left, _, right = FP8_SKIP_HEAD_MID_SPLITS
    for m, n, k in FP8_SKIP_HEAD_MID_MNK:
        spec = _chosen(m, n, k, "1d2d", block_n_divides=min(left, right))
        specs[spec.name] = spec
    # The widest tile each recipe allows, every block_m, and clusters along M and N.
    for kind, out in (("1d2d", torch.bfloat16), ("1d1d", torch.float32)):
        for block_m in (64, 128):
            widest = heuristics.FP8_MAX_BLOCK_N[kind] if block_m == 128 or kind == "1d2d" else 128
            config = heuristics.make_fp8_config(kind, 4096, 4096, block_m, widest, 1, 7168, out.itemsize,
                                                _NUM_SMS)
            spec = Fp8GemmKernelSpec(config, kind == "1d1d", out, kind == "1d1d")
            specs[spec.name] = spec
        if kind == "1d2d":   # 256-row tiles: the widest, one straddling scale blocks, a narrow one
            for block_n in (heuristics.FP8_256_MAX_BLOCK_N, 96, 64):
                config = heuristics.make_fp8_config(kind, 4096, 4096, 256, block_n, 1, 7168,
                                                    out.itemsize, _NUM_SMS)
                spec = Fp8GemmKernelSpec(config, False, out, False)
                specs[spec.name] = spec
        for cluster_m, cluster_n in ((2, 1), (1, 2)):
            config = heuristics.make_fp8_config(kind, 4096, 4096, 128, 128, 1, 7168, out.itemsize,
                                                _NUM_SMS, cluster_n, cluster_m)
            spec = Fp8GemmKernelSpec(config, kind == "1d1d", out, kind == "1d1d")
            specs[spec.name] = spec
    # The load of c at the store (DG_PROBE_LATE_C_LOAD, for benchmarks/probe_fp8.py; by default an
    # accumulating tile loads it under its K loop): the wgrad tile with and without overlapped
    # promotion, and a split-K one (which loads c at the store either way).
    for block_m, block_n, splits in ((128, 112, 1), (128, 144, 1), (64, 64, 4)):
        config = heuristics.make_fp8_config("1d1d", 4096, 4096, block_m, block_n, splits, 7168, 4,
                                            _NUM_SMS)
        spec = Fp8GemmKernelSpec(config, True, torch.float32, True,
                                 probe_defines=("DG_PROBE_LATE_C_LOAD",))
        specs[spec.name] = spec
    # The epilogue's c added one pair at a time (DG_PROBE_SERIAL_C_ADD, the order before the
    # batched add; the GPU tests compare the two bit for bit): the wgrad tile.
    config = heuristics.make_fp8_config("1d1d", 4096, 4096, 128, 112, 1, 7168, 4, _NUM_SMS)
    spec = Fp8GemmKernelSpec(config, True, torch.float32, True, probe_defines=("DG_PROBE_SERIAL_C_ADD",))
    specs[spec.name] = spec
    # B under L2 evict-first (heuristics.sm90.b_evict_first, off by default): a decode tile and a split-K one.
    for m, n, k in ((128, 4096, 7168), (64, 576, 7168)):
        config = heuristics.choose_fp8_gemm_config(m, n, k, 2, _NUM_SMS, "1d2d")
        spec = Fp8GemmKernelSpec(config, False, torch.bfloat16, False, b_evict_first=True)
        specs[spec.name] = spec
    return sorted(specs.values(), key=lambda spec: spec.name)


_VARIANTS = _variants()


def check_fp8_binary(compiled, block_n: int, tma_store: bool = True) -> str | None:
    """The checks every FP8 kernel binary passes: an ELF cubin, ptxas's report clean, and in the
    SASS (None without cuobjdump, else returned) sm_90a code, QGMMA as wide as the tile, TMA loads,
    TMA stores iff `tma_store`, no CALL.ABS."""
    assert compiled.cubin[:4] == b"\x7fELF"
    _check_ptxas_report(compiled)
    if compiler.cuobjdump_path() is None:
        return None
    sass = compiler.disassemble(compiled.entry_dir / "kernel.cubin")
    assert re.search(r"code for sm_90a\b", sass), f"{compiled.name}: not an sm_90a cubin"
    assert f"QGMMA.64x{block_n}x32.F32.E4M3.E4M3" in sass, sorted(set(re.findall(r"QGMMA\.\S+", sass)))
    assert "UTMALDG" in sass, f"{compiled.name}: TMA load missing"
    assert ("UTMASTG" in sass) == tma_store, f"{compiled.name}: TMA store present: {not tma_store}"
    assert "CALL.ABS" not in sass, f"{compiled.name}: calls a fallback (wrong architecture?)"
    return sass


@pytest.mark.parametrize("spec", _VARIANTS, ids=[spec.name for spec in _VARIANTS])
def test_fp8_gemm_variant_compiles_without_spills_with_qgmma_and_tma(spec):
    # Split-K reduces through global memory with plain stores; the other epilogue stores by TMA.
    sass = check_fp8_binary(sm90_fp8_gemm.compile_spec(spec), spec.config.block_n, tma_store=not spec.split_k)
    if sass is not None and spec.config.cluster_size > 1:
        assert "MULTICAST" in sass, f"{spec.name}: no multicast TMA load"
    if sass is not None:
        # B's loads carry the evict-first cache policy (a descriptor operand) exactly when chosen.
        hinted = [line for line in sass.splitlines() if "UTMALDG" in line and "desc[" in line]
        assert bool(hinted) == spec.b_evict_first, f"{spec.name}: {len(hinted)} cache-hinted TMA loads"


def test_fp8_configs_respect_the_register_caps_and_the_skip_head_mid_split():
    for m in FP8_DENSE_FORWARD_M:
        for n, k in FP8_DENSE_NK:
            assert _chosen(m, n, k, "1d2d").config.block_n <= heuristics.FP8_MAX_BLOCK_N["1d2d"]
            assert _chosen(m, n, k, "1d1d").config.block_n <= heuristics.FP8_MAX_BLOCK_N["1d1d"]
    spec = _chosen(4096, 4096, 7168, "1d2d", block_n_divides=128)
    assert 128 % spec.config.block_n == 0
    # set_block_size_multiple_of's N multiple holds (the tuned table is skipped then).
    for multiple in (3, 5, 7):
        config = heuristics.choose_fp8_gemm_config(4096, 4096, 7168, 2, _NUM_SMS, block_n_multiple=multiple)
        assert config.block_n % (16 * multiple) == 0, (multiple, config)
