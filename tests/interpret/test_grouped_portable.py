"""The portable M-grouped BF16 GEMMs (dg_triton/triton/grouped_portable.py) under the interpreter on
CPU tensors, through the public calls (dg_triton.m_grouped_bf16_gemm_nt_{contiguous,masked}),
against dg_triton.reference_grouped with API.md 8's BF16 threshold (calc_diff < 1e-5) on the rows
that carry meaning, and exact checks on the rest: -1 padding rows are 0, psum gap rows are 0 or
untouched as ensure_zero_padding says, rows past the last group and masked-off rows are untouched.

Outputs are poisoned first (NaN where every row is written, a sentinel where some must stay), and
A's padding rows hold random values, so a row computed or skipped by mistake shows. The mk
alignment is set small (32, and 16 to cut the interpreter's 32-row tile) to keep the test fast.
"""
import random

import pytest
import torch

import dg_triton
from dg_triton import reference_grouped
from dg_triton.testing import calc_diff
from dg_triton.utils import layout as mk_layout
from dg_triton.utils.math import align

BF16_THRESHOLD = 1e-5
SENTINEL = 777.0
NK = [(64, 128), (96, 192)]


@pytest.fixture(autouse=True)
def _automatic_backend(monkeypatch):
    monkeypatch.delenv("DG_BACKEND", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    previous = mk_layout.get_mk_alignment_for_contiguous_layout()
    yield
    mk_layout.set_mk_alignment_for_contiguous_layout(previous)


def _generator():
    seed = random.randrange(2 ** 31)
    return torch.Generator().manual_seed(seed), random.Random(seed), f"seed={seed}"


def _randn(shape, generator):
    return torch.randn(shape, generator=generator).to(torch.bfloat16)


def _check_close(out, expected, what):
    assert torch.isfinite(out.float()).all(), f"{what}: unwritten (NaN) or non-finite elements"
    diff = float(calc_diff(out.double(), expected.double()))
    assert diff < BF16_THRESHOLD, f"{what}: calc_diff {diff:.3g} >= {BF16_THRESHOLD}"


def _group_sizes(num_groups, rng, largest):
    """Random sizes with an empty group whenever there are several, and one group of `largest`."""
    sizes = [rng.randrange(1, largest + 1) for _ in range(num_groups)]
    sizes[rng.randrange(num_groups)] = largest
    if num_groups > 1:
        sizes[rng.randrange(num_groups)] = 0
    return sizes


def _index_layout(sizes, alignment):
    indices = []
    for g, size in enumerate(sizes):
        indices += [g] * size + [-1] * (align(size, alignment) - size)
    return torch.tensor(indices, dtype=torch.int32)


@pytest.mark.parametrize("num_groups", [1, 2, 4])
@pytest.mark.parametrize("n,k", NK)
def test_contiguous_index_layout_matches_reference(num_groups, n, k):
    generator, rng, what = _generator()
    alignment = 32
    mk_layout.set_mk_alignment_for_contiguous_layout(alignment)
    sizes = _group_sizes(num_groups, rng, 45)
    layout = _index_layout(sizes, alignment)
    m = layout.numel()
    a, b = _randn((m, k), generator), _randn((num_groups, n, k), generator)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    expected = reference_grouped.m_grouped_contiguous_reference(a, b, d, layout)
    dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
    what = f"{what} sizes={sizes} n={n} k={k}"
    meaningful = reference_grouped.contiguous_meaningful_rows(layout, m)
    _check_close(d[meaningful], expected[meaningful], what)
    assert (d[~meaningful] == 0).all(), f"{what}: -1 padding rows are not 0"


def test_contiguous_index_layout_with_a_tile_cut_to_the_alignment_and_mn_major_b():
    """Alignment 16 cuts the interpreter's 32-row tile to 16 rows (a 32-row tile would span two
    groups); b is N-major per group (BF16 takes either major)."""
    generator, _, what = _generator()
    alignment = 16
    mk_layout.set_mk_alignment_for_contiguous_layout(alignment)
    n, k, sizes = 64, 128, [5, 0, 16, 17]
    layout = _index_layout(sizes, alignment)
    m = layout.numel()
    a = _randn((m, k), generator)
    b = _randn((len(sizes), k, n), generator).transpose(1, 2)
    assert b.stride(1) == 1
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    expected = reference_grouped.m_grouped_contiguous_reference(a, b, d, layout)
    dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
    meaningful = reference_grouped.contiguous_meaningful_rows(layout, m)
    _check_close(d[meaningful], expected[meaningful], what)
    assert (d[~meaningful] == 0).all(), f"{what}: -1 padding rows are not 0"


def test_contiguous_index_out_of_range_is_padding_never_a_read_past_b():
    """An expert index >= G (a routing bug upstream) is treated as -1: its rows are written as 0
    and B is never read past its last group."""
    generator, _, what = _generator()
    alignment = 32
    mk_layout.set_mk_alignment_for_contiguous_layout(alignment)
    n, k, num_groups = 64, 128, 2
    layout = _index_layout([20, 32], alignment)
    layout[32:64] = num_groups   # the second segment names a group that does not exist
    m = layout.numel()
    a, b = _randn((m, k), generator), _randn((num_groups, n, k), generator)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
    expected = a[:20].float() @ b[0].float().T
    _check_close(d[:20], expected, what)
    assert (d[20:] == 0).all(), f"{what}: padding and out-of-range rows are not 0"


@pytest.mark.parametrize("num_groups,n,k", [(1, 64, 128), (2, 96, 192), (4, 64, 192)])
@pytest.mark.parametrize("ensure_zero_padding", [True, False])
def test_contiguous_psum_layout_matches_reference(num_groups, n, k, ensure_zero_padding):
    """Groups start at align(end of the previous group); gap rows are 0 or untouched as
    ensure_zero_padding says; rows past the last group (here a whole extra tile) are untouched."""
    generator, rng, what = _generator()
    alignment = 32
    mk_layout.set_mk_alignment_for_contiguous_layout(alignment)
    sizes = _group_sizes(num_groups, rng, 45)
    ends, end = [], 0
    for size in sizes:
        end = align(end, alignment) + size
        ends.append(end)
    psum = torch.tensor(ends, dtype=torch.int32)
    m = align(end, alignment) + 40
    a, b = _randn((m, k), generator), _randn((num_groups, n, k), generator)
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    expected = reference_grouped.m_grouped_contiguous_reference(a, b, d, psum, True, alignment,
                                                                ensure_zero_padding)
    dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True,
                                                ensure_zero_padding=ensure_zero_padding,
                                                expected_m_for_psum_layout=32)
    what = f"{what} sizes={sizes} ends={ends}"
    meaningful = reference_grouped.contiguous_meaningful_rows(psum, m, True, alignment)
    _check_close(d[meaningful], expected[meaningful], what)
    assert torch.equal(d[~meaningful], expected[~meaningful]), f"{what}: gap or trailing rows wrong"
    assert (d[end:] == SENTINEL).all(), f"{what}: rows past the last group were written"


@pytest.mark.parametrize("num_groups,n,k", [(1, 64, 128), (2, 96, 192), (4, 64, 128)])
def test_masked_matches_reference(num_groups, n, k):
    """masked_m in {0, partial, max_m}; max_m is not a multiple of the 32-row tile; rows at or past
    masked_m[g] keep the sentinel (the portable kernel does not write them)."""
    generator, rng, what = _generator()
    max_m = 40
    choices = [0, rng.randrange(1, max_m), max_m, rng.randrange(1, 33)]
    counts = choices[:num_groups] if num_groups > 1 else [rng.choice([rng.randrange(1, max_m), max_m])]
    masked_m = torch.tensor(counts, dtype=torch.int32)
    a = _randn((num_groups, max_m, k), generator)
    b = _randn((num_groups, n, k), generator)
    d = torch.full((num_groups, max_m, n), SENTINEL, dtype=torch.bfloat16)
    expected = reference_grouped.m_grouped_masked_reference(a, b, d, masked_m)
    dg_triton.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m=max(max(counts), 1))
    what = f"{what} masked_m={counts}"
    meaningful = reference_grouped.masked_meaningful_rows(masked_m, max_m)
    _check_close(d[meaningful], expected[meaningful], what)
    assert (d[~meaningful] == SENTINEL).all(), f"{what}: rows at or past masked_m were written"


def test_contiguous_with_no_rows_is_a_no_op():
    a = torch.empty((0, 128), dtype=torch.bfloat16)
    b = torch.randn(2, 64, 128).to(torch.bfloat16)
    d = torch.empty((0, 64), dtype=torch.bfloat16)
    dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, torch.empty(0, dtype=torch.int32))
    dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, torch.zeros(2, dtype=torch.int32), use_psum_layout=True)
