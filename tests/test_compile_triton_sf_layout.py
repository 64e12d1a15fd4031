"""Compile-only checks of the scale-factor layout kernels (dg_triton.triton.sf_layout) for sm_90a and
sm_100a, no GPU needed (TOOLCHAIN.md "Triton without a GPU").

Runs in its own pytest process without TRITON_INTERPRET: once that is set, triton.compile no longer
works in the process. Each kernel is compiled at the widest and the narrowest tile its launcher
picks, with the argument types a real launch specializes to (32-bit sizes and strides).
"""
import os

import pytest

pytestmark = pytest.mark.compile

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("triton.compile does not work with TRITON_INTERPRET=1 in the process", allow_module_level=True)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from dg_triton.triton import sf_layout  # noqa: E402

_POINTERS = {"sf_ptr": "*i32", "out_ptr": "*i32"}
_STRIDES = {"sf_stride_g": "i32", "sf_stride_mn": "i32", "sf_stride_k": "i32"}

KERNELS = {
    "mn_major": (
        sf_layout._mn_major_tma_aligned_kernel,
        {**_POINTERS, "mn": "i32", "sk": "i32", "aligned_mn": "i32", **_STRIDES,
         "BLOCK_MN": "constexpr", "BLOCK_K": "constexpr"},
        ("BLOCK_MN", "BLOCK_K"),
    ),
    "packed_ue8m0": (
        sf_layout._mn_major_tma_aligned_packed_ue8m0_kernel,
        {**_POINTERS, "mn": "i32", "sk": "i32", "packed_sk": "i32", "aligned_mn": "i32", "gran_mn": "i32",
         **_STRIDES, "BLOCK_MN": "constexpr", "BLOCK_P": "constexpr"},
        ("BLOCK_MN", "BLOCK_P"),
    ),
}


@pytest.mark.parametrize("arch", [90, 100])
@pytest.mark.parametrize("inner", [57, 1])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_sf_layout_kernel_compiles_to_a_cubin(name, inner, arch):
    fn, signature, block_names = KERNELS[name]
    constexprs = dict(zip(block_names, sf_layout._tile(inner)))
    compiled = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", arch, 32))
    cubin = compiled.asm["cubin"]
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"
    ptx = compiled.asm["ptx"]
    assert f".target sm_{arch}a" in ptx
    # One pass over the data: global loads and stores, no local-memory spills.
    assert "ld.global" in ptx and "st.global" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
