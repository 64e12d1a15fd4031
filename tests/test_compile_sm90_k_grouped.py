"""Compile-only checks of the SM90 k-grouped kernels (fp8_gemm.cuh and bf16_gemm.cuh with
scheduler_k_grouped.cuh, dg_triton/kernels/sm90_k_grouped_gemm.py), no GPU needed.

Every binary the host picks (choose_config, choose_bf16_config with both D dtypes) for API.md 8's
k-grouped shapes and for the GPU tests' tail shapes, compiled through the project's JIT and checked
as the dense kernels are (test_compile_sm90_fp8.check_fp8_binary, test_compile_sm90's ptxas and
SASS checks): no spills, no stack frame, wgmma not serialized (C7510); in the SASS QGMMA / HGMMA as
wide as the tile, TMA loads and stores, no CALL.ABS. Compiling also checks the kernels'
static_asserts: their shared-memory plan and sizeof(KGroupedOperands) equal the host's. The FP8
binaries with two consumer warpgroups carry the first-tile stagger's named barrier (and the dense
FP8 kernel does not).
"""
import re

import pytest
from shapes import K_GROUPED_GMNK
import torch
from test_compile_sm90 import _check_ptxas_report, _check_sass, jit_cache_dir  # noqa: F401 (fixture)
from test_compile_sm90_fp8 import check_fp8_binary

from dg_triton.jit import compiler
from dg_triton.kernels import sm90_fp8_gemm
from dg_triton.kernels import sm90_k_grouped_gemm as kg

pytestmark = pytest.mark.compile

_NUM_SMS = 132


def _shapes():
    shapes = [(g, m, n, [k] * g) for g, m, n, k in K_GROUPED_GMNK]
    # The GPU tests' tails (M, N not multiples of a tile; one row) and a launch of many groups.
    return shapes + [(4, 264, 136, [128, 0, 384, 128]), (2, 8, 8, [128, 256]), (3, 1, 136, [256, 0, 128]),
                     (40, 264, 136, [128] * 40)]


def _variants():
    specs = {}
    for groups, m, n, ks in _shapes():
        config = kg.choose_config(m, n, ks, min(groups, kg.MAX_GROUPS_PER_LAUNCH), _NUM_SMS)
        spec = kg.KGroupedFp8GemmKernelSpec(config)
        specs[spec.name] = spec
    return [specs[name] for name in sorted(specs)]


def _bf16_variants():
    """What _make_bf16_plan builds: A (B) K-major only where M (N) is 1."""
    specs = {}
    for groups, m, n, ks in _shapes():
        for out_dtype in (torch.float32, torch.bfloat16):
            out_bytes = torch.finfo(out_dtype).bits // 8
            config = kg.choose_bf16_config(m, n, ks, min(groups, kg.MAX_GROUPS_PER_LAUNCH), out_bytes,
                                           _NUM_SMS, b_k_major=n == 1)
            spec = kg.KGroupedBf16GemmKernelSpec(config, out_dtype, m == 1, n == 1)
            specs[spec.name] = spec
    return [specs[name] for name in sorted(specs)]


_VARIANTS = _variants()
_BF16_VARIANTS = _bf16_variants()


@pytest.mark.parametrize("spec", _VARIANTS, ids=[spec.name for spec in _VARIANTS])
def test_k_grouped_fp8_variant_compiles_without_spills_with_qgmma_and_tma(spec):
    check_fp8_binary(kg.compile_spec(spec), spec.config.block_n)


@pytest.mark.parametrize("spec", _BF16_VARIANTS, ids=[spec.name for spec in _BF16_VARIANTS])
def test_k_grouped_bf16_variant_compiles_without_spills_with_hgmma_and_tma(spec):
    compiled = kg.compile_spec(spec)
    assert compiled.cubin[:4] == b"\x7fELF"
    _check_ptxas_report(compiled)
    _check_sass(compiled, spec.config.block_n)


_STAGGER_ARRIVE = re.compile(r"BAR\.ARV 0x5, 0x100\b")
_STAGGER_WAIT = re.compile(r"BAR\.SYNC(?:\.DEFER_BLOCKING)? 0x5, 0x100\b")
_STAGGER_ACK = re.compile(r"BAR\.\S+ 0x6, 0x100\b")   # the every-tile probe form's barrier


def _sass(compiled) -> str:
    if compiler.cuobjdump_path() is None:
        pytest.skip("cuobjdump not found: cannot read the SASS")
    return compiler.disassemble(compiled.entry_dir / "kernel.cubin")


@pytest.mark.parametrize("spec", _VARIANTS, ids=[spec.name for spec in _VARIANTS])
def test_k_grouped_fp8_variant_staggers_its_warpgroups_at_the_first_tile_only(spec):
    """fp8_gemm.cuh's stagger (K_GROUPED_FP8_STAGGER_BLOCKS): a two-warpgroup binary carries
    warpgroup 0's arrival and warpgroup 1's wait on named barrier 5 (256 threads) and no barrier 6
    (which only gating every tile needs); a one-warpgroup binary (64-row tiles) has no 256-thread
    barrier at all, which would hang it."""
    assert kg.K_GROUPED_FP8_STAGGER_BLOCKS > 0
    sass = _sass(kg.compile_spec(spec))
    two_warpgroups = spec.config.block_m == 128
    assert bool(_STAGGER_ARRIVE.search(sass)) == two_warpgroups, spec.name
    assert bool(_STAGGER_WAIT.search(sass)) == two_warpgroups, spec.name
    assert not _STAGGER_ACK.search(sass), spec.name


def test_the_dense_fp8_kernel_does_not_stagger():
    """The traits' default (kStaggerBlocks = 0) leaves the dense kernel without the barrier."""
    config = next(spec.config for spec in _VARIANTS if spec.config.block_m == 128)
    sass = _sass(sm90_fp8_gemm.compile_spec(sm90_fp8_gemm.Fp8GemmKernelSpec(config, True, torch.float32, True)))
    assert not _STAGGER_ARRIVE.search(sass) and not _STAGGER_WAIT.search(sass)


def test_k_grouped_bf16_variants_cover_both_d_dtypes_and_a_one_row_a():
    names = [spec.name for spec in _BF16_VARIANTS]
    assert any("_fp32_" in name for name in names) and any("_bf16_x" in name for name in names)
    assert any("_kn_" in name for name in names), "M = 1 (A K-major) not compiled"
