"""utils.math and utils.layout helpers (API.md 2.3, 2.5, 3.13, 3.15)."""
import inspect
import random

import pytest

from dg_triton import utils
from dg_triton.errors import DGArgumentError
from dg_triton.utils import layout


@pytest.fixture(autouse=True)
def restore_mk_alignment(monkeypatch):
    monkeypatch.setattr(layout, "_mk_alignment", layout._mk_alignment)


def test_ceil_div_and_align_give_the_smallest_covering_multiple():
    for _ in range(1000):
        x, y = random.randint(0, 1 << 20), random.randint(1, 1024)
        q = utils.ceil_div(x, y)
        assert q * y >= x and (q - 1) * y < x
        assert utils.align(x, y) == q * y and utils.align(x, y) % y == 0


@pytest.mark.parametrize("element_size", [1, 2, 4, 8, 16])
def test_tma_aligned_size_is_smallest_count_filling_whole_16_bytes(element_size):
    for _ in range(200):
        x = random.randint(0, 100_000)
        size = utils.get_tma_aligned_size(x, element_size)
        assert size >= x and (size * element_size) % 16 == 0
        assert size - 16 // element_size < x or size == 0


@pytest.mark.parametrize("element_size", [0, 3, 5, 32, -2, 2.0])
def test_tma_aligned_size_rejects_element_sizes_not_dividing_16(element_size):
    with pytest.raises(DGArgumentError, match="get_tma_aligned_size: element_size"):
        utils.get_tma_aligned_size(64, element_size)


def test_tma_aligned_size_is_positional_only():
    with pytest.raises(TypeError):
        utils.get_tma_aligned_size(x=64, element_size=4)


def test_mk_alignment_defaults_to_128_in_a_fresh_process():
    import subprocess
    import sys
    code = "import dg_triton.utils as u; print(u.get_mk_alignment_for_contiguous_layout())"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "128"


def test_mk_alignment_round_trips_and_aliases_read_the_same_value():
    value = 16 * random.randint(1, 32)
    utils.set_mk_alignment_for_contiguous_layout(value)
    assert utils.get_mk_alignment_for_contiguous_layout() == value
    assert utils.get_m_alignment_for_contiguous_layout() == value
    assert utils.get_k_alignment_for_contiguous_layout() == value
    assert utils.get_m_alignment_for_contiguous_layout is utils.get_mk_alignment_for_contiguous_layout
    assert utils.get_k_alignment_for_contiguous_layout is utils.get_mk_alignment_for_contiguous_layout


@pytest.mark.parametrize("bad", [0, -16, 24, 8, 128.0, True, None, "128"])
def test_mk_alignment_rejects_non_positive_non_multiples_of_16(bad):
    utils.set_mk_alignment_for_contiguous_layout(64)
    with pytest.raises(DGArgumentError, match="set_mk_alignment_for_contiguous_layout"):
        utils.set_mk_alignment_for_contiguous_layout(bad)
    assert utils.get_mk_alignment_for_contiguous_layout() == 64


@pytest.mark.parametrize("arch", [None, 9])
def test_theoretical_mk_alignment_is_128_on_sm90_and_without_gpu(monkeypatch, arch):
    monkeypatch.setattr(layout, "current_arch_major", lambda: arch)
    for expected_m in (None, 0, 1, 24, 100, 230, random.randint(0, 10_000)):
        assert utils.get_theoretical_mk_alignment_for_contiguous_layout(expected_m) == 128


def test_theoretical_mk_alignment_on_sm100_matches_documented_examples(monkeypatch):
    monkeypatch.setattr(layout, "current_arch_major", lambda: 10)
    get = utils.get_theoretical_mk_alignment_for_contiguous_layout
    assert get() == 224 and get(None) == 224
    assert get(100) == 128 and get(24) == 32 and get(230) == 224
    assert get(expected_m=128) == 128 and get(129) == 160


def test_theoretical_mk_alignment_on_sm100_is_the_smallest_covering_step(monkeypatch):
    monkeypatch.setattr(layout, "current_arch_major", lambda: 10)
    for expected_m in range(400):
        block = utils.get_theoretical_mk_alignment_for_contiguous_layout(expected_m)
        assert block in (32, 64, 96, 128, 160, 192, 224)
        assert block >= expected_m or block == 224
        assert block - 32 < expected_m or block == 32


@pytest.mark.parametrize("bad", [-1, 1.5, "64"])
def test_theoretical_mk_alignment_rejects_bad_expected_m(bad):
    with pytest.raises(DGArgumentError, match="expected_m"):
        utils.get_theoretical_mk_alignment_for_contiguous_layout(bad)


def test_utils_reexports_every_name_of_math_and_layout():
    for module in (utils.math, utils.layout):
        for name in module.__all__:
            assert getattr(utils, name) is getattr(module, name)


def test_sf_layout_helpers_have_deepgemm_signatures():
    def parameters(function):
        return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]
    empty, positional, keyword = inspect.Parameter.empty, inspect.Parameter.POSITIONAL_ONLY, \
        inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert parameters(utils.get_mn_major_tma_aligned_tensor) == [("sf", positional, empty)]
    assert parameters(utils.get_mn_major_tma_aligned_packed_ue8m0_tensor) == [
        ("sf", keyword, empty), ("psum_layout", keyword, None)]
    assert parameters(utils.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor) == [
        ("sf", keyword, empty), ("grouped_layout", keyword, empty), ("ks_cpu", keyword, empty),
        ("gran_k", keyword, empty), ("k_alignment", keyword, empty), ("use_psum_layout", keyword, False)]
    assert parameters(utils.transform_sf_into_required_layout)[-1] == ("psum_layout", keyword, None)


def test_sf_layout_helpers_are_exported_at_the_top_level():
    import dg_triton
    for name in ("get_mn_major_tma_aligned_packed_ue8m0_tensor", "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
                 "transform_sf_into_required_layout"):
        assert getattr(dg_triton, name) is getattr(layout, name)
