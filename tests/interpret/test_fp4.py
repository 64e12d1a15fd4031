"""The FP4 kernels (dg_triton/triton/fp4.py) under the interpreter, bitwise against
dg_triton/reference_quant.py: packed data compared as bytes, scales exactly (fp32 bits or int32
words).

The interpreter's cost is per program and per op, so the 7296-wide inputs run with a larger tile
than the GPU's (the kernels take the tile as constexprs; the GPU tile itself runs on the smaller
shapes and is compiled in tests/test_compile_triton_fp4.py). Each (m, n) of the cast runs twice,
with the option combination (gran_k x {fp32 sf, UE8M0 sf, packed UE8M0}) rotating so that every
combination meets a 7296-wide input and an m that is not a multiple of 4.
"""
import itertools
import random

import pytest
import torch

from dg_triton import reference_quant
from dg_triton.triton import fp4 as fp4_kernels
from dg_triton.triton.fp4 import (
    cast_back_from_fp4_triton,
    per_token_cast_to_fp4_triton,
    transpose_packed_fp4_triton,
)
from dg_triton.utils.math import align
from fp4_ties import fp4_tie_row

# TODO(shapes): move to tests/shapes.py with the other cast/layout shapes once that file is free.
CAST_M = [1, 127, 129, 300]
CAST_N = [128, 384, 7296]
# n outer, so the four 7296-wide shapes come last and take combinations 4-5, 0-1, 2-3, 4-5.
CAST_SHAPES = [(m, n) for n, m in itertools.product(CAST_N, CAST_M)]
# (gran_k, use_ue8m0, use_packed_ue8m0)
CAST_OPTIONS = [(gran_k, ue8m0, packed) for gran_k in (32, 128)
                for ue8m0, packed in ((False, False), (True, False), (True, True))]
CAST_CASES = [(m, n, *CAST_OPTIONS[(2 * i + j) % len(CAST_OPTIONS)])
              for i, (m, n) in enumerate(CAST_SHAPES) for j in range(2)]
# Transposes need an even m.
TRANSPOSE_SHAPES = [(2, 128), (128, 384), (130, 7296), (300, 384)]
# Interpreter tiles for inputs above this many elements.
LARGE = 64 * 1024
CAST_TILE_LARGE = {"block_m": 64, "block_n": 2048}
BACK_TILE_LARGE = {"block_m": 64, "block_n": 2048}
TRANSPOSE_TILE_LARGE = {"block_rows": 128, "block_bytes": 1024}

TIE_ROW = fp4_tie_row()


def _random_input(m: int, n: int, dtype: torch.dtype):
    """randn times a random magnitude, fresh each call; with m > 2 a zero row (the 1e-4 floor) and
    a row of exact ties (TIE_ROW, repeated, times a power of two so it stays exact; in bf16 the
    fp32 neighbours of the thresholds round onto the thresholds, which are exact). Returns the
    tensor and a description naming the seed."""
    seed = random.randrange(2 ** 31)
    generator = torch.Generator().manual_seed(seed)
    magnitude = 10.0 ** random.uniform(-3, 3)
    x = torch.randn((m, n), generator=generator, dtype=torch.float32) * magnitude
    if m > 2:
        x[m // 2] = 0
        x[1] = TIE_ROW.repeat(-(-n // 128))[:n] * 2.0 ** random.randint(-10, 10)
    return x.to(dtype), f"seed={seed} magnitude={magnitude:.3g} shape={(m, n)} dtype={dtype}"


def _assert_sf_equal(sf, sf_ref, what):
    assert sf.dtype == sf_ref.dtype and sf.shape == sf_ref.shape, what
    if sf.dtype == torch.float32:
        same = (sf == sf_ref) | (sf.isnan() & sf_ref.isnan())
    else:
        same = sf == sf_ref
    assert bool(same.all()), f"{what}: {(~same).sum().item()} scales differ"


def _assert_packed_equal(packed, packed_ref, what):
    assert packed.dtype == torch.int8 and packed.shape == packed_ref.shape, what
    assert packed.is_contiguous(), what
    differ = packed != packed_ref
    assert not bool(differ.any()), f"{what}: {differ.sum().item()} bytes differ"


@pytest.mark.parametrize("m,n,gran_k,use_ue8m0,use_packed_ue8m0", CAST_CASES)
def test_per_token_cast_to_fp4_matches_reference_bitwise(m, n, gran_k, use_ue8m0, use_packed_ue8m0):
    dtype = torch.bfloat16 if (m + gran_k) % 2 else torch.float32
    tma_aligned_sf = (m + n // 128 + use_ue8m0) % 2 == 1
    x, what = _random_input(m, n, dtype)
    what += f" gran_k={gran_k} ue8m0={use_ue8m0} packed={use_packed_ue8m0} tma={tma_aligned_sf}"
    tile = CAST_TILE_LARGE if m * n > LARGE else {}
    packed, sf = per_token_cast_to_fp4_triton(x, use_ue8m0, gran_k, use_packed_ue8m0,
                                              tma_aligned_sf, **tile)
    packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x, use_ue8m0, gran_k,
                                                               use_packed_ue8m0)
    num_sf = -(-n // gran_k)
    assert sf.shape == (m, -(-num_sf // 4) if use_packed_ue8m0 else num_sf), what
    if tma_aligned_sf:
        assert sf.stride() == (1, align(m, 4)), what
    else:
        assert sf.is_contiguous(), what
    _assert_packed_equal(packed, packed_ref, what)
    _assert_sf_equal(sf, sf_ref, what)
    if m > 2 and not use_packed_ue8m0:
        # 1e-4 / 6 = 1.67e-5, rounded up to a power of two: 2^-15.
        floor = 2.0 ** -15 if use_ue8m0 else (torch.tensor(1e-4) / 6).item()
        assert torch.all(sf[m // 2] == floor), what


def test_per_token_cast_to_fp4_pads_the_packed_scale_count_with_one():
    x, what = _random_input(129, 384, torch.bfloat16)  # 3 groups of 128 -> one word, byte 3 = 127
    packed, sf = per_token_cast_to_fp4_triton(x, True, 128, True)
    assert sf.shape == (129, 1) and bool((sf.view(torch.uint8)[:, 3] == 127).all()), what
    packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x, True, 128, True)
    _assert_packed_equal(packed, packed_ref, what)
    _assert_sf_equal(sf, sf_ref, what)


def test_per_token_cast_to_fp4_on_the_flat_grid(monkeypatch):
    """The 1-D grid the launcher takes above 65535 row blocks (forced here by a limit of 1):
    every program finds its tile (ragged last row and column blocks), bitwise as the reference."""
    monkeypatch.setattr(fp4_kernels, "_MAX_GRID_Y", 1)
    x, what = _random_input(37, 1100, torch.bfloat16)
    packed, sf = per_token_cast_to_fp4_triton(x, True, 32, True, block_m=16, block_n=512)
    packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x, True, 32, True)
    _assert_packed_equal(packed, packed_ref, what)
    _assert_sf_equal(sf, sf_ref, what)


def test_per_token_cast_to_fp4_reads_strided_input():
    x, what = _random_input(300, 130, torch.bfloat16)
    x = x.t()  # [130, 300] with strides (1, 130)
    for gran_k in (32, 128):
        packed, sf = per_token_cast_to_fp4_triton(x, True, gran_k)
        packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x, True, gran_k)
        _assert_packed_equal(packed, packed_ref, f"{what} transposed gran_k={gran_k}")
        _assert_sf_equal(sf, sf_ref, f"{what} transposed gran_k={gran_k}")


# numpy warns about the NaN/Inf arithmetic these tests exercise on purpose.
IGNORE_NAN_ARITHMETIC_WARNINGS = pytest.mark.filterwarnings(
    "ignore:(invalid value|overflow) encountered:RuntimeWarning")


@pytest.mark.parametrize("use_ue8m0", [False, True])
@IGNORE_NAN_ARITHMETIC_WARNINGS
def test_per_token_cast_to_fp4_nan_and_inf_match_reference(use_ue8m0):
    """A group holding a NaN has sf NaN, one holding an Inf sf Inf, both 2^127 with UE8M0; codes
    are then 0, except +-6 for the infinities under UE8M0 (see dg_triton/triton/fp4.py)."""
    x, what = _random_input(8, 256, torch.float32)
    x[0, 3] = float("nan")
    x[1, 40] = float("inf")
    x[2, 200] = float("-inf")
    x[3, 5], x[3, 6] = float("inf"), float("nan")
    for gran_k in (32, 128):
        packed, sf = per_token_cast_to_fp4_triton(x, use_ue8m0, gran_k)
        packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x, use_ue8m0, gran_k)
        _assert_packed_equal(packed, packed_ref, f"{what} gran_k={gran_k}")
        _assert_sf_equal(sf, sf_ref, f"{what} gran_k={gran_k}")
        assert bool(sf[0, 0].isnan()) != use_ue8m0
        assert bool(sf[1, 40 // gran_k].isinf()) != use_ue8m0
        codes = reference_quant.unpack_fp4_codes(packed)
        assert [codes[1, 40].item(), codes[2, 200].item(), codes[3, 5].item()] == (
            [7, 15, 7] if use_ue8m0 else [0, 0, 0])
        assert codes[0, :32].sum().item() == 0 and codes[3, 6].item() == 0


@pytest.mark.parametrize("m,n", TRANSPOSE_SHAPES)
def test_transpose_packed_fp4_matches_reference_bitwise(m, n):
    seed = random.randrange(2 ** 31)
    generator = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, n // 2), generator=generator, dtype=torch.int8)
    what = f"seed={seed} shape={(m, n)}"
    tile = TRANSPOSE_TILE_LARGE if m * n > LARGE else {}
    out = transpose_packed_fp4_triton(a, **tile)
    _assert_packed_equal(out, reference_quant.transpose_packed_fp4(a), what)
    assert out.shape == (n, m // 2), what
    assert torch.equal(transpose_packed_fp4_triton(out, **tile), a), what + " twice"


def test_transpose_packed_fp4_reads_strided_input():
    base = torch.randint(-128, 128, (200, 96), dtype=torch.int8)
    a = base[:, 10:74]  # row stride 96
    _assert_packed_equal(transpose_packed_fp4_triton(a), reference_quant.transpose_packed_fp4(a),
                         "column slice")
    a = base.t()[:, :50]  # strides (1, 96): [96, 50]
    _assert_packed_equal(transpose_packed_fp4_triton(a), reference_quant.transpose_packed_fp4(a),
                         "transposed view")


@pytest.mark.parametrize("m,n,gran_k,use_ue8m0,use_packed_ue8m0", CAST_CASES[::2])
@IGNORE_NAN_ARITHMETIC_WARNINGS
def test_cast_back_from_fp4_matches_reference_bitwise(m, n, gran_k, use_ue8m0, use_packed_ue8m0):
    """The cast's own outputs, with sf in the TMA-aligned layout where m allows padding, and with
    arbitrary bytes (every code, code 8 included) against random scales."""
    x, what = _random_input(m, n, torch.float32)
    what += f" gran_k={gran_k} ue8m0={use_ue8m0} packed={use_packed_ue8m0}"
    tile = BACK_TILE_LARGE if m * n > LARGE else {}
    packed, sf = reference_quant.per_token_cast_to_fp4(x, use_ue8m0, gran_k, use_packed_ue8m0)
    if m % 4:
        aligned = torch.empty(sf.size(1), align(m, 4), dtype=sf.dtype).t()[:m]
        aligned.copy_(sf)
        sf = aligned
    out = cast_back_from_fp4_triton(packed, sf, gran_k, use_packed_ue8m0, **tile)
    out_ref = reference_quant.cast_back_from_fp4(packed, sf, gran_k, use_packed_ue8m0)
    assert out.dtype == torch.float32 and out.shape == (m, n) and out.is_contiguous(), what
    assert torch.equal(out.view(torch.int32), out_ref.view(torch.int32)), what

    random_bytes = torch.randint(-128, 128, packed.shape, dtype=torch.int8)
    if use_packed_ue8m0:
        random_sf = torch.randint(-2 ** 31, 2 ** 31, sf.shape, dtype=torch.int32)
    else:
        random_sf = torch.randn(sf.shape) * 10.0 ** random.uniform(-38, 38)
    out = cast_back_from_fp4_triton(random_bytes, random_sf, gran_k, use_packed_ue8m0, **tile)
    out_ref = reference_quant.cast_back_from_fp4(random_bytes, random_sf, gran_k, use_packed_ue8m0)
    same = (out.view(torch.int32) == out_ref.view(torch.int32)) | (out.isnan() & out_ref.isnan())
    assert bool(same.all()), what + f" random bytes: {(~same).sum().item()} values differ"


def test_cast_back_from_fp4_with_a_group_size_that_is_not_a_power_of_two():
    packed = torch.randint(-128, 128, (33, 150), dtype=torch.int8)
    sf = torch.rand(33, 3) + 0.5  # n = 300, gran_k = 100
    out = cast_back_from_fp4_triton(packed, sf, 100)
    assert torch.equal(out, reference_quant.cast_back_from_fp4(packed, sf, 100))
