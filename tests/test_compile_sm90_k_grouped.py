"""Compile-only checks of the SM90 k-grouped FP8 kernel (fp8_gemm.cuh with scheduler_k_grouped.cuh,
dg_triton/kernels/sm90_k_grouped_gemm.py), no GPU needed.

Every binary the host picks (choose_config) for API.md 8's k-grouped shapes and for the GPU tests'
tail shapes, compiled through the project's JIT and checked as the dense FP8 kernels are
(test_compile_sm90_fp8.check_fp8_binary): no spills, no stack frame, wgmma not serialized (C7510);
in the SASS QGMMA as wide as the tile, TMA loads and stores, no CALL.ABS. Compiling also checks the
kernel's static_asserts: its shared-memory plan and sizeof(KGroupedOperands) equal the host's.
"""
import pytest
from shapes import K_GROUPED_GMNK
from test_compile_sm90 import jit_cache_dir  # noqa: F401 (fixture)
from test_compile_sm90_fp8 import check_fp8_binary

from dg_triton.kernels import sm90_k_grouped_gemm as kg

pytestmark = pytest.mark.compile

_NUM_SMS = 132


def _variants():
    specs = {}
    shapes = [(g, m, n, [k] * g) for g, m, n, k in K_GROUPED_GMNK]
    # The GPU tests' tails (M, N not multiples of a tile; one row) and a launch of many groups.
    shapes += [(4, 264, 136, [128, 0, 384, 128]), (2, 8, 8, [128, 256]), (3, 1, 136, [256, 0, 128]),
               (40, 264, 136, [128] * 40)]
    for groups, m, n, ks in shapes:
        config = kg.choose_config(m, n, ks, min(groups, kg.MAX_GROUPS_PER_LAUNCH), _NUM_SMS)
        spec = kg.KGroupedFp8GemmKernelSpec(config)
        specs[spec.name] = spec
    return [specs[name] for name in sorted(specs)]


_VARIANTS = _variants()


@pytest.mark.parametrize("spec", _VARIANTS, ids=[spec.name for spec in _VARIANTS])
def test_k_grouped_fp8_variant_compiles_without_spills_with_qgmma_and_tma(spec):
    check_fp8_binary(kg.compile_spec(spec), spec.config.block_n)
