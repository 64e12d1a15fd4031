"""with_pipeline_depth (heuristics.sm90): which dense configs get more than MAX_STAGES stages, and
that the deeper ring still fits shared memory."""
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
