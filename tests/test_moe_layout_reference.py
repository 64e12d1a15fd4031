"""The MoE token layout reference (dg_triton/reference_moe_layout.py) on hand-computed examples and
against a brute-force count, the public functions of dg_triton.moe_layout on CPU tensors (which run
the reference), and their argument checks. Plain CPU, no interpreter."""
import re

import pytest
import torch

from dg_triton import moe_layout
from dg_triton import reference_moe_layout as ref
from dg_triton.errors import DGArgumentError
from dg_triton.reference_quant import per_token_cast_to_fp8
from dg_triton.utils.layout import (
    get_mk_alignment_for_contiguous_layout,
    set_mk_alignment_for_contiguous_layout,
)

# flat slots: 0 -> e0, 1 -> e2, 2 -> e2, 3 unused, 4 -> e0, 5 -> e0
IDS = torch.tensor([[0, 2], [2, -1], [0, 0]], dtype=torch.int32)
X = torch.tensor([[1.0, -2.0], [3.0, 4.0], [5.0, 6.0]]).to(torch.bfloat16)


def test_expert_ranks_count_earlier_slots_of_the_same_expert():
    expert, rank, counts = ref.expert_ranks(IDS, 3)
    assert expert.tolist() == [0, 2, 2, -1, 0, 0]
    assert rank.tolist() == [0, 0, 1, -1, 1, 2]
    assert counts.tolist() == [3, 0, 2] and counts.dtype == torch.int32


def test_expert_ranks_match_a_brute_force_count_and_ignore_out_of_range_ids():
    ids = torch.randint(-3, 9, (200, 5))  # -3..-1 and 7, 8 are all unused with E = 7
    expert, rank, counts = ref.expert_ranks(ids, 7)
    seen = [0] * 7
    for slot, value in enumerate(ids.flatten().tolist()):
        if 0 <= value < 7:
            assert (expert[slot].item(), rank[slot].item()) == (value, seen[value])
            seen[value] += 1
        else:
            assert (expert[slot].item(), rank[slot].item()) == (-1, -1)
    assert counts.tolist() == seen


def test_contiguous_layout_hand_example():
    layout = ref.moe_permute_contiguous(X, IDS, 3, 4)
    # counts [3, 0, 2] -> segments of 4, 0, 4 rows at 0, 4, 4; M_pad = align(6 + 3 * 3, 4) = 16
    assert layout.permuted.shape == (16, 2)
    assert layout.row_of_slot.tolist() == [[0, 4], [5, -1], [1, 2]]
    assert layout.m_indices.tolist() == [0, 0, 0, -1, 2, 2] + [-1] * 10
    assert layout.psum.tolist() == [3, 4, 6]
    assert layout.expert_counts.tolist() == [3, 0, 2]
    expected = torch.zeros(16, 2, dtype=torch.bfloat16)
    expected[[0, 1, 2, 4, 5]] = X[[0, 2, 2, 0, 1]]
    assert torch.equal(layout.permuted, expected)
    assert layout.sf is None and layout.a is layout.permuted and layout.grouped_layout is layout.m_indices
    for dtype in (layout.m_indices, layout.psum, layout.row_of_slot, layout.expert_counts):
        assert dtype.dtype == torch.int32


def test_psum_layout_has_the_same_rows_and_no_m_indices():
    index_layout = ref.moe_permute_contiguous(X, IDS, 3, 4)
    psum_layout = ref.moe_permute_contiguous(X, IDS, 3, 4, use_psum_layout=True)
    assert psum_layout.m_indices is None and psum_layout.grouped_layout is psum_layout.psum
    assert torch.equal(psum_layout.permuted, index_layout.permuted)
    # expert g occupies [align(psum[g-1], alignment), psum[g]) (API.md 3.4)
    psum = [0] + psum_layout.psum.tolist()
    for g in range(3):
        start = (psum[g] + 3) // 4 * 4
        assert (index_layout.m_indices[start:psum[g + 1]] == g).all()


def test_masked_layout_hand_example_drops_overflow():
    layout = ref.moe_permute_masked(X, IDS, 3, 2)
    assert layout.permuted.shape == (3, 2, 2)
    assert layout.row_of_slot.tolist() == [[0, 4], [5, -1], [1, -1]]  # slot 5 is expert 0's third
    assert layout.masked_m.tolist() == [2, 0, 2] and layout.expert_counts.tolist() == [3, 0, 2]
    assert torch.equal(layout.permuted[0], X[[0, 2]]) and torch.equal(layout.permuted[2], X[[0, 1]])
    assert (layout.permuted[1] == 0).all()


@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_quantized_layouts_are_the_per_token_cast_of_the_bf16_layouts(use_ue8m0):
    x = (torch.randn(50, 300) * 10).to(torch.bfloat16)
    ids = torch.randint(-1, 5, (50, 3))
    plain = ref.moe_permute_contiguous(x, ids, 5, 16)
    quantized = ref.moe_permute_contiguous(x, ids, 5, 16, quantize=True, use_ue8m0=use_ue8m0, gran_k=128)
    q, sf = per_token_cast_to_fp8(plain.permuted, use_ue8m0, 128)
    assert torch.equal(quantized.permuted.view(torch.uint8), q.view(torch.uint8))
    assert torch.equal(quantized.sf, sf) and quantized.sf.stride() == (1, plain.permuted.size(0))
    zero_row_sf = 2.0 ** -22 if use_ue8m0 else torch.tensor(1e-4) / 448
    assert (quantized.sf[plain.m_indices < 0] == zero_row_sf).all()
    assert quantized.a == (quantized.permuted, quantized.sf)

    masked_plain = ref.moe_permute_masked(x, ids, 5, 7)
    masked = ref.moe_permute_masked(x, ids, 5, 7, quantize=True, use_ue8m0=use_ue8m0)
    q, sf = per_token_cast_to_fp8(masked_plain.permuted.view(35, 300), use_ue8m0, 128)
    assert torch.equal(masked.permuted.view(torch.uint8), q.view(5, 7, 300).view(torch.uint8))
    assert torch.equal(masked.sf, sf.view(5, 7, 3))
    assert masked.sf.stride() == (8 * 3, 1, 8)  # API.md 2.3, aligned_mn = align(7, 4) = 8


def test_combine_hand_example():
    y = torch.tensor([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]])
    rows = torch.tensor([[0, 2], [-1, 1], [-1, -1], [1, 3]], dtype=torch.int32)  # 3 is past y: unused
    weights = torch.tensor([[0.5, 0.25], [float("nan"), 2.0], [1.0, 1.0], [1.0, float("inf")]])
    out = ref.moe_unpermute_combine(y, rows, weights)
    assert out.dtype == torch.bfloat16
    assert out.float().tolist() == [[25.5, 51.0], [20.0, 40.0], [0.0, 0.0], [10.0, 20.0]]


def test_combine_sums_in_slot_order():
    """fp32 partial sums in k order, each rounded, then one bf16 rounding: 1 + 2**-8 is a bf16 tie
    (rounds to 1); three quarter-ulp terms added after it vanish one by one, added before it they
    tip it over the tie (to 1 + 2**-7)."""
    y = torch.tensor([[1.0 + 2.0 ** -8], [2.0 ** -25]])
    rows = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.int32)
    out = ref.moe_unpermute_combine(y, rows, torch.ones(2, 4))
    assert out.float().tolist() == [[1.0], [1.0 + 2.0 ** -7]]


def test_public_functions_run_the_reference_on_cpu():
    x = (torch.randn(40, 64) * 3).to(torch.bfloat16)
    ids = torch.randint(-1, 6, (40, 4))
    got = moe_layout.moe_permute_contiguous(x, ids, 6)
    want = ref.moe_permute_contiguous(x, ids, 6, get_mk_alignment_for_contiguous_layout())
    assert all(torch.equal(a, b) for a, b in zip(got, want) if a is not None)
    got = moe_layout.moe_permute_masked(x, ids, 6, 9, quantize=True)
    want = ref.moe_permute_masked(x, ids, 6, 9, quantize=True)
    assert all(torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                           b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)
               for a, b in zip(got, want))
    weights = torch.rand(40, 4)
    assert torch.equal(moe_layout.moe_unpermute_combine(got.permuted.float(), got.row_of_slot, weights),
                       ref.moe_unpermute_combine(got.permuted.float(), got.row_of_slot, weights))


def test_default_alignment_follows_the_process_setting():
    previous = get_mk_alignment_for_contiguous_layout()
    try:
        set_mk_alignment_for_contiguous_layout(32)
        layout = moe_layout.moe_permute_contiguous(X, IDS, 3)
        assert layout.permuted.size(0) == ref.contiguous_layout_rows(3, 2, 3, 32) == 128
    finally:
        set_mk_alignment_for_contiguous_layout(previous)


def test_row_count_is_the_host_known_bound():
    assert ref.contiguous_layout_rows(8192, 8, 256, 128) == (65536 + 256 * 127 + 127) // 128 * 128
    assert ref.contiguous_layout_rows(0, 8, 4, 16) == 64


BF16 = torch.zeros(4, 8, dtype=torch.bfloat16)
IDS4 = torch.zeros(4, 2, dtype=torch.int32)


@pytest.mark.parametrize("kwargs,argument", [
    ({"x": [[1.0]]}, "x"),
    ({"x": BF16[0]}, "x"),
    ({"x": BF16.float()}, "x.dtype"),
    ({"topk_ids": IDS4.float()}, "topk_ids.dtype"),
    ({"topk_ids": IDS4[:3]}, "topk_ids.size(0)"),
    ({"topk_ids": IDS4[:, :0]}, "topk_ids.size(1)"),
    ({"topk_ids": IDS4.to("meta")}, "topk_ids.device"),
    ({"num_experts": 0}, "num_experts"),
    ({"num_experts": 4097}, "num_experts"),
    ({"num_experts": 2.0}, "num_experts"),
    ({"num_experts": True}, "num_experts"),
    ({"alignment": 0}, "alignment"),
    ({"alignment": 16.0}, "alignment"),
    ({"use_psum_layout": "yes"}, "use_psum_layout"),
    ({"quantize": 2}, "quantize"),
    ({"use_ue8m0": None}, "use_ue8m0"),
    ({"gran_k": 0}, "gran_k"),
])
def test_contiguous_permute_rejects_bad_arguments(kwargs, argument):
    call = {"x": BF16, "topk_ids": IDS4, "num_experts": 4}
    call.update(kwargs)
    with pytest.raises(DGArgumentError, match=re.escape(f"moe_permute_contiguous: {argument} must be")):
        moe_layout.moe_permute_contiguous(**call)


@pytest.mark.parametrize("kwargs,argument", [
    ({"max_m": 0}, "max_m"),
    ({"max_m": None}, "max_m"),
    ({"max_m": 2**31 // 4}, "max_m"),
    ({"num_experts": -1}, "num_experts"),
    ({"gran_k": -128}, "gran_k"),
])
def test_masked_permute_rejects_bad_arguments(kwargs, argument):
    call = {"x": BF16, "topk_ids": IDS4, "num_experts": 4, "max_m": 8}
    call.update(kwargs)
    with pytest.raises(DGArgumentError, match=re.escape(f"moe_permute_masked: {argument} must be")):
        moe_layout.moe_permute_masked(**call)


ROWS = torch.zeros(4, 2, dtype=torch.int32)
WEIGHTS = torch.ones(4, 2)


@pytest.mark.parametrize("kwargs,argument", [
    ({"y": torch.zeros(8)}, "y"),
    ({"y": torch.zeros(8, 4, dtype=torch.float16)}, "y.dtype"),
    ({"row_of_slot": ROWS.long()}, "row_of_slot.dtype"),
    ({"row_of_slot": ROWS[0]}, "row_of_slot"),
    ({"topk_weights": WEIGHTS.double()}, "topk_weights.dtype"),
    ({"topk_weights": WEIGHTS[:, :1]}, "topk_weights.shape"),
    ({"topk_weights": WEIGHTS.to("meta")}, "topk_weights.device"),
])
def test_combine_rejects_bad_arguments(kwargs, argument):
    call = {"y": torch.zeros(8, 4, dtype=torch.bfloat16), "row_of_slot": ROWS, "topk_weights": WEIGHTS}
    call.update(kwargs)
    with pytest.raises(DGArgumentError, match=re.escape(f"moe_unpermute_combine: {argument} must be")):
        moe_layout.moe_unpermute_combine(**call)


def test_rejections_are_runtime_and_value_errors():
    with pytest.raises(RuntimeError):
        moe_layout.moe_permute_masked(BF16, IDS4, 4, 0)
    with pytest.raises(ValueError):
        moe_layout.moe_permute_masked(BF16, IDS4, 4, 0)
