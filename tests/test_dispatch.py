"""Backend choice (dg_triton/dispatch.py) without a GPU: the device's compute capability is faked.

Covers the order of dispatch.py: the device's own CUDA path where the function has it, else the
portable Triton path (other GPUs, SM100 until its kernels exist, CPU tensors under
TRITON_INTERPRET=1), else a NotImplementedError; DG_BACKEND=triton / cuda; what
DG_PRINT_CONFIGS prints.
"""
import uuid

import pytest
import torch

from dg_triton import dispatch
from dg_triton.dispatch import PORTABLE, SM90, SM100


@pytest.fixture(autouse=True)
def _fresh_backend_cache(monkeypatch):
    for variable in ("DG_PRINT_CONFIGS", "DG_JIT_DEBUG", "DJ_JIT_DEBUG", "DG_BACKEND", "TRITON_INTERPRET"):
        monkeypatch.delenv(variable, raising=False)
    dispatch.clear_caches()
    yield
    dispatch.clear_caches()


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


# ---------------------------------------------------------------------------------------------
# The portable Triton path

WITH_PORTABLE = (SM90, PORTABLE)


@pytest.mark.parametrize("capability, arch", [((8, 0), "sm_80"), ((8, 9), "sm_89"), ((12, 0), "sm_120")])
def test_other_architectures_get_the_portable_path(monkeypatch, capability, arch):
    fake_gpu(monkeypatch, capability, "Some GPU")
    device = torch.device("cuda", 0)
    function = function_name()
    assert dispatch.backend(function, device, WITH_PORTABLE) == PORTABLE
    assert dispatch.backend(function_name(), device, (SM90, SM100, PORTABLE)) == PORTABLE
    reason = dispatch.backend_reason(device)
    assert arch in reason and "portable" in reason


def test_blackwell_gets_the_portable_path_until_its_kernel_exists(monkeypatch):
    fake_gpu(monkeypatch, (10, 0), "NVIDIA B200")
    device = torch.device("cuda", 0)
    assert dispatch.backend(function_name(), device, WITH_PORTABLE) == PORTABLE
    assert dispatch.backend(function_name(), device, (SM90, SM100, PORTABLE)) == SM100


def test_hopper_keeps_its_cuda_path_when_a_portable_one_exists(monkeypatch):
    fake_gpu(monkeypatch, (9, 0), "NVIDIA H200")
    assert dispatch.backend(function_name(), torch.device("cuda", 0), WITH_PORTABLE) == SM90


@pytest.mark.parametrize("capability", [(9, 0), (10, 0), (8, 0)])
def test_dg_backend_triton_forces_the_portable_path(monkeypatch, capability):
    fake_gpu(monkeypatch, capability, "Some GPU")
    monkeypatch.setenv("DG_BACKEND", "triton")
    device = torch.device("cuda", 0)
    assert dispatch.backend(function_name(), device, (SM90, SM100, PORTABLE)) == PORTABLE
    assert "DG_BACKEND=triton" in dispatch.backend_reason(device)


def test_dg_backend_triton_leaves_functions_without_a_portable_kernel_alone(monkeypatch):
    fake_gpu(monkeypatch, (9, 0), "NVIDIA H200")
    monkeypatch.setenv("DG_BACKEND", "triton")
    assert dispatch.backend(function_name(), torch.device("cuda", 0), (SM90,)) == SM90


def test_dg_backend_is_read_on_each_call(monkeypatch):
    fake_gpu(monkeypatch, (9, 0), "NVIDIA H200")
    device, function = torch.device("cuda", 0), function_name()
    assert dispatch.backend(function, device, WITH_PORTABLE) == SM90
    monkeypatch.setenv("DG_BACKEND", "triton")
    assert dispatch.backend(function, device, WITH_PORTABLE) == PORTABLE
    monkeypatch.setenv("DG_BACKEND", "auto")
    assert dispatch.backend(function, device, WITH_PORTABLE) == SM90


def test_dg_backend_cuda_refuses_the_portable_path(monkeypatch):
    fake_gpu(monkeypatch, (8, 0), "NVIDIA A100")
    monkeypatch.setenv("DG_BACKEND", "cuda")
    function = function_name()
    with pytest.raises(NotImplementedError, match=function) as error:
        dispatch.backend(function, torch.device("cuda", 0), WITH_PORTABLE)
    assert "sm_80" in str(error.value) and "DG_BACKEND=cuda" in str(error.value)


def test_unknown_dg_backend_is_an_error_naming_the_variable(monkeypatch):
    fake_gpu(monkeypatch, (9, 0), "NVIDIA H200")
    monkeypatch.setenv("DG_BACKEND", "tritonn")
    with pytest.raises(ValueError, match="DG_BACKEND.*tritonn"):
        dispatch.backend(function_name(), torch.device("cuda", 0), WITH_PORTABLE)


def test_cpu_tensors_get_the_portable_path_only_under_the_interpreter(monkeypatch):
    cpu = torch.device("cpu")
    function = function_name()
    with pytest.raises(NotImplementedError, match="TRITON_INTERPRET=1"):
        dispatch.backend(function, cpu, WITH_PORTABLE)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert dispatch.backend(function, cpu, WITH_PORTABLE) == PORTABLE
    assert "interpreter" in dispatch.backend_reason(cpu)
    with pytest.raises(NotImplementedError, match="not a CUDA device"):
        dispatch.backend(function, cpu, (SM90,))


def test_print_config_once_says_which_backend_ran_and_why(monkeypatch, capsys):
    fake_gpu(monkeypatch, (9, 0), "NVIDIA H200")
    monkeypatch.setenv("DG_PRINT_CONFIGS", "1")
    monkeypatch.setenv("DG_BACKEND", "triton")
    device, function = torch.device("cuda", 0), function_name()
    assert dispatch.backend(function, device, WITH_PORTABLE) == PORTABLE
    dispatch.print_config_once(function, (1, 2, 3), device, "PortableConfig")
    err = capsys.readouterr().err
    assert "DG_BACKEND=triton: portable Triton kernels" in err and "sm_90" in err and "PortableConfig" in err


@pytest.mark.parametrize("call", ["bf16", "fp8"])
def test_public_gemms_on_cpu_tensors_without_the_interpreter_are_refused(call):
    """The public layer asks the dispatcher (this process has no TRITON_INTERPRET), and says how to
    get the portable path on CPU tensors."""
    import dg_triton

    if call == "bf16":
        a, b = torch.randn(8, 128).bfloat16(), torch.randn(16, 128).bfloat16()
        d = torch.full((8, 16), 7.0)
        with pytest.raises(NotImplementedError, match="bf16_gemm_nt.*TRITON_INTERPRET=1"):
            dg_triton.bf16_gemm_nt(a, b, d, torch.zeros(8, 16))
    else:
        a = dg_triton.per_token_cast_to_fp8(torch.randn(8, 128), False)
        b = dg_triton.per_block_cast_to_fp8(torch.randn(16, 128), False)
        d = torch.full((8, 16), 7.0, dtype=torch.bfloat16)
        with pytest.raises(NotImplementedError, match="fp8_fp4_gemm_nt.*TRITON_INTERPRET=1"):
            dg_triton.fp8_gemm_nt(a, b, d)
    assert (d == 7.0).all(), "d was touched before the refusal"


@pytest.mark.parametrize("function", sorted(dispatch.PORTABLE_FUNCTIONS))
def test_public_functions_with_a_portable_kernel_get_it_without_listing_it(monkeypatch, function):
    fake_gpu(monkeypatch, (8, 0), "NVIDIA A100")
    assert dispatch.backend(function, torch.device("cuda", 0), (SM90,)) == PORTABLE
