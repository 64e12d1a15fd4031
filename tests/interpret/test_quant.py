"""The FP8 cast kernels (dg_triton/triton/quant.py) under the interpreter, bitwise against
dg_triton/reference_quant.py: FP8 data compared as bytes, scales exactly.

Shapes are not multiples of 128 (issue 3, "Tests"). The full m x n x options product would take
minutes under the interpreter (a 300 x 7296 per-token cast alone is ~5 s), so each (m, n) runs
once, with the option combination rotating across shapes: every combination still meets a
7296-wide (57-group) input and an m that is not a multiple of 4.
"""
import itertools
import random

import pytest
import torch

from dg_triton import reference_quant
from dg_triton.triton.quant import (per_block_cast_to_fp8_triton, per_channel_cast_to_fp8_triton,
                                    per_token_cast_to_fp8_triton)
from dg_triton.utils.math import align

# TODO(shapes): move to tests/shapes.py with the other cast/layout shapes once that file is free.
CAST_M = [1, 127, 129, 300]
CAST_N = [128, 384, 7296]
CAST_SHAPES = list(itertools.product(CAST_M, CAST_N))
# (use_ue8m0, tma_aligned_sf), rotated over CAST_SHAPES.
TOKEN_OPTIONS = list(itertools.product([False, True], [False, True]))
PER_TOKEN_CASES = [(m, n, *TOKEN_OPTIONS[i % len(TOKEN_OPTIONS)]) for i, (m, n) in
                   enumerate(CAST_SHAPES)]
# Packed UE8M0 needs ceil(n / 128) % 4 == 0.
PACKED_CASES = [(129, 512, False), (300, 1024, True), (1, 512, True)]
# Per-channel needs m % 128 == 0; n carries the odd sizes instead.
PER_CHANNEL_SHAPES = [(128, 1), (128, 300), (256, 129), (384, 7296)]


def _random_input(m: int, n: int, dtype: torch.dtype, zero_row: bool = True):
    """randn times a random magnitude, fresh each call; a zero row (when m > 1) exercises the
    1e-4 floor of the scale. Returns the tensor and a description naming the seed."""
    seed = random.randrange(2 ** 31)
    generator = torch.Generator().manual_seed(seed)
    magnitude = 10.0 ** random.uniform(-3, 3)
    x = torch.randn((m, n), generator=generator, dtype=torch.float32) * magnitude
    if zero_row and m > 1:
        x[m // 2] = 0
    return x.to(dtype), f"seed={seed} magnitude={magnitude:.3g} shape={(m, n)} dtype={dtype}"


def _assert_bitwise(q, sf, q_ref, sf_ref, what):
    assert q.dtype == torch.float8_e4m3fn and q.shape == q_ref.shape, what
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), (
        f"{what}: {(q.view(torch.uint8) != q_ref.view(torch.uint8)).sum().item()} fp8 bytes differ")
    assert sf.dtype == sf_ref.dtype and sf.shape == sf_ref.shape, what
    assert torch.equal(sf, sf_ref), f"{what}: scales differ"


@pytest.mark.parametrize("m,n,use_ue8m0,tma_aligned_sf", PER_TOKEN_CASES)
def test_per_token_cast_matches_reference_bitwise(m, n, use_ue8m0, tma_aligned_sf):
    dtype = torch.bfloat16 if (m + n) % 2 else torch.float32
    x, what = _random_input(m, n, dtype)
    q, sf = per_token_cast_to_fp8_triton(x, use_ue8m0, 128, tma_aligned_sf=tma_aligned_sf)
    q_ref, sf_ref = reference_quant.per_token_cast_to_fp8(x, use_ue8m0)
    if tma_aligned_sf:
        assert sf.stride() == (1, align(m, 4)), what
    else:
        assert sf.is_contiguous(), what
    _assert_bitwise(q, sf, q_ref, sf_ref, what)
    if m > 1:
        assert torch.all(sf[m // 2] == (2.0 ** -22 if use_ue8m0 else torch.tensor(1e-4) / 448))


@pytest.mark.parametrize("m,n,tma_aligned_sf", PACKED_CASES)
def test_per_token_cast_packed_ue8m0_matches_reference_bitwise(m, n, tma_aligned_sf):
    x, what = _random_input(m, n, torch.bfloat16)
    q, sf = per_token_cast_to_fp8_triton(x, True, 128, use_packed_ue8m0=True,
                                         tma_aligned_sf=tma_aligned_sf)
    q_ref, sf_ref = reference_quant.per_token_cast_to_fp8(x, True, use_packed_ue8m0=True)
    assert sf.stride() == ((1, align(m, 4)) if tma_aligned_sf else (n // 512, 1)), what
    _assert_bitwise(q, sf, q_ref, sf_ref, what)


def test_per_token_cast_reads_strided_input():
    x, what = _random_input(200, 129, torch.bfloat16)
    x = x.t()  # [129, 200] with strides (1, 129)
    q, sf = per_token_cast_to_fp8_triton(x, False, 128)
    _assert_bitwise(q, sf, *reference_quant.per_token_cast_to_fp8(x, False), what + " transposed")


@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("m,n", CAST_SHAPES)
def test_per_block_cast_matches_reference_bitwise(m, n, use_ue8m0):
    dtype = torch.bfloat16 if use_ue8m0 else torch.float32
    x, what = _random_input(m, n, dtype)
    if n > 128:
        x[:, :128] = 0  # a whole zero tile in every block row: the 1e-4 floor
    q, sf = per_block_cast_to_fp8_triton(x, use_ue8m0, 128)
    _assert_bitwise(q, sf, *reference_quant.per_block_cast_to_fp8(x, use_ue8m0), what)


@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("m,n", PER_CHANNEL_SHAPES)
def test_per_channel_cast_matches_reference_bitwise(m, n, use_ue8m0):
    dtype = torch.float32 if use_ue8m0 else torch.bfloat16
    x, what = _random_input(m, n, dtype, zero_row=False)
    x[:, n // 2] = 0  # a zero column: the 1e-4 floor
    q, sf = per_channel_cast_to_fp8_triton(x, use_ue8m0, 128)
    _assert_bitwise(q, sf, *reference_quant.per_channel_cast_to_fp8(x, use_ue8m0), what)


def test_interpreter_fp8_cast_patch_rounds_to_nearest():
    """Guards the conftest patch: without it the interpreter casts 7.9 to 4.0 in e4m3."""
    x = torch.full((1, 128), 7.9)
    x[0, 0] = 448.0  # sf = 1, so q = x
    q, sf = per_token_cast_to_fp8_triton(x, False, 128)
    assert sf.item() == 1.0
    assert q[0, :2].float().tolist() == [448.0, 8.0]


@pytest.mark.parametrize("shape", [(128, 0), (0, 0)])
def test_casts_of_no_columns_match_the_reference_shapes(shape):
    x = torch.randn(*shape)
    for ours, ref in [(per_block_cast_to_fp8_triton(x, False), reference_quant.per_block_cast_to_fp8(x, False)),
                      (per_channel_cast_to_fp8_triton(x, False), reference_quant.per_channel_cast_to_fp8(x, False)),
                      (per_token_cast_to_fp8_triton(x, True, 128, use_packed_ue8m0=True),
                       reference_quant.per_token_cast_to_fp8(x, True, 128, True))]:
        assert [o.shape for o in ours] == [r.shape for r in ref]
        assert [o.dtype for o in ours] == [r.dtype for r in ref]
