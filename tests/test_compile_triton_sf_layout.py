"""Compile-only checks of the scale-factor layout kernels (dg_triton.triton.sf_layout) for sm_90a and
sm_100a, no GPU needed (TOOLCHAIN.md "Triton without a GPU").

Runs in its own pytest process without TRITON_INTERPRET: once that is set, triton.compile no longer
works in the process. Each kernel is compiled at the widest and the narrowest tile its launcher
picks (and, for the k-grouped kernel, at the largest group count), with and without its group
layout, with the warp count and argument types of a real launch (32-bit sizes and strides).
"""
import os
import re
import tempfile
from pathlib import Path

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
                 **_STRIDES, "num_psum_groups": "i32", "mk_alignment": "i32", "search_steps": "i32",
                 "GRAN_MN": "constexpr", "BLOCK_MN": "constexpr", "BLOCK_P": "constexpr", "HAS_PSUM": "constexpr",
                 "K_CONTIGUOUS": "constexpr", "ROWS_16B_ALIGNED": "constexpr"}
    constexprs = {**dict(zip(("BLOCK_MN", "BLOCK_P"), sf_layout._packing_tile(inner, k_contiguous))),
                  "GRAN_MN": 1 if with_groups else 128, "HAS_PSUM": with_groups, "K_CONTIGUOUS": k_contiguous,
                  "ROWS_16B_ALIGNED": k_contiguous and not with_groups}
    return sf_layout._mn_major_tma_aligned_packed_ue8m0_kernel, signature, constexprs, sf_layout.PACKING_NUM_WARPS


def _packed_ue8m0_row_major(inner, with_groups):
    return _packed_ue8m0(inner, with_groups, True)


def _packed_ue8m0_strided(inner, with_groups):
    return _packed_ue8m0(inner, with_groups, False)


def _k_grouped(inner, with_groups):
    # inner: MN of the [SFK, MN] input; 128 groups (the API maximum) makes the widest group vector.
    signature = {**_POINTERS, "grouped_layout_ptr": "*i32", "num_groups": "i32", "sf_k": "i32", "packed_sf_k": "i32",
                 "mn": "i32", "k_alignment": "i32", "GRAN_K": "constexpr",
                 "USE_PSUM": "constexpr", "BLOCK_G": "constexpr", "BLOCK_P": "constexpr", "BLOCK_MN": "constexpr"}
    block_p, block_mn = sf_layout._k_grouped_tile(inner, 128)
    constexprs = {"GRAN_K": 128, "USE_PSUM": with_groups, "BLOCK_G": 128, "BLOCK_P": block_p, "BLOCK_MN": block_mn}
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


def _sass_of(fn, signature, constexprs, num_warps, divisible_args):
    """SASS of a launch-like specialization: pointers and the named 16-divisible integers marked
    as Triton's launcher marks them."""
    names = list(signature)
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in divisible_args}
    compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps})
    if compiler.cuobjdump_path() is None:
        pytest.skip("cuobjdump not available")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "kernel.cubin"
        path.write_bytes(compiled.asm["cubin"])
        return compiler.disassemble(path)


def test_the_sf_packings_load_16_byte_vectors_and_call_no_division_routine():
    """[16384, 56] fp32 row-major (the activations' SFs): 16-byte loads, no 64-bit division call
    (a run-time gran_mn made every thread call it per row before its first load, 2026-12-02); the
    k-grouped packing likewise with its compile-time gran_k."""
    fn, signature, constexprs, num_warps = _packed_ue8m0(14, False, True)
    constexprs = {**constexprs, "GRAN_MN": 1, "sf_stride_k": 1}
    signature = {**signature, "sf_stride_k": "constexpr"}
    sass = _sass_of(fn, signature, constexprs, num_warps, ("sf_ptr", "out_ptr", "psum_ptr", "sf_stride_g"))
    assert "LDG.E.128" in sass and "CALL" not in sass, sorted(set(re.findall(r"(?:LDG|CALL)\S*", sass)))
    fn, signature, constexprs, num_warps = _k_grouped(7168, False)
    constexprs = {**constexprs, "BLOCK_G": 8, **dict(zip(("BLOCK_P", "BLOCK_MN"), sf_layout._k_grouped_tile(7168, 8)))}
    sass = _sass_of(fn, signature, constexprs, num_warps,
                    ("sf_ptr", "out_ptr", "grouped_layout_ptr", "packed_sf_k", "mn"))
    assert "LDG.E.128" in sass and "CALL" not in sass, sorted(set(re.findall(r"(?:LDG|CALL)\S*", sass)))
