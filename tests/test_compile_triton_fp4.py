"""Compile-only checks of the FP4 kernels (dg_triton.triton.fp4) for sm_90a and sm_100a, no GPU
needed (TOOLCHAIN.md "Triton without a GPU").

Runs in its own pytest process without TRITON_INTERPRET: once that is set, triton.compile no longer
works in the process. Each kernel is compiled with the tile and warp count its launcher uses on a
GPU, with the argument types a real launch specializes to (32-bit sizes and strides).
"""
import os

import pytest

pytestmark = pytest.mark.compile

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("triton.compile does not work with TRITON_INTERPRET=1 in the process",
                allow_module_level=True)

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dg_triton.triton import fp4

_NUM_WARPS = 4


def _compile(fn, signature, constexprs, arch, maxnreg=None):
    options = {"num_warps": _NUM_WARPS, **({} if maxnreg is None else {"maxnreg": maxnreg})}
    compiled = triton.compile(ASTSource(fn, signature, constexprs),
                              target=GPUTarget("cuda", arch, 32), options=options)
    cubin = compiled.asm["cubin"]
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"
    ptx = compiled.asm["ptx"]
    assert f".target sm_{arch}a" in ptx
    # No spills, and no flush-to-zero anywhere: the reference keeps subnormals (e.g. 1/sf = 2^-127
    # for a UE8M0 sf of 2^127, a dequantized 0.5 * 2^-126), and bitwise agreement needs the same.
    assert "ld.local" not in ptx and "st.local" not in ptx
    assert ".ftz" not in ptx
    return ptx


def _cast_signature(x_type, packed):
    return {"x_ptr": x_type, "packed_ptr": "*i8", "sf_ptr": "*u8" if packed else "*fp32",
            "m": "i32", "n": "i32", "half_n": "i32", "num_groups": "i32", "num_sf_columns": "i32",
            "stride_xm": "i32", "stride_xn": "i32", "stride_sfm": "i32", "stride_sfk": "i32",
            "GRAN_K": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
            "USE_UE8M0": "constexpr", "PACKED_UE8M0": "constexpr", "BF16_WORDS": "constexpr",
            "FAST_DIV": "constexpr", "FLAT_GRID": "constexpr", "SAT_COMPARES": "constexpr"}


def _cast_constexprs(gran_k, packed, bf16_words, fast_div=True):
    """As a GPU launch has them (FAST_DIV: the exact_math division, SAT_COMPARES: the saturating
    FMAs of the E2M1 index; both False under the interpreter; the flat grid only above 65535 row
    blocks)."""
    block_m, block_n = fp4._cast_tile(gran_k)
    return {"GRAN_K": gran_k, "BLOCK_M": block_m, "BLOCK_N": block_n, "USE_UE8M0": packed,
            "PACKED_UE8M0": packed, "BF16_WORDS": bf16_words, "FAST_DIV": fast_div, "FLAT_GRID": False,
            "SAT_COMPARES": fast_div}


# (x pointer type, BF16_WORDS, packed UE8M0): contiguous bf16 goes in as int32 words.
CAST_VARIANTS = [("*i32", True, True), ("*fp32", False, False), ("*bf16", False, False)]


@pytest.mark.parametrize("arch", [90, 100])
@pytest.mark.parametrize("fast_div", [True, False])
@pytest.mark.parametrize("gran_k", [32, 128])
@pytest.mark.parametrize("x_type,bf16_words,packed", CAST_VARIANTS)
def test_fp4_cast_kernel_compiles_with_correctly_rounded_divisions(x_type, bf16_words, packed,
                                                                   gran_k, fast_div, arch):
    # The launcher's register cap comes with the saturating-FMA index (SAT_COMPARES = fast_div).
    ptx = _compile(fp4._per_token_cast_to_fp4_kernel, _cast_signature(x_type, packed),
                   _cast_constexprs(gran_k, packed, bf16_words, fast_div), arch,
                   fp4._CAST_MAXNREG if fast_div else None)
    # Bitwise agreement with the reference needs correctly rounded divisions, never the
    # approximate div.full.f32 that a plain fp32 `/` lowers to: div_rn, or the sf division by
    # exact_math's FMA sequence (its FMAs must stay fused: fma.rn, no separate mul and add).
    assert "div.full.f32" not in ptx and "div.approx" not in ptx
    if fast_div:
        assert "fma.rn.f32" in ptx
        # The E2M1 index's lower midpoints: two saturating FMAs per value, no compares left.
        assert "fma.rn.sat.f32" in ptx
        # A UE8M0 1/sf is exact bit arithmetic; an fp32 sf's reciprocal is still div_rn.
        assert ("div.rn.f32" in ptx) == (not packed)
    else:
        assert "div.rn.f32" in ptx


def test_fp4_cast_thread_owns_whole_groups_with_16_byte_accesses():
    """The benchmark case (bf16 [4096, 7168], gran_k 32, packed UE8M0), specialized as a launch
    specializes it (16-byte aligned pointers, sizes divisible by 16, unit strides as constants):
    each thread loads its 32-column slot with 16-byte loads and stores its 16 bytes at once, and
    no group crosses threads (no shuffle, no shared memory), which is what the kernel's layout is
    for; a Triton whose coalescing picked another layout would fail here, not only run slower."""
    signature = _cast_signature("*i32", True)
    constexprs = _cast_constexprs(32, True, True)
    signature["stride_xn"] = signature["stride_sfk"] = "constexpr"
    constexprs["stride_xn"] = constexprs["stride_sfk"] = 1
    names = fp4._per_token_cast_to_fp4_kernel.arg_names
    divisible = ["x_ptr", "packed_ptr", "sf_ptr", "m", "n", "half_n", "num_groups", "stride_xm"]
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in divisible}
    compiled = triton.compile(ASTSource(fp4._per_token_cast_to_fp4_kernel, signature, constexprs,
                                        attrs),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": _NUM_WARPS})
    ptx = compiled.asm["ptx"]
    block_m, block_n = fp4._cast_tile(32)
    slots_per_thread = block_m * block_n // 32 // (32 * _NUM_WARPS)
    assert ptx.count("ld.global.v4.b32") == 4 * slots_per_thread
    assert ptx.count("st.global.v4.b32") == slots_per_thread
    assert "shfl.sync" not in ptx and "bar.sync" not in ptx
    assert compiled.metadata.shared == 0


@pytest.mark.parametrize("bytes_fast", [False, True])
def test_transpose_kernel_compiles(bytes_fast):
    signature = {"a_ptr": "*i8", "out_ptr": "*i8", "m": "i32", "half_n": "i32",
                 "stride_am": "i32", "stride_an": "i32",
                 "BLOCK_ROWS": "constexpr", "BLOCK_BYTES": "constexpr", "BYTES_FAST": "constexpr"}
    constexprs = {"BLOCK_ROWS": fp4._TRANSPOSE_BLOCK_ROWS,
                  "BLOCK_BYTES": fp4._TRANSPOSE_BLOCK_BYTES, "BYTES_FAST": bytes_fast}
    for arch in (90, 100):
        _compile(fp4._transpose_packed_fp4_kernel, signature, constexprs, arch)


@pytest.mark.parametrize("arch", [90, 100])
@pytest.mark.parametrize("packed", [False, True])
def test_cast_back_kernel_compiles(packed, arch):
    signature = {"packed_ptr": "*i8", "sf_ptr": "*i32" if packed else "*fp32", "out_ptr": "*fp32",
                 "m": "i32", "half_n": "i32", "stride_pm": "i32", "stride_pn": "i32",
                 "stride_sfm": "i32", "stride_sfk": "i32",
                 "GRAN_K": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
                 "PACKED_UE8M0": "constexpr"}
    constexprs = {"GRAN_K": 32, "BLOCK_M": fp4._CAST_BACK_BLOCK_M,
                  "BLOCK_N": fp4._CAST_BACK_BLOCK_N, "PACKED_UE8M0": packed}
    ptx = _compile(fp4._cast_back_from_fp4_kernel, signature, constexprs, arch)
    # The dequantized value times its SF is a plain IEEE multiply, as in the reference.
    assert "mul.rn.f32" in ptx or "mul.f32" in ptx
