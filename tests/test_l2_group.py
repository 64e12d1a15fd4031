"""The L2 group of the dense GEMMs' persistent tile order: heuristics.sm90.tile_order_hbm_bytes
against a tile-by-tile simulation of the scheduler's order (scheduler.cuh swizzle) and of the
reuse rule it states, and the choice with_l2_group makes from it."""
import math
import random
from dataclasses import replace

import pytest

from dg_triton.heuristics import sm90


def _scheduler_order(rows: int, cols: int, group_rows: int):
    """(row, col) of every unit in PersistentTileScheduler's order, written out as in the kernel."""
    for index in range(rows * cols):
        group = index // (group_rows * cols)
        first_row = group * group_rows
        rows_in_group = min(rows - first_row, group_rows)
        in_group = index - group * group_rows * cols
        yield first_row + in_group % rows_in_group, in_group // rows_in_group


def _simulated_bytes(m, n, k, block_m, block_n, group_m, grid, element, cluster_m=1, cluster_n=1,
                     l2_bytes=sm90.L2_REUSE_BYTES, max_waves=None):
    """Tile by tile: a wave reads its distinct A block rows and B block columns; a block is a hit
    when the blocks of the waves since its last read, this one included, fit in l2_bytes."""
    rows, cols = math.ceil(m / block_m) // cluster_m, math.ceil(n / block_n) // cluster_n
    per_wave = grid // (cluster_m * cluster_n)
    order = list(_scheduler_order(rows, cols, max(1, group_m // cluster_m)))
    size = {"a": block_m * cluster_m * k * element, "b": block_n * cluster_n * k * element}
    waves = [{("a", r) for r, _ in order[s:s + per_wave]} | {("b", c) for _, c in order[s:s + per_wave]}
             for s in range(0, len(order), per_wave)][:max_waves]
    last_read, total = {}, 0
    for w, blocks in enumerate(waves):
        for block in blocks:
            since = set().union(*waves[last_read[block] + 1:w + 1]) if block in last_read else None
            if since is None or sum(size[kind] for kind, _ in since) > l2_bytes:
                total += size[block[0]]
            last_read[block] = w
    return total


def test_the_closed_form_equals_a_tile_by_tile_simulation():
    rng = random.Random(3)
    for _ in range(150):
        block_m, block_n = rng.choice([64, 128, 256]), rng.choice([16, 64, 96, 144, 176, 256])
        cluster_m, cluster_n = rng.choice([(1, 1), (2, 1), (1, 2)])
        m = rng.randint(1, 40) * block_m * cluster_m - rng.randint(0, block_m - 1)
        n = rng.randint(1, 40) * block_n * cluster_n - rng.randint(0, block_n - 1)
        group_m, grid = rng.choice([1, 2, 3, 8, 16, 32]), rng.choice([2, 8, 66, 132])
        k, element = rng.choice([64, 512, 7168]), rng.choice([1, 2])
        l2_bytes = rng.choice([0, 1e6, sm90.L2_REUSE_BYTES, 1e9])
        max_waves = rng.choice([None, 1, 3])
        args = (m, n, k, block_m, block_n, group_m, grid, element, cluster_m, cluster_n, l2_bytes, max_waves)
        assert sm90.tile_order_hbm_bytes(*args) == _simulated_bytes(*args), args


@pytest.mark.parametrize("m,n,k,block_m,block_n,group_m,element,measured_mb,tolerance", [
    # Nsight Compute DRAM reads on the H200, 132 SMs, one call after the profiler's cache flush
    # (results/ncu_l2_group-h200.txt, 2026-12-03; the 256x128 FP8 point from
    # results/ncu_fp8_256_clusters-h200.txt, 2026-12-02)
    (4096, 4096, 7168, 128, 256, 8, 2, 327, 0.01), (4096, 4096, 7168, 128, 256, 16, 2, 261, 0.01),
    (4096, 4096, 7168, 128, 256, 1, 2, 299, 0.01), (4096, 4096, 7168, 128, 256, 32, 2, 305, 0.01),
    (4096, 32768, 512, 128, 256, 32, 2, 38, 0.05), (4096, 7168, 16384, 128, 256, 16, 2, 1100, 0.16),
    (4096, 4096, 7168, 128, 128, 16, 1, 105, 0.16), (4096, 4096, 7168, 256, 128, 8, 1, 124, 0.16),
    (4096, 4096, 7168, 128, 128, 8, 1, 146, 0.16),
    (4096, 32768, 512, 128, 256, 2, 2, 404, 0.27),   # the worst: 509 MB modelled
])
def test_the_model_against_the_measured_dram_reads(m, n, k, block_m, block_n, group_m, element,
                                                   measured_mb, tolerance):
    modelled = sm90.tile_order_hbm_bytes(m, n, k, block_m, block_n, group_m, 132, element) / 1e6
    assert modelled == pytest.approx(measured_mb, rel=tolerance)


def test_short_k_wide_n_takes_the_widest_band_that_halves_the_bytes():
    one_wave = sm90.make_config(4096, 576, 128, 144, 1, 512, 2, 132)   # 128 tiles: one wave
    assert sm90.with_l2_group(one_wave, 4096, 576, 512, 2) is one_wave
    # short K, wide N: A stays in L2 while the band of 32 block rows sweeps B once
    wide = sm90.make_config(4096, 32768, 128, 256, 1, 512, 2, 132)
    chosen = sm90.with_l2_group(wide, 4096, 32768, 512, 2)
    fetched = {g: sm90.tile_order_hbm_bytes(4096, 32768, 512, 128, 256, g, 132, 2,
                                            max_waves=sm90.L2_GROUP_MODEL_WAVES) for g in sm90.L2_GROUPS}
    assert chosen == replace(wide, group_m=32) and fetched[32] == min(fetched.values())
    assert fetched[32] <= sm90.L2_GROUP_MIN_SAVING * fetched[8]


def test_long_k_and_split_k_keep_group_8():
    # at K = 7168 group 16 fetches a fifth less, but measured no faster: left alone above L2_GROUP_MAX_K
    square = sm90.make_config(4096, 4096, 128, 256, 1, 7168, 2, 132)
    assert sm90.tile_order_hbm_bytes(4096, 4096, 7168, 128, 256, 16, 132, 2) < \
        sm90.tile_order_hbm_bytes(4096, 4096, 7168, 128, 256, 8, 132, 2)
    assert sm90.with_l2_group(square, 4096, 4096, 7168, 2) is square
    split = sm90.make_config(128, 32768, 64, 64, 2, 1024, 2, 132)
    assert split.num_splits == 2 and sm90.with_l2_group(split, 128, 32768, 1024, 2) is split


def test_the_model_bounds_its_host_time_on_huge_problems():
    import time
    config = sm90.make_config(65536, 32768, 128, 256, 1, 512, 2, 132)
    start = time.perf_counter()
    sm90.with_l2_group(config, 65536, 32768, 512, 2)
    assert time.perf_counter() - start < 0.5


def test_untuned_shapes_take_the_model_and_tuned_entries_their_own_group(monkeypatch):
    assert sm90.tuned_config(8192, 24576, 1536, 2, True, 132) is None
    assert sm90.choose_bf16_gemm_config(8192, 24576, 1536, 2, 132).group_m == 32
    assert sm90.choose_fp8_gemm_config(8192, 24576, 1536, 2, 132).group_m == 32
    # the shipped entries name the group they were measured at (probe_l2_group.py)
    assert sm90.choose_bf16_gemm_config(4096, 32768, 512, 2, 132).group_m == 32
    assert sm90.choose_fp8_gemm_config(4096, 24576, 1536, 2, 132).group_m == 32
    key = (8192, 24576, 1536, 2, True, 132)
    entry = {"block_m": 128, "block_n": 256, "num_splits": 1}
    monkeypatch.setattr(sm90, "_tuned_table", lambda: {key: entry})
    assert sm90.choose_bf16_gemm_config(8192, 24576, 1536, 2, 132).group_m == 8   # swept at 8
    monkeypatch.setattr(sm90, "_tuned_table", lambda: {key: {**entry, "group_m": 4}})
    assert sm90.choose_bf16_gemm_config(8192, 24576, 1536, 2, 132).group_m == 4
    monkeypatch.setattr(sm90, "_tuned_table", lambda: {key: {**entry, "group_m": "16"}})
    with pytest.raises(ValueError, match="group_m must be an int"):
        sm90.choose_bf16_gemm_config(8192, 24576, 1536, 2, 132)
