"""Tile choice of the masked FP8 grouped GEMM: for decode (expected m <= 64) block N by how well
the tiles fill their rounds of SMs (heuristics.sm90._masked_fp8_decode_config), measured on the
H200 against the cost model's old pick (benchmarks/NOTES.md, session 12); for groups of a few
64-row units the column-split 64x256 tile (measured on an H100, session 32). CPU only."""
import math

import pytest

from dg_triton.heuristics import sm90 as heuristics
from shapes import GROUPED_MASKED_MAX_M, GROUPED_NK

SMS = 132


def choose(groups, n, k, expected=20):
    return heuristics.choose_m_grouped_fp8_config(heuristics.GROUPED_MASKED, groups,
                                                  int(expected * 1.2), GROUPED_MASKED_MAX_M, n, k, SMS)


def filled(groups, n, block_n):
    tiles = groups * math.ceil(n / block_n)
    return tiles / (math.ceil(tiles / SMS) * SMS)


@pytest.mark.parametrize("groups", [32, 6])
@pytest.mark.parametrize("n,k", GROUPED_NK)
def test_decode_tiles_fill_their_rounds_at_least_as_well_as_every_other_candidate(groups, n, k):
    config = choose(groups, n, k)
    assert config.block_m == 64
    assert config.block_n in heuristics._MASKED_DECODE_BLOCK_NS
    mine = math.floor(filled(groups, n, config.block_n) * 50)
    for other in heuristics._MASKED_DECODE_BLOCK_NS:
        assert mine >= math.floor(filled(groups, n, other) * 50)
    assert config.num_sms <= groups * math.ceil(GROUPED_MASKED_MAX_M / 64) * math.ceil(n / config.block_n)


def test_decode_tiles_are_the_measured_winners_or_within_a_few_percent_of_them():
    # probe_masked.py, 2026-12-02 (results/probe_masked-h200.txt): at 32 groups 128 was fastest on
    # all four shapes; at 6 groups the pick is 96 or 128 (best, or within 3.4 % of the best).
    assert {choose(32, n, k).block_n for n, k in GROUPED_NK} == {128}
    assert [choose(6, n, k).block_n for n, k in GROUPED_NK] == [96, 128, 96, 96]


def test_narrow_n_keeps_the_cost_models_tiles_no_wider_than_n():
    for n in (16, 48, 96):
        config = choose(4, n, 7168)
        assert config.block_n <= -(-n // 16) * 16


def test_prefill_masked_shapes_keep_the_cost_model():
    # expected m 1024: not decode, block M may be 128
    assert choose(6, 6144, 7168, expected=1024).block_m == 128
    assert not choose(6, 6144, 7168, expected=1024).split_columns


@pytest.mark.parametrize("n,k", GROUPED_NK)
def test_groups_of_a_few_64_row_units_take_the_column_split_tile(n, k):
    # probe_grouped_tiles.py, 2026-12-07 (H100): 64x256c 1.03-1.04x the model's 128x128 at 32x192
    config = choose(32, n, k, expected=192)
    assert (config.block_m, config.block_n, config.split_columns) == (64, 256, True)
    assert config.num_threads == 384
    assert config.num_stages == 5   # one-slab staging: 4 stages spilled with K compiled in
    assert config.num_sms <= 32 * math.ceil(GROUPED_MASKED_MAX_M / 64) * math.ceil(n / 256)


@pytest.mark.parametrize("expected,n", [(64, 4096), (257, 4096), (192, 2048), (1024, 7168)])
def test_the_column_split_rule_stops_where_it_was_not_measured_to_win(expected, n):
    # expected_m 64 is decode (64x96/64x128 tiles); past 256 rows and below N 4096 the model decides
    config = heuristics.choose_m_grouped_fp8_config(heuristics.GROUPED_MASKED, 32, expected,
                                                    GROUPED_MASKED_MAX_M, n, 4096, SMS)
    assert not config.split_columns


def test_the_column_split_rule_is_fp8_only():
    config = heuristics.choose_m_grouped_bf16_config(heuristics.GROUPED_MASKED, 32, 230,
                                                     GROUPED_MASKED_MAX_M, 6144, 7168, SMS)
    assert not config.split_columns
