"""Tile choice of the masked FP8 grouped GEMM for decode (expected m <= 64): block N by how well
the tiles fill their rounds of SMs (heuristics.sm90._masked_fp8_decode_config), measured on the
H200 against the cost model's old pick (benchmarks/NOTES.md, session 12). CPU only."""
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
    # expected m 192 and 1024: not decode, block M may be 128
    assert choose(32, 6144, 7168, expected=192).block_m == 128
    assert choose(6, 6144, 7168, expected=1024).block_m == 128
