"""TMA descriptor parameters (dg_triton/jit/tma.py) and the BF16 GEMM's operand/output views, checked
in pure Python: the driver's cuTensorMapEncodeTiled rules become TmaLayoutError before any GPU call."""
import random

import pytest
import torch

from dg_triton.jit import tma
from dg_triton.jit.tma import Tma2dParams, TmaLayoutError
from dg_triton.kernels import sm90_bf16_gemm


def params(**overrides) -> Tma2dParams:
    """A valid K-major BF16 operand view (K=7168, 4096 rows, 128x64 boxes), with overrides."""
    fields = dict(element_size=2, inner=7168, outer=4096, row_stride_bytes=7168 * 2, box_inner=64,
                  box_outer=128, swizzle=tma.SWIZZLE_128B)
    fields.update(overrides)
    return Tma2dParams(**fields)


def test_valid_gemm_layouts_are_accepted():
    # bf16 K-major operand, bf16 MN-major operand, bf16 and fp32 output slabs, fp8 (1-byte) rows.
    assert params().box_bytes == 64 * 128 * 2
    Tma2dParams(2, 4096, 7168, 4096 * 2, 64, 64, tma.SWIZZLE_128B)
    Tma2dParams(2, 2112, 4096, 2112 * 2, 64, 64, tma.SWIZZLE_128B)
    Tma2dParams(4, 256, 4096, 256 * 4, 32, 64, tma.SWIZZLE_128B)
    Tma2dParams(1, 7168, 4096, 7168, 128, 128, tma.SWIZZLE_128B)
    # Boxes at the limits, a box wider than the tensor (TMA zero-fills), no swizzle, padded stride.
    params(box_outer=256)
    params(inner=8, row_stride_bytes=16, box_inner=64)
    params(swizzle=tma.SWIZZLE_NONE, box_inner=256)
    params(row_stride_bytes=7168 * 2 + 16)


def test_random_valid_layouts_are_accepted():
    rng = random.Random()
    for _ in range(200):
        element = rng.choice((1, 2, 4))
        swizzle = rng.choice((32, 64, 128))
        box_inner = swizzle // element // rng.choice((1, 2))
        inner = rng.randint(1, 1 << 16)
        stride = -(-inner * element // 16) * 16 + 16 * rng.randint(0, 4)
        p = Tma2dParams(element, inner, rng.randint(1, 1 << 20), stride, box_inner,
                        rng.randint(1, 256), swizzle)
        assert p.box_bytes == box_inner * p.box_outer * element


@pytest.mark.parametrize("overrides, message", [
    (dict(row_stride_bytes=7168 * 2 + 8), "multiple of 16"),
    (dict(row_stride_bytes=0), "multiple of 16"),
    (dict(row_stride_bytes=1 << 40), "below 2\\^40"),
    (dict(row_stride_bytes=7168 * 2 - 16), "shorter than a row"),
    (dict(box_outer=257), "box dims"),
    (dict(box_outer=0), "box dims"),
    (dict(box_inner=0), "box dims"),
    (dict(box_inner=264, swizzle=tma.SWIZZLE_NONE), "box dims"),
    (dict(box_inner=60), "multiple of 16 bytes"),
    (dict(element_size=4, inner=3584, box_inner=3), "multiple of 16 bytes"),
    (dict(box_inner=128), "128-byte swizzle allows box rows of at most 128"),
    (dict(box_inner=64, swizzle=tma.SWIZZLE_64B), "64-byte swizzle"),
    (dict(box_inner=32, swizzle=tma.SWIZZLE_32B), "32-byte swizzle"),
    (dict(swizzle=16), "swizzle must be"),
    (dict(swizzle=256), "swizzle must be"),
    (dict(element_size=3), "element size"),
    (dict(element_size=8), "element size"),
    (dict(inner=0), "dims"),
    (dict(outer=0), "dims"),
    (dict(outer=1 << 32), "dims"),
])
def test_each_broken_rule_is_rejected(overrides, message):
    with pytest.raises(TmaLayoutError, match=message):
        params(**overrides)


def test_layout_error_is_a_value_error():
    assert issubclass(TmaLayoutError, ValueError)


def test_check_address_needs_16_byte_alignment():
    base = random.randrange(1 << 20, 1 << 40) * 16
    tma.check_address(base, "a")
    tma.check_address(0, "a")
    for offset in (1, 2, 8, 15):
        with pytest.raises(TmaLayoutError, match=r"weight: TMA needs a 16-byte aligned address"):
            tma.check_address(base + offset, "weight")


# ---- the BF16 GEMM's views ------------------------------------------------------------------------

def test_k_major_operand_is_rows_of_k_with_block_rows_boxes():
    m, k = 4096, 7168
    a = torch.empty(m, k, dtype=torch.bfloat16)
    p = sm90_bf16_gemm._operand_params(m, k, a.stride(), True, 128)
    assert p == Tma2dParams(2, k, m, k * 2, 64, 128, tma.SWIZZLE_128B)


def test_k_major_operand_keeps_a_padded_row_stride():
    n, k, ld = 2112, 7000, 7040
    b = torch.empty(n, ld, dtype=torch.bfloat16)[:, :k]
    p = sm90_bf16_gemm._operand_params(n, k, b.stride(), True, 256)
    assert (p.inner, p.outer, p.row_stride_bytes) == (k, n, ld * 2)
    assert (p.box_inner, p.box_outer) == (64, 256)


def test_mn_major_operand_is_rows_of_mn_with_64x64_boxes():
    m, k = 4096, 7168
    a = torch.empty(k, m, dtype=torch.bfloat16).t()  # logical [M, K], stride (1, M)
    p = sm90_bf16_gemm._operand_params(m, k, a.stride(), False, 128)
    assert p == Tma2dParams(2, m, k, m * 2, 64, 64, tma.SWIZZLE_128B)


@pytest.mark.parametrize("k", [7168, 100, 8])
def test_single_row_operand_row_stride_is_rounded_up_to_16_bytes(k):
    a = torch.empty(1, k, dtype=torch.bfloat16)  # M=1: its row stride is meaningless to TMA
    p = sm90_bf16_gemm._operand_params(1, k, a.stride(), True, 64)
    assert (p.inner, p.outer) == (k, 1)
    assert p.row_stride_bytes % 16 == 0
    assert k * 2 <= p.row_stride_bytes < k * 2 + 16


def test_single_row_operand_ignores_an_unaligned_row_stride():
    k = 100
    a = torch.empty(2, 101, dtype=torch.bfloat16)[:1, :k]  # stride(0) = 101: 202 bytes
    p = sm90_bf16_gemm._operand_params(1, k, a.stride(), True, 64)
    assert p.row_stride_bytes == 208


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("block_n", [256, 192, 128, 64])
def test_output_is_n_major_with_128_byte_slab_boxes(out_dtype, block_n):
    m, n = 4096, 2112
    d = torch.empty(m, n, dtype=out_dtype)
    element = d.element_size()
    p = sm90_bf16_gemm._output_params(m, n, d.stride(0), element, block_n)
    assert p == Tma2dParams(element, n, m, n * element, 128 // element, 64, tma.SWIZZLE_128B)


@pytest.mark.parametrize("out_dtype, block_n, swizzle", [
    (torch.bfloat16, 16, 32), (torch.bfloat16, 48, 32), (torch.bfloat16, 32, 64),
    (torch.bfloat16, 96, 64), (torch.bfloat16, 80, 32), (torch.bfloat16, 112, 32),
    (torch.float32, 16, 64), (torch.float32, 48, 64), (torch.float32, 80, 64), (torch.float32, 32, 128),
])
def test_output_box_spans_the_widest_swizzle_dividing_a_tile_row(out_dtype, block_n, swizzle):
    # The epilogue stores a tile row in slabs of one swizzle span, so the box is one span wide.
    m, n = 4096, 584
    element = torch.finfo(out_dtype).bits // 8
    p = sm90_bf16_gemm._output_params(m, n, n, element, block_n)
    assert p.swizzle == swizzle
    assert p.box_inner * element == swizzle
    assert (block_n * element) % swizzle == 0
    assert (p.inner, p.outer, p.row_stride_bytes, p.box_outer) == (n, m, n * element, 64)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_single_row_output_row_stride_is_rounded_up_to_16_bytes(out_dtype):
    n = 2120 + 4 * random.randrange(1, 4)
    element = torch.finfo(out_dtype).bits // 8
    p = sm90_bf16_gemm._output_params(1, n, n, element, 128)
    assert (p.inner, p.outer) == (n, 1)
    assert p.row_stride_bytes == -(-n * element // 16) * 16
    assert n * element <= p.row_stride_bytes < n * element + 16
