"""M-grouped BF16 GEMMs on an SM90 GPU (the CUDA kernels: bf16_gemm.cuh with scheduler_grouped.cuh)
against dg_triton.reference_grouped, per group, with API.md 8's BF16 threshold (calc_diff < 1e-5)
on the rows that carry meaning, and exact checks of what must and must not be written:

- contiguous, index layout: -1 padding rows are written as 0 (A's padding rows hold NaN, so a
  padding row that were computed, or a NaN that leaked into a real row, would show);
- contiguous, psum layout: gap rows below the last group's end are 0 with ensure_zero_padding and
  untouched without; rows past the last group's end are untouched;
- masked: rows at or past masked_m[g] are untouched (grouped.py's contract, stricter than API.md's
  "up to the block boundary"), as are other groups' rows when max_m is not a multiple of block M.
Every output is poisoned with NaN first (so "untouched" means "still NaN"). Shapes: API.md 8's
grouped lists (tests/shapes.py), the contiguous expected m divided by GROUPED_GPU_TEST_M_DIVISOR
so each case runs in about a second.
"""
import random
import zlib

import pytest
import torch

from shapes import (GROUPED_CONTIGUOUS_GM, GROUPED_GPU_TEST_M_DIVISOR, GROUPED_MASKED_GM,
                    GROUPED_MASKED_MAX_M, GROUPED_NK)

pytestmark = pytest.mark.gpu
if not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9):
    pytest.skip("needs an SM90 GPU", allow_module_level=True)

import dg_triton  # noqa: E402
from dg_triton import dispatch, reference_grouped  # noqa: E402
from dg_triton.kernels import sm90_grouped_gemm  # noqa: E402
from dg_triton.testing import calc_diff, capture_graph  # noqa: E402
from dg_triton.utils import layout as mk_layout  # noqa: E402
from dg_triton.utils.math import align  # noqa: E402

THRESHOLD = 1e-5
NAN = float("nan")


@pytest.fixture(autouse=True)
def seed_and_settings(request, monkeypatch):
    # Fresh inputs per test, reproducible from the test id alone; the automatic backend (SM90).
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    random.seed(seed)
    monkeypatch.delenv("DG_BACKEND", raising=False)
    previous = mk_layout.get_mk_alignment_for_contiguous_layout()
    yield
    mk_layout.set_mk_alignment_for_contiguous_layout(previous)


def randn(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def nan_like(shape):
    return torch.full(shape, NAN, device="cuda", dtype=torch.bfloat16)


def group_sizes(num_groups, expected):
    return [int(expected * random.uniform(0.7, 1.3)) for _ in range(num_groups)]


def index_layout(sizes, alignment):
    """m_indices: each group's rows, then -1 up to the alignment (API.md 3.4)."""
    ids = []
    for g, size in enumerate(sizes):
        ids += [g] * size + [-1] * (align(size, alignment) - size)
    return torch.tensor(ids, dtype=torch.int32, device="cuda")


def psum_layout(sizes, alignment):
    ends, end = [], 0
    for size in sizes:
        end = align(end, alignment) + size
        ends.append(end)
    return torch.tensor(ends, dtype=torch.int32, device="cuda")


def b_operand(num_groups, n, k, b_k_major):
    """b as m_grouped_bf16_gemm_nt_contiguous takes it: [G, N, K], K-major or MN-major (a [G, K, N]
    tensor seen through .mT, the `nn` layout)."""
    return randn(num_groups, n, k) if b_k_major else randn(num_groups, k, n).mT


def check_close(out, expected, what):
    assert torch.isfinite(out.float()).all(), f"{what}: unwritten (NaN) or non-finite elements"
    diff = float(calc_diff(out, expected))
    assert diff < THRESHOLD, f"{what}: calc_diff {diff:.3g} >= {THRESHOLD}"


def is_nan(t):
    return torch.isnan(t.float()).all()


def run_contiguous_index(sizes, n, k, b_k_major=True, alignment=128, nn_alias=False, b=None):
    """Runs the index layout with A's padding rows set to NaN; checks every row; returns (d, layout)."""
    mk_layout.set_mk_alignment_for_contiguous_layout(alignment)
    layout = index_layout(sizes, alignment)
    m = layout.numel()
    a = randn(m, k)
    a[layout < 0] = NAN
    if b is None:
        b = b_operand(len(sizes), n, k, b_k_major)
    d = nan_like((m, n))
    a_ref = torch.where((layout < 0)[:, None], torch.zeros_like(a), a)
    expected = reference_grouped.m_grouped_contiguous_reference(a_ref, b, d, layout)
    if nn_alias:
        dg_triton.m_grouped_bf16_gemm_nn_contiguous(a, b.mT, d, layout)
    else:
        dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
    what = f"sizes={sizes} n={n} k={k} b_k_major={b_k_major} alignment={alignment}"
    meaningful = layout >= 0
    if meaningful.any():
        check_close(d[meaningful], expected[meaningful], what)
    assert (d[~meaningful] == 0).all(), f"{what}: -1 padding rows are not 0"
    return d, layout


def run_contiguous_psum(sizes, n, k, ensure_zero_padding, b_k_major=True, alignment=128,
                        extra_rows=200, expected_m=None):
    mk_layout.set_mk_alignment_for_contiguous_layout(alignment)
    psum = psum_layout(sizes, alignment)
    last_end = int(psum[-1])
    m = align(last_end, alignment) + extra_rows
    a = randn(m, k)
    meaningful = reference_grouped.contiguous_meaningful_rows(psum, m, True, alignment)
    a[~meaningful] = NAN
    b = b_operand(len(sizes), n, k, b_k_major)
    d = nan_like((m, n))
    a_ref = torch.where(meaningful[:, None], a, torch.zeros_like(a))
    expected = reference_grouped.m_grouped_contiguous_reference(a_ref, b, d, psum, True, alignment,
                                                                ensure_zero_padding)
    dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True,
                                                ensure_zero_padding=ensure_zero_padding,
                                                expected_m_for_psum_layout=expected_m)
    what = f"sizes={sizes} ends={psum.tolist()} n={n} k={k} zero_gaps={ensure_zero_padding}"
    if meaningful.any():
        check_close(d[meaningful], expected[meaningful], what)
    gaps = ~meaningful
    gaps[last_end:] = False
    if ensure_zero_padding:
        assert (d[gaps] == 0).all(), f"{what}: gap rows are not 0"
    else:
        assert is_nan(d[gaps]), f"{what}: gap rows were written"
    assert is_nan(d[last_end:]), f"{what}: rows past the last group were written"


def run_masked(num_groups, max_m, n, k, counts, expected_m):
    a = randn(num_groups, max_m, k)
    b = randn(num_groups, n, k)
    d = nan_like((num_groups, max_m, n))
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    meaningful = reference_grouped.masked_meaningful_rows(masked_m, max_m)
    a[~meaningful] = NAN
    expected = reference_grouped.m_grouped_masked_reference(a, b, d, masked_m)
    dg_triton.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
    what = f"G={num_groups} max_m={max_m} n={n} k={k} masked_m={counts}"
    if meaningful.any():
        check_close(d[meaningful], expected[meaningful], what)
    assert is_nan(d[~meaningful]), f"{what}: rows at or past masked_m were written"


# ---- the SM90 path is the one under test -----------------------------------------------------------

def test_sm90_dispatches_the_grouped_gemms_to_cuda_and_dg_backend_triton_to_portable(monkeypatch):
    device = torch.device("cuda")
    for function in ("m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nn_contiguous",
                     "m_grouped_bf16_gemm_nt_masked"):
        assert dispatch.backend(function, device, (dispatch.SM90,)) == dispatch.SM90
    run_contiguous_index([300, 77], 512, 256)
    assert any(plan is not sm90_grouped_gemm._UNSUPPORTED for plan in sm90_grouped_gemm._plans.values())
    monkeypatch.setenv("DG_BACKEND", "triton")
    assert dispatch.backend("m_grouped_bf16_gemm_nt_masked", device, (dispatch.SM90,)) == dispatch.PORTABLE
    run_contiguous_index([300, 77], 512, 256)   # the portable path gives the same semantics


# ---- contiguous --------------------------------------------------------------------------------------

@pytest.mark.parametrize("b_k_major", [True, False], ids=["b_k_major", "b_mn_major"])
@pytest.mark.parametrize("n,k", GROUPED_NK)
@pytest.mark.parametrize("num_groups,expected", GROUPED_CONTIGUOUS_GM)
def test_contiguous_index_layout_matches_reference_on_api_shapes(num_groups, expected, n, k, b_k_major):
    sizes = group_sizes(num_groups, expected // GROUPED_GPU_TEST_M_DIVISOR)
    run_contiguous_index(sizes, n, k, b_k_major)


@pytest.mark.parametrize("ensure_zero_padding", [True, False])
@pytest.mark.parametrize("n,k", GROUPED_NK)
@pytest.mark.parametrize("num_groups,expected", GROUPED_CONTIGUOUS_GM)
def test_contiguous_psum_layout_matches_reference_on_api_shapes(num_groups, expected, n, k,
                                                                ensure_zero_padding):
    expected //= GROUPED_GPU_TEST_M_DIVISOR
    run_contiguous_psum(group_sizes(num_groups, expected), n, k, ensure_zero_padding,
                        expected_m=expected)


def test_nn_alias_passes_b_as_g_k_n():
    run_contiguous_index([333, 0, 129], 1024, 512, b_k_major=False, nn_alias=True)


@pytest.mark.parametrize("layout", ["index", "psum"])
def test_contiguous_with_empty_experts(layout):
    sizes = [0, 260, 0, 0, 1, 128, 0]
    if layout == "index":
        run_contiguous_index(sizes, 2048, 1024)
    else:
        run_contiguous_psum(sizes, 2048, 1024, True)
        run_contiguous_psum(sizes, 2048, 1024, False)
        run_contiguous_psum([0, 0, 0], 512, 256, True)   # no rows at all: nothing written


@pytest.mark.parametrize("layout", ["index", "psum"])
def test_contiguous_one_expert_holds_all_tokens(layout):
    sizes = [0, 0, 4001, 0, 0, 0, 0, 0]
    if layout == "index":
        run_contiguous_index(sizes, 4096, 2048)
    else:
        run_contiguous_psum(sizes, 4096, 2048, True)


def test_contiguous_padding_tiles_and_out_of_range_ids_are_written_as_zero():
    """Whole 128-row padding blocks between groups (the scheduler skips their loads and MMAs), an
    id >= G (treated as -1, never a read past B), and a -1 row inside a group's block."""
    mk_layout.set_mk_alignment_for_contiguous_layout(128)
    n, k, num_groups = 1024, 512, 3
    layout = torch.tensor([0] * 100 + [-1] * 28 + [-1] * 256 + [1] * 128 + [7] * 128 + [2] * 60
                          + [-1] * 68, dtype=torch.int32, device="cuda")
    layout[420] = -1
    m = layout.numel()
    a, b, d = randn(m, k), randn(num_groups, n, k), nan_like((m, n))
    valid = (layout >= 0) & (layout < num_groups)
    a[~valid] = NAN
    dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
    for g in range(num_groups):
        rows = layout == g
        check_close(d[rows], (a[rows].float() @ b[g].float().T).to(torch.bfloat16), f"group {g}")
    assert (d[~valid] == 0).all(), "padding, out-of-range and -1 rows must be 0"


@pytest.mark.parametrize("alignment", [64, 192, 256, 32])
def test_contiguous_other_alignments(alignment):
    """64/192: block M 64; 256: block M 128 (two tiles per segment); 32: no SM90 block M divides it,
    so the portable kernel serves the call (same semantics)."""
    run_contiguous_index([100, 0, 250, 64], 1024, 512, alignment=alignment)
    run_contiguous_psum([100, 0, 250, 64], 1024, 512, True, alignment=alignment)


@pytest.mark.parametrize("n,k", [(584, 512), (1024, 136), (2120, 7176)])
@pytest.mark.parametrize("b_k_major", [True, False])
def test_contiguous_n_and_k_tails(n, k, b_k_major):
    """N tails (a K-major B tile past N reads the next group's rows; only clipped columns see them)
    and K tails (MN-major B with K % 64 != 0 goes to the portable kernel)."""
    run_contiguous_index([150, 300, 77], n, k, b_k_major)


# ---- masked ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,k", GROUPED_NK)
@pytest.mark.parametrize("num_groups,expected", GROUPED_MASKED_GM)
def test_masked_matches_reference_on_api_shapes(num_groups, expected, n, k):
    counts = [min(GROUPED_MASKED_MAX_M, v) for v in group_sizes(num_groups, expected)]
    max_m = min(GROUPED_MASKED_MAX_M, align(max(counts) + 1, 128) + 128)
    run_masked(num_groups, max_m, n, k, counts, int(expected * 1.2))


def test_masked_with_masked_m_zero_and_max_m():
    max_m = 384
    run_masked(4, max_m, 2048, 1024, [0, max_m, 0, max_m], 256)
    run_masked(3, max_m, 2048, 1024, [0, 0, 0], 16)
    run_masked(3, max_m, 2048, 1024, [max_m] * 3, 16)


@pytest.mark.parametrize("expected_m", [20, 200])   # block M 64 and (probably) 128
def test_masked_max_m_not_a_multiple_of_block_m_keeps_other_groups_intact(expected_m):
    """max_m = 200: a group's last tile reaches into the next group's rows of the [G * max_m] view;
    only rows below masked_m may be written."""
    run_masked(5, 200, 1024, 512, [200, 199, 1, 65, 130], expected_m)


# Last-tile row counts around the 64-row edge between a 128-row tile's two consumer warpgroups (one
# more and one fewer than 64, whole tiles, an empty group): the second warpgroup's rows are cut off
# or absent, and only rows below the group's end may be stored. (The form of the kernel in which
# that warpgroup skips such a unit's MMAs, timed no faster, is on branch session28-pass-stages.)
LAST_TILE_EDGES = [1, 63, 64, 65, 127, 128, 129, 192, 193, 255, 0, 320]


def last_plan_block_m(plans):
    made = [plan for plan in plans.values() if plan is not sm90_grouped_gemm._UNSUPPORTED]
    return made[-1].spec.config.block_m


@pytest.mark.parametrize("num_sms", [0, 5])   # all SMs; 5, so each CTA runs many units in a row
def test_masked_last_tiles_on_both_sides_of_a_warpgroup(num_sms):
    dg_triton.set_num_sms(num_sms)
    try:
        run_masked(len(LAST_TILE_EDGES), 384, 1024, 1024, LAST_TILE_EDGES, 200)
        assert last_plan_block_m(sm90_grouped_gemm._plans) == 128, "the test needs 128-row tiles"
    finally:
        dg_triton.set_num_sms(0)


@pytest.mark.parametrize("ensure_zero_padding", [False, True])
def test_psum_last_tiles_on_both_sides_of_a_warpgroup(ensure_zero_padding):
    dg_triton.set_num_sms(5)
    try:
        run_contiguous_psum(LAST_TILE_EDGES, 1024, 1024, ensure_zero_padding, alignment=128, expected_m=200)
        assert last_plan_block_m(sm90_grouped_gemm._plans) == 128, "the test needs 128-row tiles"
    finally:
        dg_triton.set_num_sms(0)


def test_masked_in_a_cuda_graph_reads_masked_m_on_every_replay():
    num_groups, max_m, n, k = 6, 512, 2048, 1024
    a, b = randn(num_groups, max_m, k), randn(num_groups, n, k)
    d = nan_like((num_groups, max_m, n))
    masked_m = torch.tensor([10] * num_groups, dtype=torch.int32, device="cuda")
    graph = capture_graph(lambda: dg_triton.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 64))
    for counts in ([0, 1, 64, 65, 300, max_m], [max_m, 0, 0, 17, 128, 2], [0] * num_groups):
        d.fill_(NAN)
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        expected = reference_grouped.m_grouped_masked_reference(a, b, d, masked_m)
        meaningful = reference_grouped.masked_meaningful_rows(masked_m, max_m)
        if meaningful.any():
            check_close(d[meaningful], expected[meaningful], f"replay masked_m={counts}")
        assert is_nan(d[~meaningful]), f"replay masked_m={counts}: rows past masked_m written"


def test_contiguous_in_a_cuda_graph_reads_the_layout_on_every_replay():
    mk_layout.set_mk_alignment_for_contiguous_layout(128)
    n, k, num_groups, m = 1024, 512, 4, 1024
    a, b = randn(m, k), randn(num_groups, n, k)
    d = nan_like((m, n))
    layout = index_layout([256, 256, 256, 256], 128)
    graph = capture_graph(lambda: dg_triton.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout))
    for sizes in ([500, 0, 100, 200], [0, 0, 0, 1000], [1, 1, 1, 1]):
        new_layout = index_layout(sizes, 128)
        padded = torch.full((m,), -1, dtype=torch.int32, device="cuda")
        padded[:new_layout.numel()] = new_layout
        layout.copy_(padded)
        d.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        expected = reference_grouped.m_grouped_contiguous_reference(a, b, d, layout)
        meaningful = layout >= 0
        check_close(d[meaningful], expected[meaningful], f"replay sizes={sizes}")
        assert (d[~meaningful] == 0).all()


def test_masked_agrees_with_the_portable_kernel(monkeypatch):
    """Same inputs through the CUDA and the portable path (DG_BACKEND=triton): both accumulate in
    FP32 and round once, so the valid rows agree within the BF16 threshold (not bitwise: the K
    order differs), and both leave the same rows unwritten."""
    num_groups, max_m, n, k = 3, 256, 1024, 512
    a, b = randn(num_groups, max_m, k), randn(num_groups, n, k)
    masked_m = torch.tensor([256, 100, 3], dtype=torch.int32, device="cuda")
    ours, portable = nan_like((num_groups, max_m, n)), nan_like((num_groups, max_m, n))
    dg_triton.m_grouped_bf16_gemm_nt_masked(a, b, ours, masked_m, 128)
    monkeypatch.setenv("DG_BACKEND", "triton")
    dg_triton.m_grouped_bf16_gemm_nt_masked(a, b, portable, masked_m, 128)
    meaningful = reference_grouped.masked_meaningful_rows(masked_m, max_m)
    check_close(ours[meaningful], portable[meaningful], "CUDA vs portable")
    assert torch.equal(torch.isnan(ours.float()), torch.isnan(portable.float()))
