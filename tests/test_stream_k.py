"""Stream-K for the last wave (cuda_kernels/sm90/scheduler.cuh StreamKTileScheduler; the host's
mirror heuristics.sm90.stream_k_plan, and with_stream_k, which decides when the SM90 dense GEMMs
take it). CPU only: the device's partition is replayed here unit by unit as the kernel hands units
out, and checked for what the split epilogue relies on."""
import math
from dataclasses import replace

import pytest

from dg_triton.heuristics import sm90 as heuristics
from dg_triton.heuristics.sm90 import make_config, stream_k_plan, stream_k_pays


def device_units(num_tiles, k_blocks, grid, whole_tiles):
    """What StreamKTileScheduler::next hands each CTA, in order: (tile index in the scheduler's
    order, k_block_begin, k_block_end, split, num_pieces), written as the C++ is (integer math)."""
    sk_tiles = num_tiles - whole_tiles
    iterations = sk_tiles * k_blocks

    def first_iteration(cta):
        return cta * iterations // grid

    def owner(x):
        return ((x + 1) * grid - 1) // iterations

    units = {}
    for cta in range(grid):
        mine = []
        tile = cta
        while tile < whole_tiles:
            mine.append((tile, 0, k_blocks, 0, 1))
            tile += grid
        iteration, end = first_iteration(cta), first_iteration(cta + 1)
        while iteration < end:
            sk_tile = iteration // k_blocks
            tile_begin = sk_tile * k_blocks
            begin = iteration - tile_begin
            stop = min(k_blocks, end - tile_begin)
            first_owner = owner(tile_begin)
            pieces = owner(tile_begin + k_blocks - 1) - first_owner + 1
            mine.append((whole_tiles + sk_tile, begin, stop, cta - first_owner, pieces))
            iteration = tile_begin + stop
        units[cta] = mine
    return units


CASES = [
    # (tiles, k_blocks, grid): the M=4096 benchmark shapes' tilings on 132 SMs, then small grids
    # with many pieces per tile, one K block per CTA, a single split tile.
    (512, 112, 132), (384, 112, 132), (896, 256, 132), (896, 32, 132), (1024, 56, 132),
    (352, 56, 132), (1792, 128, 132), (1792, 16, 132),
    (16, 16, 7), (16, 16, 13), (23, 5, 4), (10, 3, 7), (133, 1, 132), (9, 40, 8), (7, 9, 7),
]


@pytest.mark.parametrize("tiles,k_blocks,grid", CASES)
def test_every_k_block_of_every_tile_is_computed_once_and_pieces_sum_in_k_order(tiles, k_blocks, grid):
    plan = stream_k_plan(tiles, k_blocks, grid)
    assert plan.whole_tiles % grid == 0 and plan.whole_tiles + plan.sk_tiles == tiles
    assert plan.sk_tiles < grid
    if plan.sk_tiles and plan.sk_tiles * k_blocks < grid:
        pytest.skip("the host refuses stream-K with a CTA of no K block (split_k_arguments)")
    units = device_units(tiles, k_blocks, grid, plan.whole_tiles)
    covered = {}
    for cta, mine in units.items():
        for tile, begin, stop, split, pieces in mine:
            assert 0 <= begin < stop <= k_blocks
            covered.setdefault(tile, []).append((begin, stop, split, pieces, cta))
    assert sorted(covered) == list(range(tiles))
    for tile, parts in covered.items():
        parts.sort()
        # The pieces tile K exactly, in split order 0, 1, ... (piece 0 holds K block 0), each on
        # its own CTA, and every piece agrees on the count: SplitKEpilogue sums exactly these.
        assert [p[0] for p in parts] == [0] + [p[1] for p in parts[:-1]]
        assert parts[-1][1] == k_blocks
        assert [p[2] for p in parts] == list(range(len(parts)))
        assert {p[3] for p in parts} == {len(parts)}
        assert len({p[4] for p in parts}) == len(parts)
        if tile < plan.whole_tiles:
            assert parts == [(0, k_blocks, 0, 1, tile % grid)]
        assert len(parts) <= max(plan.max_pieces, 1)
    # The workspace is sized for the largest split: some tile has exactly max_pieces pieces.
    if plan.sk_tiles:
        assert max(len(parts) for parts in covered.values()) == plan.max_pieces
    # Balance: the CTAs' stream-K ranges differ by at most one K block.
    spans = [sum(stop - begin for tile, begin, stop, _, _ in mine if tile >= plan.whole_tiles)
             for mine in units.values()]
    assert max(spans) - min(spans) <= 1


@pytest.fixture
def stream_k_on(monkeypatch):
    """The heuristics with STREAM_K on (it is off by default: measured slower on the H200)."""
    monkeypatch.setattr(heuristics, "STREAM_K", True)


def test_stream_k_is_off_by_default():
    assert not heuristics.STREAM_K and not heuristics.STREAM_K_PARTIAL_WAVE
    assert not heuristics.choose_bf16_gemm_config(4096, 4096, 7168, 2, 132).stream_k
    assert not heuristics.choose_fp8_gemm_config(4096, 2112, 7168, 2, 132).stream_k


def test_stream_k_is_taken_for_the_partial_last_wave_of_long_k_shapes(stream_k_on):
    # M = 4096: 128 x k tiles on 132 SMs leave the last wave part-filled.
    bf16 = heuristics.choose_bf16_gemm_config(4096, 4096, 7168, 2, 132)
    assert bf16.stream_k and bf16.num_splits == 1 and bf16.cluster_size == 1
    fp8 = heuristics.choose_fp8_gemm_config(4096, 2112, 7168, 2, 132)
    assert fp8.stream_k
    # Not taken: a whole number of waves, fewer tiles than SMs (split-K's domain), short K
    # (32768x512: 8 K blocks a tile), skip-head-mid (its store has no column remap).
    whole_waves = make_config(128 * 132, 256, 128, 256, 1, 7168, 2, 132)
    assert not stream_k_pays(whole_waves, 128 * 132, 256, 112)
    assert not heuristics.choose_bf16_gemm_config(64, 2112, 7168, 2, 132).stream_k
    assert not heuristics.choose_bf16_gemm_config(4096, 32768, 512, 2, 132).stream_k
    assert not heuristics.choose_fp8_gemm_config(4096, 4096, 7168, 2, 132,
                                                 block_n_divides=128).stream_k


def test_stream_k_needs_half_a_tile_of_k_blocks_per_cta(stream_k_on):
    config = make_config(4096, 24576, 128, 256, 1, 1536, 2, 132)
    tiles = 32 * 96                       # 3072 = 23 waves + 36 tiles
    assert tiles % 132 == 36
    # 36 tiles x 24 K blocks over 132 CTAs is 6.5 K blocks each: under half a tile.
    assert not stream_k_pays(config, 4096, 24576, 24)
    # 1792 tiles = 13 waves + 76: 76 x 16 / 132 = 9.2 K blocks each, at least 8.
    config = make_config(4096, 7168, 128, 128, 1, 2048, 2, 132)
    assert stream_k_pays(config, 4096, 7168, 16)


def test_a_single_partial_wave_takes_every_sm_only_where_allowed(stream_k_on, monkeypatch):
    # 112 tiles of 64x128 (M = 128, N = 7168): the grid is the 112 tiles, a whole "wave".
    config = make_config(128, 7168, 64, 128, 1, 16384, 2, 132)
    assert config.num_sms == 112 and not stream_k_pays(config, 128, 7168, 128, 132)
    monkeypatch.setattr(heuristics, "STREAM_K_PARTIAL_WAVE", True)
    taken = heuristics.with_stream_k(config, 128, 7168, 128, 132)
    assert taken.stream_k and taken.num_sms == 132


def test_no_stream_k_with_split_k_clusters_or_256_row_tiles(stream_k_on):
    base = make_config(4096, 4096, 128, 128, 1, 7168, 2, 132)
    assert stream_k_pays(base, 4096, 4096, 56)
    assert not stream_k_pays(replace(base, num_splits=2), 4096, 4096, 56)
    assert not stream_k_pays(replace(base, cluster_m=2), 4096, 4096, 56)
    assert not stream_k_pays(replace(base, block_m=256), 4096, 4096, 56)


def test_stream_k_workspace_holds_every_piece_of_every_split_tile():
    import torch
    from dg_triton.kernels.sm90_bf16_gemm import split_k_arguments

    config = replace(make_config(200, 1024, 128, 128, 1, 1000, 4, 132), num_sms=7, stream_k=True)
    k_blocks = math.ceil(1000 / 64)
    args, buffers = split_k_arguments(config, 200, 1024, k_blocks, torch.device("cpu"), slot=4)
    plan = stream_k_plan(16, k_blocks, 7)
    assert args == (plan.whole_tiles, 0, 0) == (14, 0, 0)
    assert buffers.workspace_elements == plan.max_pieces * plan.sk_tiles * 128 * 128
    assert buffers.counter_elements == plan.sk_tiles * 2
    # A grid with more CTAs than the stream-K tiles' K blocks is refused, not run wrong.
    tiny = replace(config, num_sms=13)
    with pytest.raises(ValueError, match="at least one K block per CTA"):
        split_k_arguments(tiny, 200, 1024, 2, torch.device("cpu"), slot=4)
