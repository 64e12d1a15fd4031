"""Process-wide runtime settings (API.md 3.13 and 11) and the device facts they depend on.

Every setter is positional-only, checks its argument and raises ``DGArgumentError`` naming itself.
Every getter runs on every GEMM call, so a getter is one module-variable read; only an unset SM
count asks torch, and the device properties behind it are cached per device index.

Nothing here touches CUDA at import time: importing dg_triton on a machine without a GPU works, and
only the functions that need a device say so (``RuntimeError``) when there is none.
"""
import functools
import operator

import torch

from .errors import reject

# 0 means "not set": the GEMMs then use every SM of the device (API.md 3.13).
_num_sms = 0
# 0 means "not set"; the getter then reports 100 (no throttling).
_tc_util = 0
_pdl = False
_ignore_compile_dims = False
_block_size_multiple_of = (1, 1)
_deterministic = False


def int_argument(function: str, argument: str, value) -> int:
    """``value`` as an int, or the error naming ``function``. Shared by the setters here and in
    ``utils.layout``. operator.index takes Python and NumPy integers and refuses floats; bool is
    refused too, since True where a count is expected is a caller's mistake, not a count."""
    if isinstance(value, bool):
        raise reject(function, argument, "an int", repr(value))
    try:
        return operator.index(value)
    except TypeError:
        raise reject(function, argument, "an int", f"{type(value).__name__} {value!r}") from None


def bool_argument(function: str, argument: str, value) -> bool:
    """``value`` as a bool. DeepGEMM's pybind11 binding converts 0 and 1 as well, so they pass."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise reject(function, argument, "a bool", f"{type(value).__name__} {value!r}")


# ---------------------------------------------------------------------------------------------
# Device facts


def _require_cuda(function: str) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(f"{function}: no CUDA device is available (torch.cuda.is_available() is False)")


@functools.lru_cache(maxsize=None)
def _device_properties(device_index: int):
    # Properties of a device never change within a process; the query costs microseconds, which
    # matters on the per-call path (ANCHORS.md host overhead).
    return torch.cuda.get_device_properties(device_index)


def _device_index(device_index) -> int:
    return torch.cuda.current_device() if device_index is None else int(device_index)


def device_sm_count(device_index: int | None = None) -> int:
    """Number of SMs of ``device_index`` (the current device when None). RuntimeError without CUDA."""
    _require_cuda("device_sm_count")
    return _device_properties(_device_index(device_index)).multi_processor_count


def current_arch_major(device_index: int | None = None) -> int | None:
    """Compute-capability major of ``device_index`` (current device when None): 9 for SM90, 10 for
    SM100. None when there is no CUDA device, so callers can pick a CPU-host default."""
    if not torch.cuda.is_available():
        return None
    return _device_properties(_device_index(device_index)).major


# ---------------------------------------------------------------------------------------------
# Settings


def set_num_sms(num_sms: int, /) -> None:
    """Caps the SMs (persistent grid size) the kernels use; 0 means all of them.

    The upper bound is the current device's SM count. Without a CUDA device there is nothing to
    check against, so any non-negative value is kept (a CPU host can prepare settings for later).
    Odd values are accepted, unlike DeepGEMM (API.md 4 lists an odd count as a rejection at GEMM
    time): a persistent grid here may have any size, rounded down to a multiple of the cluster
    size (heuristics.sm90), and the GPU tests run grids of 5 and 7 CTAs.
    """
    global _num_sms
    num_sms = int_argument("set_num_sms", "num_sms", num_sms)
    if num_sms < 0:
        raise reject("set_num_sms", "num_sms", "in [0, device SMs]", num_sms)
    if torch.cuda.is_available():
        limit = device_sm_count()
        if num_sms > limit:
            raise reject("set_num_sms", "num_sms", f"in [0, {limit}] (the device's SM count)", num_sms)
    _num_sms = num_sms
    _refresh_plan_settings()


def get_num_sms() -> int:
    """The value set, or the current device's SM count when none (or 0) was set.

    Without a CUDA device and nothing set there is no answer, so this raises RuntimeError rather
    than inventing a count that a grid size would later be built from.
    """
    if _num_sms:
        return _num_sms
    _require_cuda("get_num_sms")
    return _device_properties(torch.cuda.current_device()).multi_processor_count


def set_tc_util(tc_util: int, /) -> None:
    """Approximate tensor-core utilization target in percent, 0..100; 0 unsets it (API.md 3.13)."""
    global _tc_util
    tc_util = int_argument("set_tc_util", "tc_util", tc_util)
    if not 0 <= tc_util <= 100:
        raise reject("set_tc_util", "tc_util", "in [0, 100]", tc_util)
    _tc_util = tc_util


def get_tc_util() -> int:
    return _tc_util or 100


def set_pdl(enable: bool, /) -> None:
    """Programmatic Dependent Launch attribute on every JIT kernel launch (default off)."""
    global _pdl
    _pdl = bool_argument("set_pdl", "enable", enable)
    _refresh_plan_settings()


def get_pdl() -> bool:
    return _pdl


def set_ignore_compile_dims(enable: bool, /) -> None:
    """True: no problem dim is baked into a kernel, whatever ``compiled_dims`` says (API.md 1.5)."""
    global _ignore_compile_dims
    _ignore_compile_dims = bool_argument("set_ignore_compile_dims", "enable", enable)
    _refresh_plan_settings()


def get_ignore_compile_dims() -> bool:
    return _ignore_compile_dims


def set_block_size_multiple_of(value, /) -> None:
    """Constrains the heuristics' block sizes: an int applies to both M and N, a pair is (xm, xn)."""
    global _block_size_multiple_of
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise reject("set_block_size_multiple_of", "value", "an int or a pair (xm, xn)", repr(value))
        pair = tuple(int_argument("set_block_size_multiple_of", name, v) for name, v in zip(("xm", "xn"), value))
    else:
        single = int_argument("set_block_size_multiple_of", "value", value)
        pair = (single, single)
    for name, v in zip(("xm", "xn"), pair):
        if v <= 0:
            raise reject("set_block_size_multiple_of", name, "a positive int", v)
    _block_size_multiple_of = pair
    _refresh_plan_settings()


def get_block_size_multiple_of() -> tuple[int, int]:
    return _block_size_multiple_of


def use_deterministic_algorithms(enable: bool, /) -> None:
    """True: kernels that could reduce in a run-dependent order (split-K, atomics, stream-K) must
    give bitwise-identical results run to run (API.md 11). Off by default."""
    global _deterministic
    _deterministic = bool_argument("use_deterministic_algorithms", "enable", enable)


def get_deterministic_algorithms() -> bool:
    return _deterministic


def _refresh_plan_settings() -> None:
    """Recomputes `_plan_settings`: the settings a cached launch plan depends on (grid size, PDL,
    compiled dims, block-size constraints). It is part of every plan key, so changing a setting
    never reuses a stale plan; kept as a ready tuple because the key is built on every call."""
    global _plan_settings
    _plan_settings = (_num_sms, _pdl, _ignore_compile_dims, _block_size_multiple_of)


_refresh_plan_settings()
