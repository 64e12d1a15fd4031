"""M-grouped FP8 GEMMs on an SM90 GPU (the public layer dg_triton/grouped_fp8.py and the SM90 kernels
behind it) against dg_triton.reference_grouped's FP8 references, with API.md 8's FP8 threshold
(calc_diff < 1e-3) on the rows that carry meaning, and exact checks of what must and must not be
written. Every output is poisoned with NaN first, so "untouched" means "still NaN":

- contiguous, index layout: -1 padding rows are written as 0 (A's padding rows are 0, as upstream's
  tests make them, API.md 3.4);
- contiguous, psum layout: gap rows [psum[g], align(psum[g], alignment)) are 0 or untouched (API.md
  3.4: ensure_zero_padding is ignored on SM90; A's gap rows hold finite values, so a gap row that
  were computed would show); rows past the last group's end are untouched;
- masked: rows at or past masked_m[g] are unspecified only up to the 128-row block boundary (API.md
  3.5; masked BLOCK_M is 64 or 128, API.md 7); every row past it is untouched.

Operands are quantized with our casts, A per token (1x128), each expert's B per 128x128 block; the
inputs' magnitudes vary by up to 2^3 either way from one scale group to the next
(test_fp8_gemm_kernel_gpu.scale_groups_apart), so a kernel applying a scale to the wrong group
fails. The main shape tests also compare with the unquantized BF16 inputs (API.md 8's reference,
FP8 error included). Shapes: API.md 8's grouped lists (tests/shapes.py), the contiguous expected m
divided by GROUPED_GPU_TEST_M_DIVISOR so each case runs in about a second.
"""

import pytest
import torch

from shapes import (GROUPED_CONTIGUOUS_GM, GROUPED_GPU_TEST_M_DIVISOR, GROUPED_MASKED_GM,
                    GROUPED_MASKED_MAX_M, GROUPED_NK)

pytestmark = pytest.mark.gpu
if not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9):
    pytest.skip("needs an SM90 GPU", allow_module_level=True)

import dg_triton  # noqa: E402
from dg_triton import reference_grouped  # noqa: E402
from dg_triton.kernels import sm90_grouped_gemm  # noqa: E402
from dg_triton.testing import calc_diff, capture_graph  # noqa: E402
from dg_triton.utils import layout as mk_layout  # noqa: E402
from dg_triton.utils.math import align, ceil_div  # noqa: E402
from test_fp8_gemm_kernel_gpu import scale_groups_apart  # noqa: E402
from test_grouped_gemm_gpu import (LAST_TILE_EDGES, group_sizes, index_layout, is_nan,  # noqa: E402
                                   last_plan_block_m, nan_like, psum_layout,
                                   seed_and_settings)  # noqa: F401 (autouse fixture: seed, backend, alignment)

THRESHOLD = 1e-3
MASKED_BLOCK_BOUNDARY = 128


def check_close(out, expected, what):
    assert torch.isfinite(out.float()).all(), f"{what}: unwritten (NaN) or non-finite elements"
    diff = float(calc_diff(out, expected))
    assert diff < THRESHOLD, f"{what}: calc_diff {diff:.3g} >= {THRESHOLD}"


def quantized_a(rows, k, zero_rows=None, tma_aligned_sf=False):
    """(A bf16 [rows, K], (A fp8, sfa fp32 [rows, ceil(K/128)])), per token."""
    a = scale_groups_apart(rows, k, 1) if rows else torch.empty(0, k, device="cuda", dtype=torch.bfloat16)
    if zero_rows is not None:
        a[zero_rows] = 0
    return a, dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=tma_aligned_sf)


def quantized_b(num_groups, n, k):
    """(B bf16 [G, N, K], (B fp8 [G, N, K], sfb fp32 [G, ceil(N/128), ceil(K/128)])), per expert and block."""
    b = torch.stack([scale_groups_apart(n, k, 128) for _ in range(num_groups)])
    pairs = [dg_triton.per_block_cast_to_fp8(b[g], False) for g in range(num_groups)]
    return b, (torch.stack([q for q, _ in pairs]), torch.stack([sf for _, sf in pairs]))


def run_contiguous_index(sizes, n, k, alignment=128, tma_aligned_sfa=False, unquantized=False, nn_alias=False):
    """The index layout with A's padding rows 0; checks every row of d."""
    mk_layout.set_mk_alignment_for_contiguous_layout(alignment)
    layout = index_layout(sizes, alignment)
    m = layout.numel()
    padding = layout < 0
    a, a_fp8 = quantized_a(m, k, padding, tma_aligned_sfa)
    b, b_fp8 = quantized_b(len(sizes), n, k)
    d = nan_like((m, n))
    expected = reference_grouped.m_grouped_fp8_contiguous_reference(a_fp8, b_fp8, d, layout)
    if nn_alias:
        dg_triton.m_grouped_fp8_gemm_nn_contiguous(a_fp8, (b_fp8[0].mT, b_fp8[1].mT), d, layout)
    else:
        dg_triton.m_grouped_fp8_gemm_nt_contiguous(a_fp8, b_fp8, d, layout)
    what = f"index sizes={sizes} n={n} k={k} alignment={alignment}"
    meaningful = ~padding
    if meaningful.any():
        check_close(d[meaningful], expected[meaningful], what)
        if unquantized:
            bf16 = reference_grouped.m_grouped_contiguous_reference(a, b, d, layout)
            check_close(d[meaningful], bf16[meaningful], f"{what} vs the unquantized inputs")
    assert (d[padding] == 0).all(), f"{what}: -1 padding rows are not 0"


def run_contiguous_psum(sizes, n, k, alignment=128, extra_rows=200, expected_m=None):
    mk_layout.set_mk_alignment_for_contiguous_layout(alignment)
    psum = psum_layout(sizes, alignment)
    last_end = int(psum[-1])
    m = align(last_end, alignment) + extra_rows
    meaningful = reference_grouped.contiguous_meaningful_rows(psum, m, True, alignment)
    _, a_fp8 = quantized_a(m, k)   # gap rows and rows past the end hold finite values
    _, b_fp8 = quantized_b(len(sizes), n, k)
    d = nan_like((m, n))
    expected = reference_grouped.m_grouped_fp8_contiguous_reference(a_fp8, b_fp8, d, psum, True, alignment,
                                                                     ensure_zero_padding=False)
    dg_triton.m_grouped_fp8_gemm_nt_contiguous(a_fp8, b_fp8, d, psum, use_psum_layout=True,
                                               expected_m_for_psum_layout=expected_m)
    what = f"psum sizes={sizes} ends={psum.tolist()} n={n} k={k} alignment={alignment}"
    if meaningful.any():
        check_close(d[meaningful], expected[meaningful], what)
    gaps = ~meaningful
    gaps[last_end:] = False
    gap_values = d[gaps].float()
    assert ((gap_values == 0) | torch.isnan(gap_values)).all(), f"{what}: gap rows neither 0 nor untouched"
    assert is_nan(d[last_end:]), f"{what}: rows past the last group's end were written"


def quantized_masked_a(num_groups, max_m, k, tma_aligned_sfa=False):
    a, (a_q, sfa) = quantized_a(num_groups * max_m, k)
    sfa = sfa.reshape(num_groups, max_m, ceil_div(k, 128))
    if tma_aligned_sfa:
        sfa = dg_triton.get_mn_major_tma_aligned_tensor(sfa)
    return a.view(num_groups, max_m, k), (a_q.view(num_groups, max_m, k), sfa)


def check_masked(d, expected, masked_m, max_m, what, bf16_expected=None):
    meaningful = reference_grouped.masked_meaningful_rows(masked_m, max_m)
    if meaningful.any():
        check_close(d[meaningful], expected[meaningful], what)
        if bf16_expected is not None:
            check_close(d[meaningful], bf16_expected[meaningful], f"{what} vs the unquantized inputs")
    boundary = torch.clamp(ceil_div(masked_m, MASKED_BLOCK_BOUNDARY) * MASKED_BLOCK_BOUNDARY, max=max_m)
    may_be_written = reference_grouped.masked_meaningful_rows(boundary, max_m)
    assert is_nan(d[~may_be_written]), f"{what}: rows past masked_m's {MASKED_BLOCK_BOUNDARY}-row block written"


def run_masked(num_groups, max_m, n, k, counts, expected_m, tma_aligned_sfa=False, unquantized=False):
    a, a_fp8 = quantized_masked_a(num_groups, max_m, k, tma_aligned_sfa)
    b, b_fp8 = quantized_b(num_groups, n, k)
    d = nan_like((num_groups, max_m, n))
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    expected = reference_grouped.m_grouped_fp8_masked_reference(a_fp8, b_fp8, d, masked_m)
    dg_triton.m_grouped_fp8_gemm_nt_masked(a_fp8, b_fp8, d, masked_m, expected_m)
    bf16 = reference_grouped.m_grouped_masked_reference(a, b, d, masked_m) if unquantized else None
    check_masked(d, expected, masked_m, max_m, f"G={num_groups} max_m={max_m} n={n} k={k} masked_m={counts}", bf16)
    return d, expected, masked_m


# ---- contiguous --------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,k", GROUPED_NK)
@pytest.mark.parametrize("num_groups,expected", GROUPED_CONTIGUOUS_GM)
def test_contiguous_index_layout_matches_reference_on_api_shapes(num_groups, expected, n, k):
    sizes = group_sizes(num_groups, expected // GROUPED_GPU_TEST_M_DIVISOR)
    run_contiguous_index(sizes, n, k, unquantized=True)


@pytest.mark.parametrize("n,k", GROUPED_NK)
@pytest.mark.parametrize("num_groups,expected", GROUPED_CONTIGUOUS_GM)
def test_contiguous_psum_layout_matches_reference_on_api_shapes(num_groups, expected, n, k):
    expected //= GROUPED_GPU_TEST_M_DIVISOR
    run_contiguous_psum(group_sizes(num_groups, expected), n, k, expected_m=expected)


def test_sfa_in_the_kernel_layout_or_as_the_cast_returns_it_gives_the_same_semantics():
    run_contiguous_index([300, 77, 129], 1024, 896, tma_aligned_sfa=True)
    run_contiguous_index([300, 77, 129], 1024, 896, tma_aligned_sfa=False)


def test_nn_alias_takes_the_mT_of_a_k_major_b():
    run_contiguous_index([333, 0, 129], 1024, 512, nn_alias=True)


@pytest.mark.parametrize("layout", ["index", "psum"])
def test_contiguous_with_empty_experts(layout):
    sizes = [0, 260, 0, 0, 1, 128, 0]
    if layout == "index":
        run_contiguous_index(sizes, 2048, 1024)
    else:
        run_contiguous_psum(sizes, 2048, 1024)
        run_contiguous_psum([0, 0, 0], 512, 256)   # no rows at all: nothing written


@pytest.mark.parametrize("layout", ["index", "psum"])
def test_contiguous_one_expert_holds_all_tokens(layout):
    sizes = [0, 0, 4001, 0, 0, 0, 0, 0]
    if layout == "index":
        run_contiguous_index(sizes, 4096, 2048)
    else:
        run_contiguous_psum(sizes, 4096, 2048)


def test_contiguous_whole_padding_blocks_between_experts_are_zero():
    """Whole 128-row blocks of -1 between experts and a -1 row inside an expert's block."""
    mk_layout.set_mk_alignment_for_contiguous_layout(128)
    n, k, num_groups = 1024, 512, 3
    layout = torch.tensor([0] * 100 + [-1] * 28 + [-1] * 256 + [1] * 128 + [2] * 60 + [-1] * 68,
                          dtype=torch.int32, device="cuda")
    layout[420] = -1
    m = layout.numel()
    padding = layout < 0
    _, a_fp8 = quantized_a(m, k, padding)
    _, b_fp8 = quantized_b(num_groups, n, k)
    d = nan_like((m, n))
    expected = reference_grouped.m_grouped_fp8_contiguous_reference(a_fp8, b_fp8, d, layout)
    dg_triton.m_grouped_fp8_gemm_nt_contiguous(a_fp8, b_fp8, d, layout)
    check_close(d[~padding], expected[~padding], "padding blocks")
    assert (d[padding] == 0).all(), "-1 rows must be 0"


def test_contiguous_with_no_rows_is_a_no_op():
    _, b_fp8 = quantized_b(2, 256, 256)
    a_fp8 = (torch.empty(0, 256, device="cuda", dtype=torch.float8_e4m3fn),
             torch.empty(0, 2, device="cuda"))
    d = nan_like((0, 256))
    dg_triton.m_grouped_fp8_gemm_nt_contiguous(a_fp8, b_fp8, d, torch.empty(0, dtype=torch.int32, device="cuda"))
    torch.cuda.synchronize()


# ---- masked ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,k", GROUPED_NK)
@pytest.mark.parametrize("num_groups,expected", GROUPED_MASKED_GM)
def test_masked_matches_reference_on_api_shapes(num_groups, expected, n, k):
    counts = [min(GROUPED_MASKED_MAX_M, v) for v in group_sizes(num_groups, expected)]
    max_m = min(GROUPED_MASKED_MAX_M, align(max(counts) + 1, 128) + 128)
    run_masked(num_groups, max_m, n, k, counts, int(expected * 1.2), unquantized=True)


def test_masked_with_masked_m_zero_and_max_m():
    max_m = 384
    run_masked(4, max_m, 2048, 1024, [0, max_m, 0, max_m], 256)
    run_masked(3, max_m, 2048, 1024, [0, 0, 0], 16)
    run_masked(3, max_m, 2048, 1024, [max_m] * 3, 16, tma_aligned_sfa=True)


def test_masked_max_m_not_a_multiple_of_the_block_keeps_other_groups_intact():
    """max_m = 200: a group's last block reaches into the next group's rows of the [G * max_m] view."""
    run_masked(5, 200, 1024, 512, [200, 199, 1, 65, 130], 20)
    run_masked(5, 200, 1024, 512, [200, 199, 1, 65, 130], 200)


@pytest.mark.parametrize("num_sms", [0, 5])   # all SMs; 5, so each CTA runs many units in a row
def test_masked_last_tiles_on_both_sides_of_a_warpgroup(num_sms):
    """Last tiles of 1 to 320 rows at block M 128 (test_grouped_gemm_gpu.LAST_TILE_EDGES), on both
    sides of the second consumer warpgroup's first row."""
    dg_triton.set_num_sms(num_sms)
    try:
        run_masked(len(LAST_TILE_EDGES), 384, 1024, 1024, LAST_TILE_EDGES, 200)
        assert last_plan_block_m(sm90_grouped_gemm._fp8_plans) == 128, "the test needs 128-row tiles"
    finally:
        dg_triton.set_num_sms(0)


def test_psum_last_tiles_on_both_sides_of_a_warpgroup():
    dg_triton.set_num_sms(5)
    try:
        run_contiguous_psum(LAST_TILE_EDGES, 1024, 1024, alignment=128, expected_m=200)
        assert last_plan_block_m(sm90_grouped_gemm._fp8_plans) == 128, "the test needs 128-row tiles"
    finally:
        dg_triton.set_num_sms(0)


def replay_masked_graph(expected_m, counts_per_replay, num_groups=6, max_m=512, n=2048, k=1024):
    """Captures one masked call in a CUDA graph, then replays it once per entry of
    counts_per_replay (masked_m changed in place between replays), checking each replay's output
    (poisoned first); returns D as the last replay left it."""
    _, a_fp8 = quantized_masked_a(num_groups, max_m, k, tma_aligned_sfa=True)
    _, b_fp8 = quantized_b(num_groups, n, k)
    d = nan_like((num_groups, max_m, n))
    masked_m = torch.tensor([10] * num_groups, dtype=torch.int32, device="cuda")
    graph = capture_graph(lambda: dg_triton.m_grouped_fp8_gemm_nt_masked(a_fp8, b_fp8, d, masked_m, expected_m))
    for counts in counts_per_replay:
        d.fill_(float("nan"))
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        expected = reference_grouped.m_grouped_fp8_masked_reference(a_fp8, b_fp8, d, masked_m)
        check_masked(d, expected, masked_m, max_m, f"replay masked_m={counts}")
    return d


def test_masked_in_a_cuda_graph_reads_masked_m_on_every_replay():
    max_m = 512
    replay_masked_graph(64, ([0, 1, 64, 65, 300, max_m], [max_m, 0, 0, 17, 128, 2], [0] * 6, [max_m] * 6),
                        max_m=max_m)


# ---- column-split tiles (fp8_gemm.cuh kSplitColumns) ---------------------------------------------

@pytest.fixture
def forced_split_columns(monkeypatch):
    """Makes the masked FP8 plans of the test use a column-split tile: call with (block_n, stages)."""
    from dg_triton.heuristics import sm90 as heuristics

    def force(block_n, num_stages=None):
        config = heuristics.make_fp8_split_columns_config(block_n, 132, num_stages)
        assert config is not None

        def chosen(kind, num_groups, rows_per_group, rows, n, k, num_sms, mk_alignment=None):
            return heuristics._grid_within_tiles(config, num_groups, rows, n, num_sms)
        monkeypatch.setattr(sm90_grouped_gemm, "choose_m_grouped_fp8_config", chosen)
        sm90_grouped_gemm._fp8_plans.clear()
    yield force
    sm90_grouped_gemm._fp8_plans.clear()


def check_split_last_tile(d, expected, masked_m, block_n, what):
    """Stricter than check_masked for a column-split tile: no row at or past masked_m is written
    (the tile's last unit stores only its valid rows), and each warpgroup's column half of the
    last column tile matches on its own (an error confined there would hide in the global diff)."""
    meaningful = reference_grouped.masked_meaningful_rows(masked_m, d.shape[1])
    assert is_nan(d[~meaningful]), f"{what}: rows at or past masked_m written"
    n = d.shape[2]
    last = (ceil_div(n, block_n) - 1) * block_n
    for lo in (last, last + block_n // 2):
        if lo < n:
            check_close(d[meaningful][:, lo:min(n, lo + block_n // 2)],
                        expected[meaningful][:, lo:min(n, lo + block_n // 2)],
                        f"{what}: columns {lo}.. of the last tile")


@pytest.mark.parametrize("num_sms", [0, 5])
@pytest.mark.parametrize("block_n,num_stages", [(256, None), (256, 4), (192, None), (128, 6)])
def test_masked_column_split_tiles_match_reference(forced_split_columns, block_n, num_stages, num_sms):
    """Last tiles of every size around the 64-row unit; N whose last tile has its first half
    partly inside N and its second wholly past it, then its second half partly inside; the API
    shapes' N and K; on all SMs and on 5 (each CTA then runs many units in a row)."""
    forced_split_columns(block_n, num_stages)
    dg_triton.set_num_sms(num_sms)
    try:
        for n, k in ((5 * block_n + block_n // 4, 1024), (5 * block_n + block_n // 2 + 32, 640)):
            d, expected, masked_m = run_masked(len(LAST_TILE_EDGES), 384, n, k, LAST_TILE_EDGES, 200)
            check_split_last_tile(d, expected, masked_m, block_n, f"n={n} k={k}")
            plan = list(sm90_grouped_gemm._fp8_plans.values())[-1]
            assert plan.spec.config.split_columns and plan.spec.config.block_n == block_n
        d, expected, masked_m = run_masked(4, 320, 4096, 7168, [1, 192, 230, 320], 230, tma_aligned_sfa=True)
        check_split_last_tile(d, expected, masked_m, block_n, "n=4096 k=7168")
    finally:
        dg_triton.set_num_sms(0)


def test_masked_column_split_tiles_in_a_cuda_graph(forced_split_columns):
    forced_split_columns(256)
    max_m = 512
    d = replay_masked_graph(200, ([0, 1, 64, 65, 300, max_m], [max_m, 0, 0, 17, 128, 2]), max_m=max_m)
    # Rows at or past masked_m are not written at all (the last unit stores its rows by plain stores).
    assert is_nan(d[1]) and is_nan(d[3, 17:]) and is_nan(d[5, 2:])
