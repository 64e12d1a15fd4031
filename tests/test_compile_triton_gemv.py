"""Compile-only checks of the FP8 and BF16 GEMV (dg_triton.triton.gemv), no GPU needed (TOOLCHAIN.md "Triton
without a GPU"): the kernel, with the specialization a launch of the default config gets at M = 1
(ints equal to 1 and unit strides as constants, 16-divisible pointers and sizes marked so) and at
M = 4 (BF16 at M = 1 and 2), for sm_90a and sm_100a: a cubin for the target, no local memory, and in the SASS 128-bit
global loads (B streamed 16 bytes per load, what makes it a bandwidth kernel) and no
tensor-core instruction (CUDA cores only).
Split-K builds count arrivals with a global atomic (the last slice sums in the same kernel).

Runs in its own pytest process without TRITON_INTERPRET (as test_compile_triton_gemm_portable).
"""
import os

import pytest

pytestmark = pytest.mark.compile

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("triton.compile does not work with TRITON_INTERPRET=1 in the process", allow_module_level=True)

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from test_compile_triton_gemm_portable import checked_sass

from dg_triton.triton import gemv


def _compile(fn, signature: dict, constexprs: dict, divisible: tuple, arch: int, num_warps: int):
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name in divisible}
    return triton.compile(ASTSource(fn, signature, constexprs, attrs),
                          target=GPUTarget("cuda", arch, 64), options={"num_warps": num_warps})


def _gemv_kernel(arch: int, m: int, kind: str, accumulate: bool, split: bool):
    """kind: "1d2d" / "1d1d" (FP8) or "bf16" (sfa_ptr and sfb_ptr are a and b, unread)."""
    config = gemv.choose_config(m, 2112, 7168, 132, kind != "bf16")
    out = "fp32" if kind == "1d1d" else "bf16"
    data, scales = ("*bf16", "*bf16") if kind == "bf16" else ("*fp8e4nv", "*fp32")
    signature = {"a_ptr": data, "sfa_ptr": scales, "b_ptr": data, "sfb_ptr": scales,
                 "d_ptr": f"*{out}", "ws_ptr": "*fp32", "counter_ptr": "*i32", "m": "i32", "n": "i32",
                 "k": "i32", "k_blocks_per_split": "i32", "num_splits": "i32",
                 "stride_am": "i32", "stride_bn": "i32", "stride_sfa_m": "i32",
                 "stride_sfa_k": "i32", "stride_sfb_row": "i32", "stride_sfb_k": "i32",
                 "stride_dm": "i32", "ROWS": "constexpr",
                 "BLOCK_N": "constexpr", "GROUPS": "constexpr", "SCALED": "constexpr",
                 "SFB_PER_ROW": "constexpr", "ACCUMULATE": "constexpr", "SPLIT": "constexpr"}
    # What the launcher makes constants: the TMA-aligned MN-major sfa's unit row stride, the unit
    # stride along K of a row-major per-block sfb or along N of an MN-major per-token one (BF16
    # passes a and b there: their unit K strides), M = 1.
    if kind == "bf16":
        unit = {"stride_sfa_k": 1, "stride_sfb_k": 1}
    else:
        unit = {"stride_sfa_m": 1, "stride_sfb_k" if kind == "1d2d" else "stride_sfb_row": 1}
    if m == 1:
        unit["m"] = 1
    for name in unit:
        signature[name] = "constexpr"
    constexprs = {**unit, "ROWS": triton.next_power_of_2(m), "BLOCK_N": config.block_n,
                  "GROUPS": config.groups, "SCALED": kind != "bf16", "SFB_PER_ROW": kind == "1d1d",
                  "ACCUMULATE": accumulate, "SPLIT": split}
    divisible = ("a_ptr", "sfa_ptr", "b_ptr", "sfb_ptr", "d_ptr", "ws_ptr", "counter_ptr", "n", "k",
                 "stride_am", "stride_bn", "stride_dm")
    return _compile(gemv._gemv_kernel, signature, constexprs, divisible, arch, config.num_warps)


@pytest.mark.parametrize("arch", [90, 100])
@pytest.mark.parametrize("m,kind,accumulate,split",
                         [(1, "1d2d", False, True), (1, "1d2d", False, False), (4, "1d1d", True, False),
                          (4, "1d2d", False, True), (1, "bf16", False, True), (2, "bf16", True, False),
                          (1, "1d1d", True, True)])
def test_fp8_gemv_compiles_to_wide_loads_on_cuda_cores(arch, m, kind, accumulate, split):
    sass = checked_sass(_gemv_kernel(arch, m, kind, accumulate, split), arch)
    if sass is None:
        return
    assert "LDG.E.128" in sass, "B is not read with 128-bit loads"
    for mma in ("HGMMA", "QGMMA", "HMMA", "UTCQMMA", "UTCHMMA"):
        assert mma not in sass, f"{mma}: the GEMV should not use the tensor cores"
    assert "CALL.ABS" not in sass
    # split-K sums in the same kernel: the slab's arrival counter is an atomic (reset by another)
    assert ("ATOMG" in sass) == split, "split-K's arrival counter"
