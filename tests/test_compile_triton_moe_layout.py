"""Compile-only checks of the MoE token layout kernels (dg_triton.triton.moe_layout) for sm_90a and
sm_100a, no GPU needed (TOOLCHAIN.md "Triton without a GPU").

Runs in its own pytest process without TRITON_INTERPRET: once that is set, triton.compile no longer
works in the process. Each kernel is compiled with the constants its launcher picks for the
DeepSeek-V3 shape (8192 tokens x top-8 over 256 experts, H = 7168) and for a small one, with the
argument types a real launch specializes to (32-bit sizes and strides, 16-divisible pointers and
hidden sizes, unit column strides).
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

from dg_triton.triton import moe_layout

ARCHS = [90, 100]


def compile_kernel(fn, signature, constexprs, arch, num_warps=4, divisible_by_16=(), **options):
    names = list(signature)
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in divisible_by_16}
    compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": num_warps, **options})
    cubin = compiled.asm["cubin"]
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"
    ptx = compiled.asm["ptx"]
    assert f".target sm_{arch}a" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
    return ptx


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("num_experts", [256, 4])
def test_ranking_kernels_compile(num_experts, arch):
    bins = triton.next_power_of_2(num_experts)
    compile_kernel(
        moe_layout._rank_in_chunk_kernel,
        {"topk_ids_ptr": "*i32", "local_rank_ptr": "*i32", "chunk_counts_ptr": "*i32", "num_slots": "i32",
         "topk": "i32", "num_experts": "i32", "stride_ids_t": "i32", "stride_ids_k": "constexpr",
         "CHUNK": "constexpr", "EXPERT_BINS": "constexpr"},
        {"stride_ids_k": 1, "CHUNK": moe_layout._CHUNK, "EXPERT_BINS": bins}, arch, moe_layout._RANK_WARPS)
    block_chunks = moe_layout._PREFIX_MAX_CHUNKS
    compile_kernel(
        moe_layout._chunk_prefix_kernel,
        {"chunk_counts_ptr": "*i32", "chunk_offsets_ptr": "*i32", "expert_counts_ptr": "*i32", "num_chunks": "i32",
         "num_experts": "i32", "BLOCK_CHUNKS": "constexpr", "BLOCK_EXPERTS": "constexpr"},
        {"BLOCK_CHUNKS": block_chunks, "BLOCK_EXPERTS": min(bins, moe_layout._PREFIX_ELEMENTS // block_chunks)}, arch)
    compile_kernel(
        moe_layout._expert_starts_kernel,
        {"expert_counts_ptr": "*i32", "start_ptr": "*i32", "psum_ptr": "*i32", "num_experts": "i32",
         "alignment": "i32", "EXPERT_BINS": "constexpr"},
        {"EXPERT_BINS": bins}, arch)


_POINTERS = ["x_ptr", "out_ptr", "token_sf_ptr", "token_of_row_ptr", "topk_ids_ptr", "local_rank_ptr",
             "row_of_slot_ptr", "chunk_offsets_ptr", "start_ptr", "expert_counts_ptr", "m_indices_ptr",
             "masked_m_ptr"]
_SIZES = ["num_tokens", "num_token_programs", "hidden", "topk", "num_experts", "num_sf_cols", "stride_x_t",
          "stride_x_h", "stride_ids_t", "stride_ids_k", "group_rows", "num_groups", "search_steps"]
_CONSTEXPRS = ["CHUNK", "TOKENS", "TOPK_BLOCK", "BLOCK_H", "GROUPS_PER_BLOCK", "ZERO_ROWS", "GRAN_K",
               "QUANTIZE", "USE_UE8M0", "MASKED", "STORE_M_INDICES"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("quantize", [False, True])
@pytest.mark.parametrize("hidden,topk", [(7168, 8), (128, 6)])
def test_permute_kernel_compiles_with_vectorized_rows(hidden, topk, quantize, masked, arch):
    tokens, topk_block, block_h, groups_per_block, zero_rows = moe_layout._move_blocks(hidden, topk, quantize, 128)
    signature = {name: "*i32" for name in _POINTERS}
    signature.update({"x_ptr": "*bf16" if quantize else "*i16", "out_ptr": "*fp8e4nv" if quantize else "*i16",
                      "token_sf_ptr": "*fp32"})
    signature.update({name: "i32" for name in _SIZES})
    signature.update({"stride_x_h": "constexpr", "stride_ids_k": "constexpr"})
    signature.update({name: "constexpr" for name in _CONSTEXPRS})
    constexprs = {"stride_x_h": 1, "stride_ids_k": 1, "CHUNK": moe_layout._CHUNK, "TOKENS": tokens,
                  "TOPK_BLOCK": topk_block, "BLOCK_H": block_h, "GROUPS_PER_BLOCK": groups_per_block,
                  "ZERO_ROWS": zero_rows, "GRAN_K": 128 if quantize else 1, "QUANTIZE": quantize,
                  "USE_UE8M0": quantize and masked, "MASKED": masked, "STORE_M_INDICES": not masked}
    ptx = compile_kernel(moe_layout._permute_rows_kernel, signature, constexprs, arch, moe_layout._MOVE_WARPS,
                         divisible_by_16=_POINTERS + ["hidden", "stride_x_t"])
    # Rows move as 16-byte vectors: the copy runs near memory speed only with wide accesses.
    assert "ld.global.v4" in ptx and "st.global.v4" in ptx
    if quantize:
        # Bitwise agreement with per_token_cast_to_fp8 (see test_compile_triton_quant).
        assert "div.rn.f32" in ptx and "div.full.f32" not in ptx
        assert "cvt.rn.satfinite.e4m3x2.f32" in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_scale_kernel_compiles_with_coalesced_stores(arch):
    ptx = compile_kernel(
        moe_layout._scatter_scales_kernel,
        {"token_sf_ptr": "*fp32", "token_of_row_ptr": "*i32", "sf_ptr": "*fp32", "num_sf_cols": "i32",
         "group_rows": "i32", "sf_group_rows": "i32", "BLOCK_ROWS": "constexpr", "BLOCK_COLS": "constexpr",
         "USE_UE8M0": "constexpr"},
        {"BLOCK_ROWS": moe_layout._SF_BLOCK_ROWS, "BLOCK_COLS": moe_layout._SF_BLOCK_COLS, "USE_UE8M0": False}, arch,
        divisible_by_16=["token_sf_ptr", "token_of_row_ptr", "sf_ptr", "group_rows", "sf_group_rows"])
    # Consecutive rows of one K-group are adjacent in the MN-major layout: vector stores along rows.
    assert "st.global.v4" in ptx or "st.global.v2" in ptx


def _combine_ptx(arch, grouped, y_type, fp_fusion):
    return compile_kernel(
        moe_layout._unpermute_combine_kernel,
        {"y_ptr": y_type, "row_of_slot_ptr": "*i32", "weights_ptr": "*fp32", "out_ptr": "*bf16",
         "num_tokens": "i32", "n": "i32", "num_rows": "i32", "rows_per_group": "i32", "stride_y_g": "i32",
         "stride_y_m": "i32", "stride_y_n": "constexpr", "stride_rows_t": "i32", "stride_rows_k": "constexpr",
         "stride_w_t": "i32", "stride_w_k": "constexpr", "TOPK": "constexpr", "BLOCK_T": "constexpr",
         "BLOCK_N": "constexpr", "GROUPED": "constexpr"},
        {"stride_y_n": 1, "stride_rows_k": 1, "stride_w_k": 1, "TOPK": 8, "BLOCK_N": moe_layout._COMBINE_BLOCK_N,
         "BLOCK_T": moe_layout._COMBINE_ELEMENTS // moe_layout._COMBINE_BLOCK_N, "GROUPED": grouped},
        arch, moe_layout._COMBINE_WARPS, divisible_by_16=["y_ptr", "out_ptr", "n", "stride_y_m"],
        enable_fp_fusion=fp_fusion)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("grouped,y_type", [(False, "*bf16"), (True, "*fp32")])
def test_combine_kernel_compiles_without_fused_multiply_add(grouped, y_type, arch):
    ptx = _combine_ptx(arch, grouped, y_type, fp_fusion=False)
    # The reference rounds the product and the sum separately; an FMA would round once.
    assert not re.search(r"\bfma\.rn\.f32", ptx)
    assert "mul.rn.f32" in ptx and "add.rn.f32" in ptx
    assert "cvt.rn.bf16.f32" in ptx or "cvt.rn.bf16x2.f32" in ptx


def test_combine_fma_check_is_meaningful():
    """With fusion on (Triton's default), the same kernel does contain FMAs."""
    assert re.search(r"\bfma\.rn\.f32", _combine_ptx(90, False, "*bf16", fp_fusion=True))
