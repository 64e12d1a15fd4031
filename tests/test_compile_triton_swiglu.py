"""Compile-only checks of the SwiGLU kernels (dg_triton.triton.swiglu) for sm_90a and sm_100a, no
GPU needed (TOOLCHAIN.md "Triton without a GPU").

Runs in its own pytest process without TRITON_INTERPRET: once that is set, triton.compile no longer
works in the process. Each kernel is compiled with the constants and warp count its launcher uses
on CUDA (libdevice exp), with the argument types a real launch specializes to (32-bit sizes and
strides, the clamp as fp32).
"""
import os
import re

import pytest

pytestmark = pytest.mark.compile

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("triton.compile does not work with TRITON_INTERPRET=1 in the process", allow_module_level=True)

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dg_triton.triton import swiglu

_COMMON = {"m": "i32", "intermediate": "i32", "stride_xm": "i32", "stride_xn": "i32",
           "stride_w": "i32", "clamp_value": "fp32"}


def _options(weights_type):
    return {"HAS_WEIGHTS": weights_type is not None, "HAS_CLAMP": weights_type is not None,
            "LIBDEVICE_EXP": True}


def _fused(weights_type, gran_k, packed):
    signature = {"x_ptr": "*bf16", "weights_ptr": weights_type or "*bf16", "q_ptr": "*fp8e4nv",
                 "sf_ptr": "*u8" if packed else "*fp32", **_COMMON, "num_groups": "i32",
                 "sf_rows": "i32", "stride_sfm": "i32", "stride_sfk": "i32",
                 "GRAN_K": "constexpr", "BLOCK_M": "constexpr", "HAS_WEIGHTS": "constexpr",
                 "HAS_CLAMP": "constexpr", "LIBDEVICE_EXP": "constexpr", "USE_UE8M0": "constexpr",
                 "PACKED_UE8M0": "constexpr", "PARTIAL_LAST_GROUP": "constexpr"}
    # The gran_k = 32 variants stand for an I that is not a multiple of gran_k.
    constexprs = {"GRAN_K": gran_k, "BLOCK_M": swiglu.fused_block_m(gran_k), **_options(weights_type),
                  "USE_UE8M0": packed, "PACKED_UE8M0": packed, "PARTIAL_LAST_GROUP": gran_k == 32}
    return swiglu._swiglu_per_token_cast_to_fp8_kernel, signature, constexprs


def _unfused(weights_type):
    signature = {"x_ptr": "*bf16", "weights_ptr": weights_type or "*bf16", "out_ptr": "*bf16",
                 **_COMMON, "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
                 "HAS_WEIGHTS": "constexpr", "HAS_CLAMP": "constexpr", "LIBDEVICE_EXP": "constexpr"}
    constexprs = {"BLOCK_M": swiglu._SWIGLU_BLOCK_M, "BLOCK_N": swiglu._SWIGLU_BLOCK_N,
                  **_options(weights_type)}
    return swiglu._swiglu_kernel, signature, constexprs


VARIANTS = {
    "fused_gk128_plain": lambda: _fused(None, 128, False),
    "fused_gk128_packed_fp32_weights_clamp": lambda: _fused("*fp32", 128, True),
    "fused_gk32_bf16_weights_clamp": lambda: _fused("*bf16", 32, False),
    "unfused_plain": lambda: _unfused(None),
    "unfused_fp32_weights_clamp": lambda: _unfused("*fp32"),
}


@pytest.mark.parametrize("arch", [90, 100])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_swiglu_kernel_compiles_to_a_cubin(variant, arch):
    fn, signature, constexprs = VARIANTS[variant]()
    compiled = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": 4})
    cubin = compiled.asm["cubin"]
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"
    ptx = compiled.asm["ptx"]
    assert f".target sm_{arch}a" in ptx
    # silu's division (and the scale's) must be correctly rounded (div_rn), not the approximate
    # div.full.f32 that a plain fp32 `/` lowers to: the reference divides exactly.
    assert "div.rn.f32" in ptx and "div.full.f32" not in ptx
    # libdevice's expf (what torch's CUDA exp runs) is inlined, no call left: its round-down FMA
    # range reduction feeds ex2.approx (tl.exp would be a bare mul + ex2.approx).
    assert not re.search(r"^\s*call", ptx, re.MULTILINE)
    assert "fma.rm.ftz.f32" in ptx and "ex2.approx.ftz.f32" in ptx
    if variant.startswith("fused"):
        assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
        # The 1e-4 floor keeps a NaN amax (torch.clamp does): max.NaN, not the NaN-dropping max.
        assert "max.NaN.f32" in ptx
    else:
        assert "cvt.rn.bf16x2.f32" in ptx or "cvt.rn.bf16.f32" in ptx
    if "clamp" in variant:
        assert "min.NaN.f32" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
