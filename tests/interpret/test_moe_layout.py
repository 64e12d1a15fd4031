"""MoE token layout kernels (dg_triton.triton.moe_layout) under the Triton interpreter, bitwise
against the plain-torch reference (dg_triton.reference_moe_layout): data, scales (whole storage,
alignment rows included), m_indices, psum, masked_m, row_of_slot and expert counts.

Every tensor the launchers allocate is poisoned (floats all bits set, a NaN in bf16/fp8/fp32;
integers 0x7F7F7F7F, no valid row or count), so an element a kernel forgets to write fails the
comparison, padding and tail rows included.

Most cases run with larger tiles than the GPU launch uses (several tokens and hundreds of padding
rows per program): the same kernel code with other block constants, and far fewer interpreted
programs. Two cases run with the launcher's own constants.
"""
import zlib

import pytest
import torch

from dg_triton import reference_moe_layout as ref
from dg_triton.triton import moe_layout

INT_POISON_BYTE = 0x7F


class _TorchWithPoisonedEmpty:
    """``torch`` as the launchers see it, except that ``empty``/``empty_like`` fill their result
    with poison instead of leaving whatever memory held."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def _poison(tensor):
        byte = 0xFF if tensor.dtype.is_floating_point else INT_POISON_BYTE
        tensor.view(torch.uint8).fill_(byte)
        return tensor

    def empty(self, *args, **kwargs):
        return self._poison(torch.empty(*args, **kwargs))

    def empty_like(self, *args, **kwargs):
        return self._poison(torch.empty_like(*args, **kwargs))


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    monkeypatch.setattr(moe_layout, "torch", _TorchWithPoisonedEmpty())


@pytest.fixture
def large_tiles(monkeypatch):
    monkeypatch.setattr(moe_layout, "_MOVE_ELEMENTS", 1 << 16)
    monkeypatch.setattr(moe_layout, "_MAX_ZERO_ROWS", 1024)


@pytest.fixture(autouse=True)
def seed_per_test(request):
    # Fresh inputs per test, reproducible from the test id alone.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


def random_tokens(num_tokens, hidden, strided=False):
    """bf16 randn rows of random magnitudes; with ``strided`` a view with column stride 2."""
    scale = torch.rand(num_tokens, 1) * 100
    x = (torch.randn(num_tokens, hidden * (2 if strided else 1)) * scale).to(torch.bfloat16)
    return x[:, ::2] if strided else x


def random_ids(num_tokens, topk, num_experts, pattern, dtype=torch.int32):
    """topk ids by pattern: ``distinct`` (a router's top-k), ``random`` (repeats allowed),
    ``unused`` (random with a quarter of the slots and one whole token -1), ``subset`` (only
    experts 1 and E-1: empty experts), ``one`` (every slot on expert E // 2), ``bad`` (out-of-range
    values among valid ones, all to be treated as unused)."""
    if pattern == "distinct":
        ids = torch.rand(num_tokens, num_experts).argsort(dim=1)[:, :topk]
    elif pattern == "one":
        ids = torch.full((num_tokens, topk), num_experts // 2)
    elif pattern == "subset":
        ids = torch.tensor([1, num_experts - 1])[torch.randint(0, 2, (num_tokens, topk))]
    else:
        ids = torch.randint(0, num_experts, (num_tokens, topk))
    if pattern in ("unused", "bad"):
        ids[torch.rand(num_tokens, topk) < 0.25] = -1
        ids[num_tokens // 2] = -1
    if pattern == "bad":
        bad_values = torch.tensor([num_experts, num_experts + 5, -7, 2**31 - 1]
                                  + ([2**32 + 1, -2**40] if dtype == torch.int64 else []))
        where = torch.rand(num_tokens, topk) < 0.2
        ids[where] = bad_values[torch.randint(0, len(bad_values), (int(where.sum()),))]
    return ids.to(dtype)


def full_sf_storage(sf):
    """The whole buffer behind a TMA-aligned MN-major SF, alignment rows included."""
    *batch, _, sk = sf.shape
    aligned = sf.stride(-1)
    return sf.as_strided((*batch, sk, aligned), (*([aligned * sk] if batch else []), aligned, 1))


def assert_bitwise(result, expected, what):
    assert type(result) is type(expected), what
    for name, value, want in zip(result._fields, result, expected):
        if want is None:
            assert value is None, f"{what}: {name}"
            continue
        assert value.shape == want.shape and value.dtype == want.dtype, f"{what}: {name}"
        if name == "sf":
            assert value.stride() == want.stride(), f"{what}: sf strides"
            value, want = full_sf_storage(value), full_sf_storage(want)
        if value.dtype in (torch.float8_e4m3fn, torch.bfloat16):
            value, want = value.view(torch.uint8), want.view(torch.uint8)
        assert torch.equal(value, want), f"{what}: {name}, {(value != want).sum().item()} elements differ"


# (T, H, E, topk, alignment, ids pattern, quantize, use_ue8m0, ids dtype, use_psum_layout)
CONTIGUOUS_CASES = [
    (1, 128, 1, 1, 128, "random", False, False, torch.int32, False),
    (127, 384, 4, 6, 32, "unused", False, False, torch.int64, False),
    (129, 128, 8, 8, 128, "subset", True, False, torch.int32, False),
    (300, 384, 8, 8, 64, "one", True, True, torch.int32, True),
    (300, 128, 4, 1, 16, "unused", False, False, torch.int32, True),
    (129, 128, 256, 8, 16, "distinct", True, False, torch.int32, False),
    (129, 384, 8, 6, 48, "bad", False, False, torch.int64, False),
    (0, 128, 4, 8, 32, "random", True, False, torch.int32, False),
]


@pytest.mark.usefixtures("large_tiles")
@pytest.mark.parametrize("num_tokens,hidden,num_experts,topk,alignment,pattern,quantize,use_ue8m0,ids_dtype,psum",
                         CONTIGUOUS_CASES)
def test_contiguous_permute_matches_reference_bitwise(num_tokens, hidden, num_experts, topk, alignment, pattern,
                                                      quantize, use_ue8m0, ids_dtype, psum):
    x = random_tokens(num_tokens, hidden)
    ids = random_ids(num_tokens, topk, num_experts, pattern, ids_dtype)
    args = (x, ids, num_experts, alignment, psum, quantize, use_ue8m0, 128)
    result = moe_layout.permute_contiguous(*args)
    assert_bitwise(result, ref.moe_permute_contiguous(*args), f"{pattern} T={num_tokens} E={num_experts}")
    assert result.permuted.size(0) == ref.contiguous_layout_rows(num_tokens, topk, num_experts, alignment)


@pytest.mark.usefixtures("large_tiles")
def test_contiguous_permute_of_strided_input_with_partial_scale_groups():
    """H = 200 with gran_k = 64: the last K-group has 8 columns (zero-padded in the amax), and x is
    a column-strided view."""
    x = random_tokens(127, 200, strided=True)
    ids = random_ids(127, 6, 4, "unused")
    args = (x, ids, 4, 32, False, True, True, 64)
    assert_bitwise(moe_layout.permute_contiguous(*args), ref.moe_permute_contiguous(*args), "strided")


# (T, H, E, topk, max_m, ids pattern, quantize, use_ue8m0)
MASKED_CASES = [
    (1, 128, 1, 1, 1, "random", False, False),
    (129, 128, 4, 6, 100, "random", False, False),
    (300, 384, 8, 8, 7, "unused", True, False),
    (127, 384, 8, 6, 64, "subset", True, True),
    (129, 128, 256, 8, 5, "distinct", True, False),
]


@pytest.mark.usefixtures("large_tiles")
@pytest.mark.parametrize("num_tokens,hidden,num_experts,topk,max_m,pattern,quantize,use_ue8m0", MASKED_CASES)
def test_masked_permute_matches_reference_bitwise(num_tokens, hidden, num_experts, topk, max_m, pattern,
                                                  quantize, use_ue8m0):
    x = random_tokens(num_tokens, hidden)
    ids = random_ids(num_tokens, topk, num_experts, pattern)
    args = (x, ids, num_experts, max_m, quantize, use_ue8m0, 128)
    result = moe_layout.permute_masked(*args)
    assert_bitwise(result, ref.moe_permute_masked(*args), f"{pattern} T={num_tokens} E={num_experts}")


@pytest.mark.usefixtures("large_tiles")
def test_masked_permute_drops_overflow_and_reports_true_counts():
    x = random_tokens(129, 128)
    ids = random_ids(129, 6, 4, "one")  # 774 slots on expert 2
    result = moe_layout.permute_masked(x, ids, 4, 100)
    assert result.expert_counts.tolist() == [0, 0, 774, 0]
    assert result.masked_m.tolist() == [0, 0, 100, 0]
    kept = result.row_of_slot.flatten()
    assert torch.equal(kept[:100], 200 + torch.arange(100, dtype=torch.int32))  # flat order, expert 2
    assert (kept[100:] == -1).all()
    assert torch.equal(result.permuted[2, :100], x.repeat_interleave(6, dim=0)[:100])
    assert (result.permuted[[0, 1, 3]] == 0).all()


def test_launch_constants_contiguous_quantized():
    """The launcher's own tiles (one or two tokens and a few padding rows per program)."""
    x = random_tokens(65, 384)
    ids = random_ids(65, 8, 8, "unused")
    args = (x, ids, 8, 128, False, True, False, 128)
    assert_bitwise(moe_layout.permute_contiguous(*args), ref.moe_permute_contiguous(*args), "default tiles")


def test_launch_constants_masked():
    x = random_tokens(127, 128)
    ids = random_ids(127, 6, 4, "random")
    args = (x, ids, 4, 150, False, False, 128)
    assert_bitwise(moe_layout.permute_masked(*args), ref.moe_permute_masked(*args), "default tiles")


def assert_same_bf16(out, expected, what):
    assert out.dtype == torch.bfloat16 and out.shape == expected.shape, what
    assert torch.equal(out.view(torch.int16), expected.view(torch.int16)), (
        f"{what}: {(out.view(torch.int16) != expected.view(torch.int16)).sum().item()} elements differ")


def test_combine_of_contiguous_rows_matches_reference_bitwise():
    """bf16 y, unused slots with NaN weights (never read), and rows past y's end (unused too)."""
    ids = random_ids(129, 6, 8, "unused")
    layout = ref.moe_permute_contiguous(random_tokens(129, 128), ids, 8, 32)
    y = (torch.randn(layout.permuted.size(0), 192) * 30).to(torch.bfloat16)
    weights = torch.rand(129, 6)
    weights[layout.row_of_slot < 0] = float("nan")
    rows = layout.row_of_slot.clone()
    rows[3, 0] = y.size(0)
    rows[4, 1] = 2**31 - 1
    assert_same_bf16(moe_layout.unpermute_combine(y, rows, weights), ref.moe_unpermute_combine(y, rows, weights),
                     "contiguous combine")


@pytest.mark.parametrize("evenly_spaced", [True, False])
def test_combine_of_masked_rows_from_fp32_matches_reference_bitwise(evenly_spaced):
    """y [E, max_m, N] contiguous (one row stride over all groups) or transposed (column stride
    max_m, rows found group by group)."""
    num_experts, max_m = 8, 40
    ids = random_ids(300, 8, num_experts, "distinct")
    layout = ref.moe_permute_masked(random_tokens(300, 16), ids, num_experts, max_m)
    if evenly_spaced:
        y = torch.randn(num_experts, max_m, 130)
    else:
        y = torch.randn(num_experts, 130, max_m).transpose(1, 2)
    weights = torch.randn(300, 8)
    out = moe_layout.unpermute_combine(y, layout.row_of_slot, weights)
    assert_same_bf16(out, ref.moe_unpermute_combine(y, layout.row_of_slot, weights), "masked combine")
    assert (layout.row_of_slot == -1).any()  # some slots dropped, so some tokens lose a term


@pytest.mark.usefixtures("large_tiles")
def test_permute_then_combine_round_trip():
    """Identity experts: combining the permuted rows gives each token's weighted sum of its own
    row over its used slots, summed in slot order."""
    x = random_tokens(300, 128)
    ids = random_ids(300, 8, 8, "unused")
    weights = torch.rand(300, 8)
    layout = moe_layout.permute_contiguous(x, ids, 8, 64, False, False, False, 128)
    out = moe_layout.unpermute_combine(layout.permuted, layout.row_of_slot, weights)
    expected = torch.zeros(300, 128)
    for k in range(8):
        used = (ids[:, k] >= 0).unsqueeze(1)
        expected = torch.where(used, expected + x.float() * weights[:, k:k + 1], expected)
    assert_same_bf16(out, expected.to(torch.bfloat16), "round trip")
    assert (out[150] == 0).all()  # a token with every slot unused


def test_combine_sums_in_slot_order():
    """The kernel keeps the reference's order: 1 + 2**-8 (a bf16 tie) plus three quarter-ulp terms
    stays 1 when they come after it and becomes 1 + 2**-7 when they come first."""
    y = torch.tensor([[1.0 + 2.0 ** -8], [2.0 ** -25]])
    rows = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.int32)
    out = moe_layout.unpermute_combine(y, rows, torch.ones(2, 4))
    assert out.float().tolist() == [[1.0], [1.0 + 2.0 ** -7]]


def test_interpreter_bf16_rounding_patch_rounds_to_nearest():
    """Guards the conftest patch the combine relies on: fp32 -> bf16 rounds to nearest even."""
    y = torch.tensor([[1.0 + 2**-8 + 2**-12, 1.0 + 2**-8]])  # above the tie: up; the tie: to even
    out = moe_layout.unpermute_combine(y, torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, 1))
    assert out.float().tolist() == [[1.0 + 2**-7, 1.0]]
