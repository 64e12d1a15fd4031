"""The FP8 casts (per_token_cast_to_fp8, per_block_cast_to_fp8, per_channel_cast_to_fp8) on a
CUDA GPU, through the public wrappers (so the Triton kernels of dg_triton/triton/quant.py run),
bitwise against dg_triton.reference_quant computed on the CPU (torch's CPU division is correctly
rounded; on CUDA torch divides by a scalar as a multiply by its reciprocal), at DeepSeek-V3 sizes
and at tails that are not multiples of 128. Outputs are allocated poisoned (0xFF bytes), so an
element left unwritten cannot pass. NaN and Inf follow the reference (one documented exception
under UE8M0, see the last test).
"""
import contextlib
from unittest import mock

import pytest
import torch

import dg_triton
from dg_triton import reference_quant

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@contextlib.contextmanager
def poisoned_outputs():
    real_empty = torch.empty

    def poisoned_empty(*size, **kwargs):
        tensor = real_empty(*size, **kwargs)
        if tensor.is_cuda:
            tensor.view(torch.uint8).fill_(0xFF)
        return tensor

    with mock.patch.object(torch, "empty", poisoned_empty):
        yield


def random_input(m, n, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed + 7 * m + n)
    magnitude = float(torch.empty(1).uniform_(-3, 3, generator=generator).exp())
    x = torch.randn((m, n), generator=generator) * magnitude
    if m > 2:
        x[m // 2] = 0          # an all-zero row: the 1e-4 floor
    return x.to(dtype), f"shape={(m, n)} dtype={dtype} magnitude={magnitude:.3g}"


def assert_bitwise(got, want, what):
    for i, (g, w) in enumerate(zip(got, want)):
        g = g.cpu()
        assert g.dtype == w.dtype and g.shape == w.shape, f"{what}[{i}]: {g.dtype}{tuple(g.shape)}"
        g, w = g.contiguous(), w.contiguous()
        if g.dtype.itemsize == 1:
            g, w = g.view(torch.uint8), w.view(torch.uint8)
        differ = g != w
        if g.is_floating_point():  # NaN where the reference has NaN counts as equal
            differ &= ~(g.isnan() & w.isnan())
        assert not differ.any(), f"{what}[{i}]: {differ.sum().item()} of {differ.numel()} elements differ"


PER_TOKEN = [(4096, 7168), (16384, 7168), (1, 7168), (127, 384), (129, 7296), (300, 128)]
PER_TOKEN_OPTIONS = [(False, False, False), (True, False, False), (True, True, True), (False, False, True)]


@pytest.mark.parametrize("use_ue8m0,use_packed_ue8m0,tma_aligned_sf", PER_TOKEN_OPTIONS)
@pytest.mark.parametrize("m,n", PER_TOKEN)
def test_per_token_cast_matches_reference_bitwise(m, n, use_ue8m0, use_packed_ue8m0, tma_aligned_sf):
    if use_packed_ue8m0 and (-(-n // 128)) % 4:
        pytest.skip("packed UE8M0 needs ceil(n / 128) % 4 == 0")
    x, what = random_input(m, n, torch.bfloat16 if m % 2 == 0 else torch.float32)
    with poisoned_outputs():
        got = dg_triton.per_token_cast_to_fp8(x.cuda(), use_ue8m0, 128, use_packed_ue8m0,
                                              tma_aligned_sf=tma_aligned_sf)
    assert_bitwise(got, reference_quant.per_token_cast_to_fp8(x, use_ue8m0, 128, use_packed_ue8m0), what)


@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("m,n", [(7168, 2048), (24576, 1536), (129, 300), (1, 128)])
def test_per_block_cast_matches_reference_bitwise(m, n, use_ue8m0):
    x, what = random_input(m, n, torch.bfloat16)
    with poisoned_outputs():
        got = dg_triton.per_block_cast_to_fp8(x.cuda(), use_ue8m0)
    assert_bitwise(got, reference_quant.per_block_cast_to_fp8(x, use_ue8m0), what)


@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("m,n,dtype", [(4096, 7168, torch.bfloat16), (16384, 7168, torch.bfloat16),
                                       (128, 1, torch.float32), (384, 300, torch.float32),
                                       (256, 7296, torch.bfloat16)])
def test_per_channel_cast_matches_reference_bitwise(m, n, dtype, use_ue8m0):
    x, what = random_input(m, n, dtype)
    with poisoned_outputs():
        got = dg_triton.per_channel_cast_to_fp8(x.cuda(), use_ue8m0)
    assert_bitwise(got, reference_quant.per_channel_cast_to_fp8(x, use_ue8m0), what)


def test_per_channel_cast_reads_strided_input():
    x, what = random_input(512, 640, torch.bfloat16)
    strided = x.cuda().t().contiguous().t()     # column-major
    assert_bitwise(dg_triton.per_channel_cast_to_fp8(strided, False),
                   reference_quant.per_channel_cast_to_fp8(x, False), what)


def _with_specials(m, n):
    x, _ = random_input(m, n, torch.float32)
    inf, nan = float("inf"), float("nan")
    x[1, 3], x[2, 130], x[3, 260] = nan, inf, -inf     # three different 128-groups
    x[200, 5], x[201, 5] = inf, nan                     # one column, two rows
    return x


@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("cast", ["per_token", "per_block", "per_channel"])
def test_nan_and_inf_follow_the_reference(cast, use_ue8m0):
    """A group with a NaN has sf NaN and NaN codes; one with an Inf (no NaN) sf Inf, codes 0 and
    NaN at the Inf, as the reference (under UE8M0 both sfs are 2^127, so the codes are 0 but for
    the NaN itself). The one exception: under UE8M0 the Inf group's sf rounds to
    2^127 and the Inf element becomes +-448 by the kernel's saturating cvt, where torch before
    2.13 casts inf to NaN; other elements of that group are 0 in both. The call returns."""
    x = _with_specials(256, 384)
    function = {"per_token": dg_triton.per_token_cast_to_fp8, "per_block": dg_triton.per_block_cast_to_fp8,
                "per_channel": dg_triton.per_channel_cast_to_fp8}[cast]
    reference = getattr(reference_quant, f"{cast}_cast_to_fp8")
    q, sf = (t.cpu() for t in function(x.cuda(), use_ue8m0))
    q_ref, sf_ref = reference(x, use_ue8m0)
    expected = q_ref.float()
    if use_ue8m0:
        expected = torch.where(x.isinf(), x.sign() * 448.0, expected)
    q = q.float()
    assert torch.equal(q.isnan(), expected.isnan()), cast
    assert torch.equal(q.nan_to_num(), expected.nan_to_num()), cast
    assert torch.equal(sf.isnan(), sf_ref.isnan()), cast
    assert torch.equal(sf.nan_to_num(), sf_ref.nan_to_num()), cast
    # Without UE8M0 the NaN groups' sf is NaN; with it, 2^127 (ceil_to_ue8m0 of NaN), as the reference.
    assert sf.isnan().any() != use_ue8m0 and q.isnan().any(), cast
