"""Compile-only checks of the FP8 cast kernels (dg_triton.triton.quant) for sm_90a and sm_100a, no
GPU needed (TOOLCHAIN.md "Triton without a GPU").

Runs in its own pytest process without TRITON_INTERPRET: once that is set, triton.compile no longer
works in the process. Each kernel is compiled with the constants and warp count its launcher uses,
for bf16 and fp32 inputs, with the argument types a real launch specializes to (32-bit sizes and
strides).
"""
import os

import pytest

pytestmark = pytest.mark.compile

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("triton.compile does not work with TRITON_INTERPRET=1 in the process", allow_module_level=True)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from dg_triton.triton import quant  # noqa: E402

_STRIDES = {"stride_xm": "i32", "stride_xn": "i32"}


def _per_token(x_type, packed):
    signature = {"x_ptr": x_type, "q_ptr": "*fp8e4nv", "sf_ptr": "*u8" if packed else "*fp32",
                 "m": "i32", "n": "i32", **_STRIDES, "stride_sfm": "i32", "stride_sfk": "i32",
                 "GRAN_K": "constexpr", "BLOCK_M": "constexpr", "USE_UE8M0": "constexpr",
                 "PACKED_UE8M0": "constexpr"}
    constexprs = {"GRAN_K": 128, "BLOCK_M": quant._PER_TOKEN_BLOCK_M, "USE_UE8M0": packed,
                  "PACKED_UE8M0": packed}
    return quant._per_token_cast_to_fp8_kernel, signature, constexprs, 4


def _per_block(x_type, use_ue8m0):
    signature = {"x_ptr": x_type, "q_ptr": "*fp8e4nv", "sf_ptr": "*fp32", "m": "i32", "n": "i32",
                 **_STRIDES, "num_col_blocks": "i32", "GRAN_K": "constexpr", "USE_UE8M0": "constexpr"}
    return quant._per_block_cast_to_fp8_kernel, signature, {"GRAN_K": 128, "USE_UE8M0": use_ue8m0}, 8


def _per_channel(x_type, use_ue8m0):
    """As a GPU launch builds it: the divisions by exact_math (FAST_DIV)."""
    signature = {"x_ptr": x_type, "q_ptr": "*fp8e4nv", "sf_ptr": "*fp32", "n": "i32", **_STRIDES,
                 "GRAN_K": "constexpr", "BLOCK_N": "constexpr", "USE_UE8M0": "constexpr",
                 "FAST_DIV": "constexpr"}
    constexprs = {"GRAN_K": 128, "BLOCK_N": quant._PER_CHANNEL_BLOCK_N, "USE_UE8M0": use_ue8m0,
                  "FAST_DIV": True}
    num_warps = quant._PER_CHANNEL_NUM_WARPS
    return quant._per_channel_cast_to_fp8_kernel, signature, constexprs, num_warps


KERNELS = {"per_token": _per_token, "per_block": _per_block, "per_channel": _per_channel}


@pytest.mark.parametrize("arch", [90, 100])
@pytest.mark.parametrize("x_type,variant", [("*bf16", True), ("*fp32", False)])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_fp8_cast_kernel_compiles_to_a_cubin(name, x_type, variant, arch):
    fn, signature, constexprs, num_warps = KERNELS[name](x_type, variant)
    compiled = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": num_warps})
    cubin = compiled.asm["cubin"]
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"
    ptx = compiled.asm["ptx"]
    assert f".target sm_{arch}a" in ptx
    # Bitwise agreement with the reference needs correctly rounded divisions: div_rn, not the
    # approximate div.full.f32 that a plain fp32 `/` lowers to, or in the per-channel cast
    # exact_math's FMA sequences (whose reciprocal starts from div.full and refines it; a UE8M0
    # 1/sf is exact bit arithmetic, so that build has no division left).
    if name == "per_channel":
        assert "fma.rn.f32" in ptx and "div.rn.f32" not in ptx
        assert ("div.full.f32" in ptx) == (not variant)
    else:
        assert "div.rn.f32" in ptx and "div.full.f32" not in ptx
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
