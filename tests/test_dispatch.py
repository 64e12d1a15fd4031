"""Backend choice (dg_triton/dispatch.py) without a GPU: the device's compute capability is faked."""
import uuid

import pytest
import torch

from dg_triton import dispatch
from dg_triton.dispatch import SM90, SM100


@pytest.fixture(autouse=True)
def _fresh_backend_cache(monkeypatch):
    for variable in ("DG_PRINT_CONFIGS", "DG_JIT_DEBUG", "DJ_JIT_DEBUG"):
        monkeypatch.delenv(variable, raising=False)
    dispatch._backend_for_device.cache_clear()
    yield
    dispatch._backend_for_device.cache_clear()


def fake_gpu(monkeypatch, capability: tuple[int, int], name: str) -> list:
    """Makes torch report a CUDA device of `capability`; returns the list of queried devices."""
    queried = []

    def get_device_capability(device=None):
        queried.append(device)
        return capability

    monkeypatch.setattr(torch.cuda, "get_device_capability", get_device_capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    return queried


def function_name() -> str:
    return f"bf16_gemm_nt_{uuid.uuid4().hex[:8]}"


def test_cpu_device_is_refused_naming_the_function():
    function = function_name()
    with pytest.raises(NotImplementedError, match=function) as error:
        dispatch.backend(function, torch.device("cpu"), (SM90,))
    assert "not a CUDA device" in str(error.value)
    assert "SM90" in str(error.value)


def test_hopper_chooses_sm90(monkeypatch):
    queried = fake_gpu(monkeypatch, (9, 0), "NVIDIA H200")
    device = torch.device("cuda", 0)
    assert dispatch.backend(function_name(), device, (SM90,)) == SM90
    assert dispatch.backend(function_name(), device, (SM90, SM100)) == SM90
    assert "sm_90" in dispatch.backend_reason(device) and "H200" in dispatch.backend_reason(device)
    assert len(queried) == 1  # the choice is cached per device


def test_blackwell_without_an_sm100_kernel_is_refused_mentioning_sm100(monkeypatch):
    fake_gpu(monkeypatch, (10, 0), "NVIDIA B200")
    function = function_name()
    with pytest.raises(NotImplementedError, match=function) as error:
        dispatch.backend(function, torch.device("cuda", 0), (SM90,))
    assert "SM100" in str(error.value)
    assert "sm_100" in str(error.value)


def test_blackwell_chooses_sm100_when_available(monkeypatch):
    fake_gpu(monkeypatch, (10, 0), "NVIDIA B200")
    assert dispatch.backend(function_name(), torch.device("cuda", 0), (SM90, SM100)) == SM100


@pytest.mark.parametrize("capability, arch", [((8, 0), "sm_80"), ((8, 9), "sm_89"), ((12, 0), "sm_120")])
def test_other_architectures_are_refused_naming_them(monkeypatch, capability, arch):
    fake_gpu(monkeypatch, capability, "Some GPU")
    function = function_name()
    with pytest.raises(NotImplementedError, match=function) as error:
        dispatch.backend(function, torch.device("cuda", 0), (SM90, SM100))
    assert arch in str(error.value)


def test_choice_is_per_device(monkeypatch):
    capabilities = {0: (9, 0), 1: (8, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability",
                        lambda device=None: capabilities[device.index])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"GPU {device.index}")
    assert dispatch.backend(function_name(), torch.device("cuda", 0), (SM90,)) == SM90
    with pytest.raises(NotImplementedError, match="sm_80"):
        dispatch.backend(function_name(), torch.device("cuda", 1), (SM90,))


def test_print_config_once_prints_once_per_problem(monkeypatch, capsys):
    monkeypatch.setenv("DG_PRINT_CONFIGS", "1")
    function, device = function_name(), torch.device("cpu")
    m = torch.randint(1, 1 << 16, ()).item()
    dispatch.print_config_once(function, (m, 2112, 7168), device, "ConfigA")
    first = capsys.readouterr()
    assert first.out == ""
    assert first.err.count("\n") == 1
    assert function in first.err and "ConfigA" in first.err and str(m) in first.err

    dispatch.print_config_once(function, (m, 2112, 7168), device, "ConfigA")
    assert capsys.readouterr().err == ""

    dispatch.print_config_once(function, (m + 1, 2112, 7168), device, "ConfigB")
    second = capsys.readouterr().err
    assert second.count("\n") == 1 and "ConfigB" in second and str(m + 1) in second


def test_print_config_once_is_silent_without_the_variable(monkeypatch, capsys):
    function, device = function_name(), torch.device("cpu")
    dispatch.print_config_once(function, (4096, 2112, 7168), device, "ConfigA")
    monkeypatch.setenv("DG_PRINT_CONFIGS", "0")
    dispatch.print_config_once(function, (4096, 2112, 7168), device, "ConfigA")
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
    # Silence does not use up the "once": turning printing on later still prints this problem.
    monkeypatch.setenv("DG_PRINT_CONFIGS", "1")
    dispatch.print_config_once(function, (4096, 2112, 7168), device, "ConfigA")
    assert "ConfigA" in capsys.readouterr().err
