"""with_pipeline_depth (heuristics.sm90): which dense configs get more than MAX_STAGES stages, and
that the deeper ring still fits shared memory."""
from dataclasses import replace

import pytest

from dg_triton.heuristics import sm90

NUM_SMS = 132


@pytest.mark.parametrize("m,n,k", [(64, 4096, 7168), (128, 4096, 7168), (128, 2112, 7168),
                                   (64, 576, 7168), (128, 576, 7168)])
def test_narrow_tiles_at_long_k_with_a_small_b_get_the_deep_ring(m, n, k):
    bf16 = sm90.choose_bf16_gemm_config(m, n, k, 2, NUM_SMS)
    fp8 = sm90.choose_fp8_gemm_config(m, n, k, 2, NUM_SMS)
    shared_memory = [
        (bf16, sm90.bf16_gemm_shared_memory(bf16.block_m, bf16.block_n, bf16.num_stages, 2,
                                            bf16.num_splits > 1)),
        (fp8, sm90.fp8_gemm_shared_memory("1d2d", fp8.block_m, fp8.block_n, fp8.num_stages, 2,
                                          fp8.num_splits > 1))]
    for config, smem in shared_memory:
        assert config.num_stages > sm90.MAX_STAGES, config
        assert config.num_stages <= sm90.DEEP_PIPELINE_STAGES
        assert smem <= sm90.SMEM_LIMIT


@pytest.mark.parametrize("m,n,k", [
    (64, 7168, 2048),     # short K: 12 stages measured 1-2.5 % slower
    (64, 24576, 1536),
    (64, 7168, 16384),    # B of 117 MB (FP8) / 235 MB (BF16): HBM-bound, measured slower
])
def test_short_k_and_large_b_keep_max_stages(m, n, k):
    assert sm90.choose_bf16_gemm_config(m, n, k, 2, NUM_SMS).num_stages <= sm90.MAX_STAGES
    assert sm90.choose_fp8_gemm_config(m, n, k, 2, NUM_SMS).num_stages <= sm90.MAX_STAGES


def test_the_b_size_limit_is_in_bytes_of_b():
    # 4096 x 7168 x 2 bytes (59 MB) is under the limit for BF16 (measured +13 % at M=128);
    # 8192 x 7168 x 2 (117 MB) is over it, the same B size in FP8 (16384 x 7168) also.
    narrow = sm90.make_config(128, 8192, 64, 64, 1, 7168, 2, NUM_SMS)
    assert narrow.num_stages == sm90.MAX_STAGES
    assert sm90.with_pipeline_depth(narrow, 4096, 7168, 2, 2).num_stages == sm90.DEEP_PIPELINE_STAGES
    assert sm90.with_pipeline_depth(narrow, 8192, 7168, 2, 2) is narrow
    assert sm90.with_pipeline_depth(narrow, 16384, 7168, 1, 2) is narrow


def test_wide_tiles_and_1d1d_are_left_alone():
    wide = sm90.choose_bf16_gemm_config(4096, 4096, 7168, 2, NUM_SMS)   # shared memory holds < 8
    assert wide.num_stages < sm90.MAX_STAGES
    assert sm90.with_pipeline_depth(wide, 4096, 7168, 2, 2) is wide
    # 1D1D (the wgrad recipe) was not measured with deeper rings
    wgrad = sm90.choose_fp8_gemm_config(64, 4096, 7168, 4, NUM_SMS, "1d1d")
    assert wgrad.num_stages <= sm90.MAX_STAGES


@pytest.mark.parametrize("n,bf16_tile,fp8_tile", [(576, (128, 144, 6), (128, 144, 5)),
                                                   (2112, (128, 176, 5), (128, 192, 4))])
def test_bf16_narrow_128_row_tiles_take_one_stage_more_beside_narrower_staging(n, bf16_tile,
                                                                                 fp8_tile):
    # 4096 x n x 7168: shared memory holds 5 / 4 stages beside the default staging; narrower
    # chunks make room for one more, and the plan still fits. FP8 keeps its rings (measured no
    # gain).
    bf16 = sm90.choose_bf16_gemm_config(4096, n, 7168, 2, NUM_SMS)
    fp8 = sm90.choose_fp8_gemm_config(4096, n, 7168, 2, NUM_SMS)
    assert (bf16.block_m, bf16.block_n, bf16.num_stages) == bf16_tile
    assert (fp8.block_m, fp8.block_n, fp8.num_stages) == fp8_tile
    assert bf16.num_stages == sm90.max_stages(bf16.block_m, bf16.block_n, 2) + 1
    assert sm90.epilogue_chunk_cols(bf16.block_m, bf16.block_n, bf16.num_stages, 2) < bf16.block_n
    assert sm90.bf16_gemm_shared_memory(bf16.block_m, bf16.block_n, bf16.num_stages, 2) <= sm90.SMEM_LIMIT


def test_narrower_staging_is_not_taken_at_short_k_large_b_or_without_a_gain():
    tile = sm90.make_config(4096, 2112, 128, 176, 1, 2048, 2, NUM_SMS)
    assert sm90.with_pipeline_depth(tile, 2112, 7168, 2, 2, narrow_staging=True).num_stages == 5
    assert sm90.with_pipeline_depth(tile, 2112, 7168, 2, 2) is tile          # FP8's call
    assert sm90.with_pipeline_depth(tile, 2112, 2048, 2, 2, narrow_staging=True) is tile  # K < 4096
    assert sm90.with_pipeline_depth(tile, 8192, 7168, 2, 2, narrow_staging=True) is tile  # B 117 MB
    wide = sm90.make_config(4096, 4096, 128, 256, 1, 7168, 2, NUM_SMS)     # 5 stages never fit
    assert sm90.with_pipeline_depth(wide, 4096, 7168, 2, 2, narrow_staging=True) is wide
    # Split-K stages nothing, so its ring is not the one narrowing makes room for.
    split = replace(sm90.make_config(128, 2112, 128, 176, 2, 7168, 2, NUM_SMS), num_stages=3)
    assert sm90.with_pipeline_depth(split, 2112, 7168, 2, 2, narrow_staging=True) is split
    # FP32 D, 64-row tiles and staging in three or more chunks a row were not measured.
    fp32 = sm90.make_config(4096, 2112, 128, 176, 1, 7168, 4, NUM_SMS)
    assert sm90.with_pipeline_depth(fp32, 2112, 7168, 2, 4, narrow_staging=True) is fp32
    narrow_64 = sm90.make_config(192, 7168, 64, 176, 1, 7168, 2, NUM_SMS)
    assert narrow_64.num_stages < sm90.MAX_STAGES
    assert sm90.with_pipeline_depth(narrow_64, 7168, 7168, 2, 2, narrow_staging=True) is narrow_64
    three_chunks = sm90.make_config(4096, 2304, 128, 192, 1, 7168, 2, NUM_SMS)   # 5 stages: 3 chunks
    assert sm90.max_stages(128, 192, 2, cap=5, narrow_staging=True) == 5
    assert sm90.with_pipeline_depth(three_chunks, 2304, 7168, 2, 2, narrow_staging=True) is three_chunks


@pytest.mark.parametrize("block_n,out_bytes,stages,chunk_cols", [
    (144, 2, 5, 144), (144, 2, 6, 80),     # 9 slabs of 16 columns: chunks of 5 and 4 slabs
    (176, 2, 5, 128), (256, 2, 4, 128),    # 128x256 keeps its half-row chunks
    (112, 4, 7, 16), (128, 2, 6, 128), (192, 2, 5, 64)])
def test_the_epilogue_stages_in_the_room_the_ring_leaves(block_n, out_bytes, stages, chunk_cols):
    # Mirrors the traits' kMaxChunkSlabs (every build asserts the host's byte count equals the
    # kernel's own; the compile tests build the narrowed rings the heuristics pick).
    assert sm90.epilogue_chunk_cols(128, block_n, stages, out_bytes) == chunk_cols
