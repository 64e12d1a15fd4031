"""Compile-only checks of the scale-factor layout kernels (dg_triton.triton.sf_layout) for sm_90a and
sm_100a, no GPU needed (TOOLCHAIN.md "Triton without a GPU").

Runs in its own pytest process without TRITON_INTERPRET: once that is set, triton.compile no longer
works in the process. Each kernel is compiled at the widest and the narrowest tile its launcher
picks (and, for the k-grouped kernel, at the largest group count), with and without its group
layout, with the warp count and argument types of a real launch (32-bit sizes and strides).
"""
import os

import pytest

pytestmark = pytest.mark.compile

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("triton.compile does not work with TRITON_INTERPRET=1 in the process", allow_module_level=True)

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dg_triton.jit import compiler
from dg_triton.triton import sf_layout

_POINTERS = {"sf_ptr": "*i32", "out_ptr": "*i32"}
_STRIDES = {"sf_stride_g": "i32", "sf_stride_mn": "i32", "sf_stride_k": "i32"}


def _mn_major(inner, with_groups):
    signature = {**_POINTERS, "mn": "i32", "sk": "i32", "aligned_mn": "i32", **_STRIDES,
                 "BLOCK_MN": "constexpr", "BLOCK_K": "constexpr"}
    constexprs = dict(zip(("BLOCK_MN", "BLOCK_K"), sf_layout._tile(inner)))
    return sf_layout._mn_major_tma_aligned_kernel, signature, constexprs, 4


def _packed_ue8m0(inner, with_groups, k_contiguous):
    # inner: packed SF columns; k_contiguous: a row-major input (wide loads) or a strided one.
    signature = {**_POINTERS, "psum_ptr": "*i32", "mn": "i32", "sk": "i32", "packed_sk": "i32", "aligned_mn": "i32",
                 "gran_mn": "i32", **_STRIDES, "num_psum_groups": "i32", "mk_alignment": "i32", "search_steps": "i32",
                 "BLOCK_MN": "constexpr", "BLOCK_P": "constexpr", "HAS_PSUM": "constexpr", "K_CONTIGUOUS": "constexpr"}
    constexprs = {**dict(zip(("BLOCK_MN", "BLOCK_P"), sf_layout._packing_tile(inner, k_contiguous))),
                  "HAS_PSUM": with_groups, "K_CONTIGUOUS": k_contiguous}
    return sf_layout._mn_major_tma_aligned_packed_ue8m0_kernel, signature, constexprs, sf_layout.PACKING_NUM_WARPS


def _packed_ue8m0_row_major(inner, with_groups):
    return _packed_ue8m0(inner, with_groups, True)


def _packed_ue8m0_strided(inner, with_groups):
    return _packed_ue8m0(inner, with_groups, False)


def _k_grouped(inner, with_groups):
    # inner: MN of the [SFK, MN] input; 128 groups (the API maximum) makes the widest group vector.
    signature = {**_POINTERS, "grouped_layout_ptr": "*i32", "num_groups": "i32", "sf_k": "i32", "packed_sf_k": "i32",
                 "mn": "i32", "gran_k": "i32", "k_alignment": "i32",
                 "USE_PSUM": "constexpr", "BLOCK_G": "constexpr", "BLOCK_P": "constexpr", "BLOCK_MN": "constexpr"}
    block_p, block_mn = sf_layout._k_grouped_tile(inner, 128)
    constexprs = {"USE_PSUM": with_groups, "BLOCK_G": 128, "BLOCK_P": block_p, "BLOCK_MN": block_mn}
    return sf_layout._k_grouped_packed_ue8m0_kernel, signature, constexprs, sf_layout.PACKING_NUM_WARPS


# (kernel, inner size, with group layout): the narrowest and widest tiles of each launcher.
CASES = [
    (_mn_major, 57, False), (_mn_major, 1, False),
    (_packed_ue8m0_row_major, 14, False), (_packed_ue8m0_row_major, 1, False),
    (_packed_ue8m0_row_major, 14, True), (_packed_ue8m0_row_major, 1, True),
    (_packed_ue8m0_strided, 14, False), (_packed_ue8m0_strided, 1, True),
    (_k_grouped, 7168, False), (_k_grouped, 7168, True), (_k_grouped, 4, True),
]


@pytest.mark.parametrize("arch", [90, 100])
@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case[0].__name__[1:]}-{case[1]}-{'groups' if case[2] else 'plain'}")
def test_sf_layout_kernel_compiles_to_a_cubin_without_local_memory(case, arch):
    make, inner, with_groups = case
    fn, signature, constexprs, num_warps = make(inner, with_groups)
    compiled = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": num_warps})
    cubin = compiled.asm["cubin"]
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"
    ptx = compiled.asm["ptx"]
    assert f".target sm_{arch}a" in ptx
    # One pass over the data: global loads and stores, no local memory.
    assert "ld.global" in ptx and "st.global" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
    # Register spills only show after ptxas: read the cubin's own resource report.
    usage = compiler.cubin_resource_usage(cubin)
    if usage is not None:
        assert usage.spill_store_bytes == 0 and usage.stack_frame_bytes == 0, usage
