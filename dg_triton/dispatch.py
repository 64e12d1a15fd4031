"""Which implementation serves a call: the SM90 CUDA path, the SM100 CUDA path, or the portable
Triton path (dg_triton/triton/gemm_portable.py).

Order of choice for a function among the backends that implement it (``available``, plus the
portable one for PORTABLE_FUNCTIONS):

1. the device's own CUDA path (SM90 on Hopper, SM100 on Blackwell) when the function has it;
2. otherwise the portable Triton path when the function has it: any other CUDA GPU (SM80, SM89,
   SM120, ...), Blackwell until its CUDA kernels exist, and CPU tensors when ``TRITON_INTERPRET=1``
   (the Triton interpreter, for tests and prototyping);
3. otherwise NotImplementedError naming the function and the device.

FP8 calls on SM100 never get here: validation_fp8 (validation_k_grouped for the k-grouped FP8
GEMM) refuses them first, because SM100's scale-factor transform packs UE8M0 scales that neither
an SM100 kernel (none yet) nor the portable kernel reads.

``DG_BACKEND`` overrides step 1: ``triton`` takes the portable path wherever the function has one
(on SM90 too, so both paths can be compared on one GPU); ``cuda`` never takes it; ``auto`` (or
unset) is the order above. The device facts are cached per device; the variables are read on
each call, like every other DG_* variable (env.py).

DG_PRINT_CONFIGS=1 prints the backend, the reason and the config once per distinct problem.
"""
import functools
import os
import sys

import torch

from dg_triton.env import env_flag, get_env

SM90, SM100, PORTABLE = "sm90", "sm100", "portable"

# The public functions with a portable Triton kernel (dg_triton/triton/gemm_portable.py): for them
# the portable backend counts as available whatever the caller lists, so a call site names only
# the CUDA paths it has.
PORTABLE_FUNCTIONS = frozenset(
    [f"bf16_gemm_{alias}" for alias in ("nt", "nn", "tn", "tt")]
    + [f"fp8_fp4_gemm_{alias}" for alias in ("nt", "nn", "tn", "tt")]
    + ["fp8_gemm_nt_skip_head_mid"]
    + ["m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nn_contiguous",
       "m_grouped_bf16_gemm_nt_masked"]
    # K-grouped GEMMs run the dense kernels once per group (k_grouped.py), portable ones included.
    + ["k_grouped_fp8_gemm_nt_contiguous", "k_grouped_bf16_gemm_tn_contiguous"])

_BACKEND_VARIABLE = "DG_BACKEND"
_FORCE_PORTABLE, _FORCE_CUDA, _AUTO = "triton", "cuda", "auto"


@functools.cache
def _backend_for_device(device: torch.device) -> tuple[str | None, str]:
    """The device's own CUDA backend (None if it has none) and why; queries the device once."""
    if device.type != "cuda":
        return None, f"device {device} is not a CUDA device"
    major, minor = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    if major == 9:
        return SM90, f"{name} is sm_{major}{minor} (Hopper): SM90 CUDA kernels (wgmma + TMA)"
    if major == 10:
        return SM100, f"{name} is sm_{major}{minor} (Blackwell): SM100 CUDA kernels"
    return None, f"{name} is sm_{major}{minor}, which has no CUDA kernels in dg_triton"


def _requested_backend() -> str:
    # DG_BACKEND has no DJ_ fallback (env.py), so backend() may key its cache on os.environ alone.
    value = (get_env(_BACKEND_VARIABLE) or _AUTO).strip().lower() or _AUTO
    if value not in (_AUTO, _FORCE_PORTABLE, _FORCE_CUDA):
        raise ValueError(f"environment variable {_BACKEND_VARIABLE} must be 'auto', 'triton' or 'cuda', "
                         f"got {get_env(_BACKEND_VARIABLE)!r}")
    return value


def _interpreter_on() -> bool:
    return env_flag("TRITON_INTERPRET")


def _choose(function: str, device: torch.device, available: tuple[str, ...]) -> tuple[str | None, str]:
    native, reason = _backend_for_device(device)
    requested = _requested_backend()
    portable_ok = PORTABLE in available and requested != _FORCE_CUDA
    if device.type == "cuda":
        if requested == _FORCE_PORTABLE and portable_ok:
            return PORTABLE, f"{reason}; {_BACKEND_VARIABLE}=triton: portable Triton kernels"
        if native is not None and native in available:
            if requested == _FORCE_PORTABLE:
                reason += f"; {_BACKEND_VARIABLE}=triton, but {function} has no portable kernel"
            return native, reason
        if native is not None:
            reason += f", but {function} has no {native.upper()} kernel yet"
        if portable_ok:
            return PORTABLE, f"{reason}: portable Triton kernels"
        if PORTABLE in available:
            reason += f", and {_BACKEND_VARIABLE}=cuda rules out the portable Triton kernels"
        return None, reason
    if portable_ok and _interpreter_on():
        return PORTABLE, f"{reason}; TRITON_INTERPRET=1: portable Triton kernels under the interpreter"
    if PORTABLE in available:
        reason += (" (the portable Triton kernels run on CPU tensors only under the interpreter: set "
                   "TRITON_INTERPRET=1 before importing dg_triton)")
    return None, reason


# Choices per (function, device, available, DG_BACKEND[, TRITON_INTERPRET off CUDA]): the per-call
# cost is an environment read and a dict look-up, not the building of a reason string.
_choices: dict = {}
# backend_of's choices for CUDA tensors, per (function, device index, available, DG_BACKEND): no
# torch.device is built on the warm path (~0.8 us on the H200's host).
_cuda_choices: dict = {}
# The reason of the latest choice per (function, device), for print_config_once.
_reasons: dict = {}

try:
    # os.environ.get encodes the name and decodes the value on every read (~0.8 us); the encoded
    # dict it keeps in step with every os.environ change answers the same in ~0.05 us (POSIX).
    _environ_data = os.environ._data
    _BACKEND_KEY = os.environ.encodekey(_BACKEND_VARIABLE)

    def _backend_setting():
        return _environ_data.get(_BACKEND_KEY)
except AttributeError:  # an os.environ without them: the plain read
    def _backend_setting():
        return os.environ.get(_BACKEND_VARIABLE)


def backend(function: str, device: torch.device, available: tuple[str, ...]) -> str:
    """The backend for `function` on `device` among those that implement it (see the module
    docstring), else NotImplementedError naming the function and the architecture."""
    key = (function, device, available, _backend_setting())
    if device.type != "cuda":  # only off CUDA does the interpreter matter
        key += (os.environ.get("TRITON_INTERPRET"),)
    choice = _choices.get(key)
    if choice is None:
        if function in PORTABLE_FUNCTIONS and PORTABLE not in available:
            available += (PORTABLE,)
        choice = _choices[key] = (*_choose(function, device, available), available)
    chosen, reason, available = choice
    if chosen is not None:
        _reasons[function, device] = reason
        return chosen
    names = ", ".join("portable Triton" if a == PORTABLE else a.upper() for a in available)
    raise NotImplementedError(f"{function}: no kernel for this device ({reason}); {function} has "
                              f"{names} kernels")


def backend_of(function: str, t: torch.Tensor, device_index: int, available: tuple[str, ...]) -> str:
    """backend() for the device of tensor `t` (`device_index` = t.get_device()), without building
    t.device on the warm path of a CUDA tensor."""
    if not t.is_cuda:
        return backend(function, t.device, available)
    key = (function, device_index, available, _backend_setting())
    choice = _cuda_choices.get(key)
    if choice is None:
        chosen = backend(function, t.device, available)  # or raises
        choice = _cuda_choices[key] = (chosen, _reasons[function, t.device], t.device)
    else:
        # the reason of the choice in force, for print_config_once (DG_BACKEND may have changed)
        _reasons[function, choice[2]] = choice[1]
    return choice[0]


# Counts clear_caches() calls; callers that cache what follows from a choice key on it.
generation = 0


def clear_caches() -> None:
    """Forget the device facts and choices (tests that fake devices)."""
    global generation
    generation += 1
    _backend_for_device.cache_clear()
    _choices.clear()
    _cuda_choices.clear()
    _reasons.clear()


def backend_reason(device: torch.device) -> str:
    """Why the device gets the backend it gets, for a function with every backend."""
    return _choose("every function", device, (SM90, SM100, PORTABLE))[1]


_printed: set = set()


def print_config_once(function: str, problem: tuple, device: torch.device, config) -> None:
    if not env_flag("DG_PRINT_CONFIGS") and not env_flag("DG_JIT_DEBUG"):
        return
    key = (function, problem, device)
    if key in _printed:
        return
    _printed.add(key)
    reason = _reasons.get((function, device)) or backend_reason(device)
    print(f"[dg_triton] {function}{problem} on {device}: {reason}; config {config}", file=sys.stderr)
