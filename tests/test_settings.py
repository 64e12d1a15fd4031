"""Process-wide runtime settings (API.md 3.13, 11): defaults, round trips, rejections."""
import random
import subprocess
import sys

import pytest
import torch

from dg_triton import settings
from dg_triton.errors import DGArgumentError

HAS_CUDA = torch.cuda.is_available()
# _plan_settings too: the plan caches key on it, so it must come back in step with the rest.
_STATE = ("_num_sms", "_tc_util", "_pdl", "_ignore_compile_dims", "_block_size_multiple_of", "_deterministic",
          "_plan_settings")


@pytest.fixture(autouse=True)
def restore_settings(monkeypatch):
    # monkeypatch puts each module variable back after the test, whatever the test set.
    for name in _STATE:
        monkeypatch.setattr(settings, name, getattr(settings, name))


def test_fresh_process_has_documented_defaults():
    code = (
        "from dg_triton import settings as s\n"
        "print(s.get_tc_util(), s.get_pdl(), s.get_ignore_compile_dims(),"
        " s.get_block_size_multiple_of(), s.get_deterministic_algorithms())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["100", "False", "False", "(1,", "1)", "False"]


def test_tc_util_zero_reads_back_as_100():
    settings.set_tc_util(37)
    settings.set_tc_util(0)
    assert settings.get_tc_util() == 100


def test_tc_util_round_trips_every_value_in_range():
    for value in range(1, 101):
        settings.set_tc_util(value)
        assert settings.get_tc_util() == value


@pytest.mark.parametrize("bad", [-1, 101, 1000])
def test_tc_util_outside_0_to_100_is_rejected_naming_the_setter(bad):
    settings.set_tc_util(42)
    with pytest.raises(DGArgumentError, match="set_tc_util") as info:
        settings.set_tc_util(bad)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)
    assert settings.get_tc_util() == 42, "a rejected value must not be stored"


@pytest.mark.parametrize("bad", [50.0, "50", None, True])
def test_tc_util_non_int_is_rejected(bad):
    with pytest.raises(DGArgumentError, match="set_tc_util"):
        settings.set_tc_util(bad)


@pytest.mark.parametrize("setter, getter", [
    (settings.set_pdl, settings.get_pdl),
    (settings.set_ignore_compile_dims, settings.get_ignore_compile_dims),
    (settings.use_deterministic_algorithms, settings.get_deterministic_algorithms),
])
def test_bool_settings_round_trip_and_reject_non_bools(setter, getter):
    for flag in (True, False, True):
        setter(flag)
        assert getter() is flag
    setter(0)
    assert getter() is False
    for bad in ("yes", 2, None, 1.0):
        with pytest.raises(DGArgumentError, match=setter.__name__):
            setter(bad)
    assert getter() is False


def test_block_size_multiple_of_int_applies_to_both_dims():
    value = random.randint(1, 64)
    settings.set_block_size_multiple_of(value)
    assert settings.get_block_size_multiple_of() == (value, value)


def test_block_size_multiple_of_pair_keeps_m_then_n():
    xm, xn = random.sample(range(1, 65), 2)
    settings.set_block_size_multiple_of((xm, xn))
    assert settings.get_block_size_multiple_of() == (xm, xn)
    settings.set_block_size_multiple_of([xn, xm])
    assert settings.get_block_size_multiple_of() == (xn, xm)


@pytest.mark.parametrize("bad", [0, -8, (16,), (16, 16, 16), (0, 16), (16, -1), 16.0, (16, 8.0), "16"])
def test_block_size_multiple_of_rejects_non_positive_or_malformed(bad):
    settings.set_block_size_multiple_of((2, 4))
    with pytest.raises(DGArgumentError, match="set_block_size_multiple_of"):
        settings.set_block_size_multiple_of(bad)
    assert settings.get_block_size_multiple_of() == (2, 4)


@pytest.mark.parametrize("setter, value", [
    (settings.set_num_sms, 0), (settings.set_tc_util, 50), (settings.set_pdl, True),
    (settings.set_ignore_compile_dims, True), (settings.set_block_size_multiple_of, 8),
    (settings.use_deterministic_algorithms, True),
])
def test_setters_are_positional_only(setter, value):
    with pytest.raises(TypeError):
        setter(**{setter.__code__.co_varnames[0]: value})


@pytest.mark.parametrize("bad", [-1, -132, 8.0, "8", None, True])
def test_set_num_sms_rejects_negative_and_non_int(bad):
    with pytest.raises(DGArgumentError, match="set_num_sms"):
        settings.set_num_sms(bad)


def test_get_num_sms_reads_the_set_value_without_asking_torch(monkeypatch):
    value = 2 * random.randint(1, 8)
    settings.set_num_sms(value)

    def no_torch_call(*args, **kwargs):
        raise AssertionError("the getter asked torch although a value is set")

    monkeypatch.setattr(torch.cuda, "is_available", no_torch_call)
    monkeypatch.setattr(torch.cuda, "current_device", no_torch_call)
    monkeypatch.setattr(torch.cuda, "get_device_properties", no_torch_call)
    assert settings.get_num_sms() == value


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU behaviour")
def test_without_gpu_any_non_negative_num_sms_is_kept():
    value = random.randint(1, 10_000)
    settings.set_num_sms(value)
    assert settings.get_num_sms() == value


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU behaviour")
def test_without_gpu_unset_num_sms_raises_plain_runtime_error():
    settings.set_num_sms(0)
    with pytest.raises(RuntimeError, match="get_num_sms.*no CUDA device") as info:
        settings.get_num_sms()
    assert not isinstance(info.value, DGArgumentError)


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU behaviour")
def test_without_gpu_arch_is_none_and_sm_count_raises():
    assert settings.current_arch_major() is None
    with pytest.raises(RuntimeError, match="no CUDA device"):
        settings.device_sm_count()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_num_sms_unset_is_device_count_and_above_it_is_rejected():
    settings.set_num_sms(0)
    count = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    assert settings.get_num_sms() == count == settings.device_sm_count()
    settings.set_num_sms(count)
    assert settings.get_num_sms() == count
    with pytest.raises(DGArgumentError, match="set_num_sms"):
        settings.set_num_sms(count + 1)
    assert settings.current_arch_major() == torch.cuda.get_device_capability()[0]


@pytest.mark.parametrize("choose", ["bf16", "fp8"])
def test_a_block_n_multiple_no_tile_meets_names_the_setting(choose):
    # lcm(16, 512) = 512 > 256: no SM90 tile is that wide, and the error says which setting did it.
    from dg_triton.heuristics import sm90
    with pytest.raises(RuntimeError, match=r"set_block_size_multiple_of's N multiple is 512"):
        if choose == "bf16":
            sm90.choose_bf16_gemm_config(256, 256, 256, 2, 132, block_n_multiple=512)
        else:
            sm90.choose_fp8_gemm_config(256, 256, 256, 2, 132, block_n_multiple=512)


def test_the_block_n_hint_counts_an_mn_major_b_s_64_column_atoms():
    # An MN-major B steps block N by lcm(64, xn): 320 for xn = 80, past 256.
    from dg_triton.heuristics import sm90
    with pytest.raises(RuntimeError, match=r"block N must be a multiple of 320"):
        sm90.choose_bf16_gemm_config(256, 256, 256, 2, 132, block_n_multiple=80, b_k_major=False)
