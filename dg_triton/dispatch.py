"""Which implementation serves a call: the SM90 CUDA path, the SM100 CUDA path, or (later) the
portable Triton path. The choice depends only on the device, so it is cached per device.

DG_PRINT_CONFIGS=1 prints the backend, the reason and the config once per distinct problem.
"""
import functools
import sys

import torch

from dg_triton.env import env_flag

SM90, SM100 = "sm90", "sm100"


@functools.lru_cache(maxsize=None)
def _backend_for_device(device: torch.device) -> tuple[str | None, str]:
    if device.type != "cuda":
        return None, f"device {device} is not a CUDA device"
    major, minor = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    if major == 9:
        return SM90, f"{name} is sm_{major}{minor} (Hopper): SM90 CUDA kernels (wgmma + TMA)"
    if major == 10:
        return SM100, f"{name} is sm_{major}{minor} (Blackwell): SM100 CUDA kernels"
    return None, f"{name} is sm_{major}{minor}, which has no CUDA kernels in dg_triton"


def backend(function: str, device: torch.device, available: tuple[str, ...]) -> str:
    """The backend for `function` on `device` among those that implement it, else
    NotImplementedError naming the function and the architecture."""
    chosen, reason = _backend_for_device(device)
    if chosen in available:
        return chosen
    if chosen is not None:
        reason += f", but {function} has no {chosen.upper()} kernel yet"
    raise NotImplementedError(
        f"{function}: no kernel for this device ({reason}); the portable Triton path is not built "
        f"yet, so {function} runs on {', '.join(a.upper() for a in available)} GPUs only")


def backend_reason(device: torch.device) -> str:
    return _backend_for_device(device)[1]


_printed: set = set()


def print_config_once(function: str, problem: tuple, device: torch.device, config) -> None:
    if not env_flag("DG_PRINT_CONFIGS") and not env_flag("DG_JIT_DEBUG"):
        return
    key = (function, problem, device)
    if key in _printed:
        return
    _printed.add(key)
    print(f"[dg_triton] {function}{problem} on {device}: {backend_reason(device)}; config {config}",
          file=sys.stderr)
