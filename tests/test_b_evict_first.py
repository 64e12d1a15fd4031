"""Which kernels load B under L2 evict-first (heuristics.sm90.b_evict_first) and how the choice
reaches the kernel source (the DG_B_EVICT_FIRST macro, a separate binary name). CPU only; the
compile tests check the SASS (cache-hinted TMA loads exactly where chosen)."""
from dataclasses import replace

import pytest
import torch

from dg_triton.heuristics import sm90 as heuristics
from dg_triton.kernels import sm90_bf16_gemm, sm90_fp8_gemm, sm90_grouped_gemm
from dg_triton.kernels.sm90_fp8_gemm import Fp8GemmKernelSpec

_NUM_SMS = 132


@pytest.fixture(autouse=True)
def rule_on(monkeypatch):
    """The rule as it would run switched on (it ships off until measured on the H200)."""
    monkeypatch.setattr(heuristics, "B_EVICT_FIRST", True)


def test_the_rule_takes_b_read_by_at_most_two_block_rows_and_at_most_the_byte_cap():
    cap = heuristics.B_EVICT_FIRST_MAX_BYTES
    assert heuristics.b_evict_first(1, cap) and heuristics.b_evict_first(2, 1)
    assert not heuristics.b_evict_first(3, 1)
    assert not heuristics.b_evict_first(1, cap + 1)
    # BF16 only once measured.
    assert heuristics.b_evict_first(1, 1, bf16=True) == heuristics.B_EVICT_FIRST_BF16


@pytest.mark.parametrize("m, n, k, expected", [
    (128, 4096, 7168, True), (64, 7168, 16384, True), (1, 24576, 1536, True),
    (4096, 4096, 7168, False),   # B read by 32 block rows: it must stay in L2
])
def test_dense_fp8_takes_it_at_decode_sized_m(m, n, k, expected):
    config = heuristics.choose_fp8_gemm_config(m, n, k, 2, _NUM_SMS, "1d2d")
    assert sm90_fp8_gemm.b_loads_evict_first(m, n, k, config) == expected
    # A cluster along M multicasts B (the kernel's hinted load is the single-CTA one).
    assert not sm90_fp8_gemm.b_loads_evict_first(m, n, k, replace(config, cluster_m=2))


def test_bf16_follows_its_own_switch(monkeypatch):
    config = heuristics.choose_bf16_gemm_config(128, 4096, 7168, 2, _NUM_SMS)
    monkeypatch.setattr(heuristics, "B_EVICT_FIRST_BF16", True)
    assert sm90_bf16_gemm.b_loads_evict_first(128, 4096, 7168, True, config)
    assert not sm90_bf16_gemm.b_loads_evict_first(128, 4096, 7168, False, config)  # MN-major B
    monkeypatch.setattr(heuristics, "B_EVICT_FIRST_BF16", False)
    assert not sm90_bf16_gemm.b_loads_evict_first(128, 4096, 7168, True, config)


@pytest.mark.parametrize("groups, n, k, expected", [
    (6, 4096, 2048, True), (6, 6144, 7168, True), (32, 4096, 2048, True),
    (32, 6144, 7168, False),   # 1.4 GB of weights: slower with it (NOTES.md session 37)
])
def test_masked_fp8_decode_takes_it_under_the_byte_cap(groups, n, k, expected):
    config = heuristics.choose_m_grouped_fp8_config(heuristics.GROUPED_MASKED, groups, 24, 4096, n, k, _NUM_SMS)
    assert sm90_grouped_gemm.fp8_b_loads_evict_first(sm90_grouped_gemm.MASKED, groups, 24, n, k, config) == expected
    # The contiguous layouts never: an expert's weights serve many block rows.
    assert not sm90_grouped_gemm.fp8_b_loads_evict_first(sm90_grouped_gemm.INDEX, groups, 24, n, k, config)


def test_the_choice_is_a_macro_and_a_separate_binary():
    config = heuristics.choose_fp8_gemm_config(128, 4096, 7168, 2, _NUM_SMS, "1d2d")
    plain = Fp8GemmKernelSpec(config, False, torch.bfloat16, False)
    hinted = replace(plain, b_evict_first=True)
    assert "DG_B_EVICT_FIRST" not in plain.source() and "#define DG_B_EVICT_FIRST 1" in hinted.source()
    assert hinted.name == plain.name + "_ef"
    grouped = sm90_grouped_gemm.GroupedFp8GemmKernelSpec(config, sm90_grouped_gemm.MASKED, b_evict_first=True)
    assert "#define DG_B_EVICT_FIRST 1" in grouped.source() and grouped.name.endswith("_ef")
