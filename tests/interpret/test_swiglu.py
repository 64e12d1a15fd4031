"""The SwiGLU kernels (dg_triton/triton/swiglu.py) under the interpreter, against
dg_triton/reference_swiglu.py.

What is asserted, and why:
- Bitwise (FP8 bytes, bf16 bits, scales, every SF storage element) against the reference evaluated
  with numpy's exp. Under the interpreter ``tl.exp`` *is* numpy's fp32 exp (the CUDA path's
  libdevice call does not exist there), and every other step is the same IEEE fp32 operation, so
  this checks the whole kernel but the one function whose last bit is implementation-defined.
- Against the reference as shipped (torch's CPU exp, which differs from numpy's in the last bit on
  about 5% of bf16 inputs): scales within 1e-6 relative, FP8 codes at most one step apart, and at
  most 1 + 1e-4 * numel codes (bf16 values) differing at all. This is the criterion that holds for
  any exp within a few ulps, the one a GPU run against a CPU reference meets too.

Interpreter cost is per program, so most cases run with large blocks (``large_blocks``); one test
keeps the shipped block sizes, which the GPU tests use throughout. Outputs are allocated poisoned
(0xFF bytes: NaN in fp32/bf16/fp8, 255 as a UE8M0 byte, which no scale has), so an element the
kernel forgets to write fails the bitwise comparison.
"""
import contextlib
import random
from unittest import mock

import numpy as np
import pytest
import torch

from dg_triton import reference_swiglu
from dg_triton.reference_quant import unpack_ue8m0_from_int
from dg_triton.triton import swiglu as swiglu_kernels
from dg_triton.utils.math import align, ceil_div

# TODO(shapes): move to tests/shapes.py with the other cast/layout shapes once that file is free.
SWIGLU_M = [1, 127, 129, 300]
SWIGLU_I = [128, 384, 1000]
# (gran_k, use_ue8m0, routing-weight dtype, clamp, SF layout), rotated over the (M, I) shapes so
# that each meets an M that is not a multiple of 4 and an I with a partial last group.
FUSED_OPTIONS = [
    (128, False, None, None, "tma"),
    (128, True, torch.float32, 7.0, "packed_tma"),
    (32, False, torch.bfloat16, None, "row"),
    (128, True, None, 2.5, "tma"),
    (32, True, torch.float32, None, "packed_row"),
    (128, False, torch.float32, 4.0, "row"),
]
FUSED_CASES = [(m, i, *FUSED_OPTIONS[k % len(FUSED_OPTIONS)])
               for k, (m, i) in enumerate((m, i) for m in SWIGLU_M for i in SWIGLU_I)]
# Extra: I = 7296 / 2 (29 groups: a packed word with 3 missing groups) and I = 1.
FUSED_CASES += [(129, 3648, 128, True, torch.float32, 3.0, "packed_tma"),
                (5, 1, 128, False, torch.float32, 1.0, "tma")]
SWIGLU_CASES = [(1, 128, None, None), (127, 384, torch.float32, None), (129, 1000, None, 5.0),
                (300, 256, torch.bfloat16, 1.5)]


@pytest.fixture
def large_blocks(monkeypatch):
    monkeypatch.setattr(swiglu_kernels, "_ELEMENTS_PER_PROGRAM", 16384)
    monkeypatch.setattr(swiglu_kernels, "_SWIGLU_BLOCK_M", 128)


def _numpy_exp(t: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.exp(t.numpy()))


@contextlib.contextmanager
def _reference_with_numpy_exp():
    with mock.patch.object(reference_swiglu, "_exp", _numpy_exp):
        yield


@contextlib.contextmanager
def _poisoned_outputs():
    real_empty = torch.empty

    def poisoned_empty(*size, **kwargs):
        tensor = real_empty(*size, **kwargs)
        tensor.view(torch.uint8).fill_(0xFF)
        return tensor

    with mock.patch.object(torch, "empty", poisoned_empty):
        yield


def _random_inputs(m, intermediate, weight_dtype):
    """x = randn * a random magnitude (fresh each call), a zero row (the 1e-4 scale floor) and
    random weights in [0, 2) with one exact 0; plus a description naming the seed."""
    seed = random.randrange(2 ** 31)
    generator = torch.Generator().manual_seed(seed)
    magnitude = 10.0 ** random.uniform(-2, 1)
    x = (torch.randn((m, 2 * intermediate), generator=generator) * magnitude).to(torch.bfloat16)
    if m > 2:
        x[m // 2] = 0
    weights = None
    if weight_dtype is not None:
        weights = (torch.rand(m, generator=generator) * 2).to(weight_dtype)
        if m > 2:
            weights[m // 3] = 0
    what = f"seed={seed} magnitude={magnitude:.3g} M={m} I={intermediate} weights={weight_dtype}"
    return x, weights, what


def _fused(x, use_ue8m0, gran_k, weights, clamp, layout):
    with _poisoned_outputs():
        return swiglu_kernels.swiglu_per_token_cast_to_fp8_triton(
            x, use_ue8m0, gran_k, weights, clamp, tma_aligned_sf=layout.endswith("tma"),
            use_packed_ue8m0=layout.startswith("packed"))


def _fp8_ordinal(q: torch.Tensor) -> torch.Tensor:
    """E4M3 bytes -> signed code ordinals: one step apart means neighbouring representable values
    (+0 and -0 are both 0)."""
    byte = q.view(torch.uint8).to(torch.int32)
    return torch.where(byte >= 128, -(byte & 127), byte)


def assert_bitwise(q, sf, q_ref, sf_ref, what):
    assert q.dtype == torch.float8_e4m3fn and q.shape == q_ref.shape and q.is_contiguous(), what
    differ = q.view(torch.uint8) != q_ref.view(torch.uint8)
    assert not differ.any(), f"{what}: {differ.sum().item()} fp8 bytes differ"
    assert sf.dtype == sf_ref.dtype and sf.shape == sf_ref.shape, what
    assert torch.equal(sf, sf_ref), f"{what}: scales differ"


def assert_close_to_reference(q, sf, q_ref, sf_ref, packed, what):
    """The exp-independent criterion of the module docstring."""
    if packed:
        # Copied to plain strides first: a [1, 1] MN-major tensor counts as contiguous with
        # strides (1, 4), which unpack_ue8m0_from_int's byte view refuses.
        sf, sf_ref = (unpack_ue8m0_from_int(t.new_empty(t.shape).copy_(t)) for t in (sf, sf_ref))
    # Equal values count as 0 apart (packed padding groups are 0 in both).
    relative = torch.where(sf == sf_ref, 0.0, (sf - sf_ref).abs() / sf_ref)
    relative = relative.max().item() if sf.numel() else 0.0
    assert relative <= 1e-6, f"{what}: scales differ by {relative:.3g} relative"
    steps = (_fp8_ordinal(q) - _fp8_ordinal(q_ref)).abs()
    assert steps.max().item() <= 1, f"{what}: fp8 codes {steps.max().item()} steps apart"
    differing = (steps > 0).sum().item()
    assert differing <= 1 + 1e-4 * q.numel(), f"{what}: {differing} fp8 codes differ"


def check_sf_layout(sf, m, layout, what):
    if layout.endswith("tma"):
        aligned_m = align(m, 4)
        assert sf.stride() == (1, aligned_m), what
        # Padding rows m..aligned_m-1 of the storage are written as 0, not left poisoned.
        storage = sf.as_strided((aligned_m, sf.size(1)), (1, aligned_m))
        assert torch.all(storage[m:] == 0), f"{what}: padding rows not 0"
    else:
        assert sf.is_contiguous(), what


@pytest.mark.usefixtures("large_blocks")
@pytest.mark.parametrize("m,intermediate,gran_k,use_ue8m0,weight_dtype,clamp,layout", FUSED_CASES)
def test_fused_swiglu_cast_matches_reference(m, intermediate, gran_k, use_ue8m0, weight_dtype,
                                             clamp, layout):
    x, weights, what = _random_inputs(m, intermediate, weight_dtype)
    what += f" gran_k={gran_k} ue8m0={use_ue8m0} clamp={clamp} layout={layout}"
    packed = layout.startswith("packed")
    q, sf = _fused(x, use_ue8m0, gran_k, weights, clamp, layout)
    num_groups = ceil_div(intermediate, gran_k)
    assert sf.shape == (m, ceil_div(num_groups, 4) if packed else num_groups), what
    check_sf_layout(sf, m, layout, what)

    with _reference_with_numpy_exp():
        q_ref, sf_ref = reference_swiglu.swiglu_per_token_cast_to_fp8(
            x, use_ue8m0, gran_k, weights, clamp, packed)
    assert_bitwise(q, sf, q_ref, sf_ref, what + " (reference with numpy's exp)")
    if m > 2 and not packed:
        assert torch.all(sf[m // 2] == (2.0 ** -22 if use_ue8m0 else torch.tensor(1e-4) / 448))

    q_ref, sf_ref = reference_swiglu.swiglu_per_token_cast_to_fp8(
        x, use_ue8m0, gran_k, weights, clamp, packed)
    assert_close_to_reference(q, sf, q_ref, sf_ref, packed, what + " (reference with torch's exp)")


@pytest.mark.parametrize("gran_k,layout", [(128, "tma"), (32, "packed_row")])
def test_fused_swiglu_cast_with_shipped_block_sizes(gran_k, layout):
    """The block sizes the GPU runs (several row blocks, the last one partial)."""
    x, weights, what = _random_inputs(129, 384, torch.float32)
    q, sf = _fused(x, True, gran_k, weights, 6.0, layout)
    check_sf_layout(sf, 129, layout, what)
    with _reference_with_numpy_exp():
        expected = reference_swiglu.swiglu_per_token_cast_to_fp8(
            x, True, gran_k, weights, 6.0, layout.startswith("packed"))
    assert_bitwise(q, sf, *expected, what)


@pytest.mark.usefixtures("large_blocks")
@pytest.mark.parametrize("m,intermediate,weight_dtype,clamp", SWIGLU_CASES)
def test_swiglu_matches_reference(m, intermediate, weight_dtype, clamp):
    x, weights, what = _random_inputs(m, intermediate, weight_dtype)
    with _poisoned_outputs():
        out = swiglu_kernels.swiglu_triton(x, weights, clamp)
    assert out.dtype == torch.bfloat16 and out.shape == (m, intermediate), what
    with _reference_with_numpy_exp():
        expected = reference_swiglu.swiglu(x, weights, clamp)
    assert torch.equal(out.view(torch.int16), expected.view(torch.int16)), what
    # bf16 bit patterns of one sign are ordered like the values: one apart = one ulp.
    ulps = (out.view(torch.int16).int() - reference_swiglu.swiglu(x, weights, clamp)
            .view(torch.int16).int()).abs()
    assert ulps.max().item() <= 1 and (ulps > 0).sum().item() <= 1 + 1e-4 * out.numel(), what


def test_swiglu_with_shipped_block_sizes_and_strided_inputs():
    """x read through arbitrary strides (a column slice of a wider buffer, and a transposed one)
    and weights with a stride of 2; the shipped block sizes."""
    x, weights, what = _random_inputs(129, 200, torch.float32)
    wide = torch.zeros(129, 432, dtype=torch.bfloat16)
    wide[:, :400] = x
    transposed = x.t().contiguous().t()
    strided_weights = torch.stack([weights, weights + 1], dim=1)[:, 0]
    assert strided_weights.stride() == (2,)
    with _reference_with_numpy_exp():
        expected = reference_swiglu.swiglu(x, weights, 2.0)
        expected_q, expected_sf = reference_swiglu.swiglu_per_token_cast_to_fp8(
            x, False, 128, weights, 2.0)
    for x_view in (wide[:, :400], transposed):
        out = swiglu_kernels.swiglu_triton(x_view, strided_weights, 2.0)
        assert torch.equal(out.view(torch.int16), expected.view(torch.int16)), what
        q, sf = _fused(x_view, False, 128, strided_weights, 2.0, "row")
        assert_bitwise(q, sf, expected_q, expected_sf, what + f" strides={x_view.stride()}")


@pytest.mark.usefixtures("large_blocks")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_nan_and_inf_follow_the_reference(use_ue8m0):
    """NaN/Inf in gate, up and weights: the same NaN positions, scales and codes as the reference
    (NaN compared as NaN). Under the interpreter the fp8 cast of the kernel goes through torch's
    (conftest), so even an infinite scaled value agrees; on the GPU it saturates (GPU tests)."""
    x, weights, what = _random_inputs(16, 256, torch.float32)
    inf, nan = float("inf"), float("nan")
    x[1, 3], x[2, 4], x[3, 5] = nan, inf, -inf            # gate
    x[4, 256 + 6], x[5, 256 + 7] = inf, nan              # up
    x[6, 8], x[6, 256 + 8] = -inf, 0.0                   # silu(-inf) = NaN even times 0
    weights[7], weights[9] = inf, nan
    q, sf = _fused(x, use_ue8m0, 128, weights, None, "row")
    with _reference_with_numpy_exp():
        q_ref, sf_ref = reference_swiglu.swiglu_per_token_cast_to_fp8(x, use_ue8m0, 128, weights)
    assert torch.equal(q.float().isnan(), q_ref.float().isnan()), what
    assert torch.equal(q.float().nan_to_num(), q_ref.float().nan_to_num()), what
    assert torch.equal(sf.isnan(), sf_ref.isnan()), what
    assert torch.equal(sf.nan_to_num(), sf_ref.nan_to_num()), what
    assert q.float().isnan().any() and (sf.isnan().any() or use_ue8m0), what


def test_no_tokens_launches_nothing():
    x = torch.empty(0, 256, dtype=torch.bfloat16)
    q, sf = swiglu_kernels.swiglu_per_token_cast_to_fp8_triton(x, False, 128)
    assert q.shape == (0, 128) and sf.shape == (0, 1)
    assert swiglu_kernels.swiglu_triton(x).shape == (0, 128)
