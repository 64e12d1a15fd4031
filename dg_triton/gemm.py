"""Dense GEMMs: D = C + A @ B (API.md 3.2). Every alias rewrites its physical operands into the
logical NT problem (A [M, K], B [N, K]) with views, never copies; the NT core validates,
dispatches (the SM90 CUDA kernel -- or for M up to heuristics.sm90.BF16_GEMV_MAX_M (1) at K from
BF16_GEMV_MIN_K with K-major operands, the CUDA-core GEMV of dg_triton/triton/gemv.py -- or the portable Triton
kernel: dispatch.py) and launches.
"""
import torch

from dg_triton import dispatch, settings, validation
from dg_triton.heuristics import sm90 as heuristics
from dg_triton.kernels import sm90_bf16_gemm


# Warm calls: (plan, device index) of every SM90 problem launched before, keyed by all that
# validation, the backend choice and the plan read from the arguments and settings (shapes,
# strides, dtypes, devices, whether c is d, compiled_dims, the runtime settings, DG_BACKEND,
# dispatch's cache generation). A hit checks only what the key leaves out, the addresses' 16-byte
# alignment, and launches: the full checks cost 3-5 us of host time a call (profile_host.py).
# Calls with a `c` other than d, and anything unusual, take the full path, which names the bad
# argument. (grouped.py keeps the same kind of table for the M-grouped GEMMs.)
_warm_plans: dict = {}
_WARM_PLANS_MAX = 1024


def _warm_key(function: str, a, b, d, c, compiled_dims):
    # Anything but a str compiled_dims (a list is unhashable) takes the full path, which names it;
    # the type check is cheaper than hashing the key twice.
    if (c is not None and c is not d) or type(compiled_dims) is not str:
        return None
    try:
        return (function, a.shape, a.stride(), a.dtype, a.get_device(), a.is_cuda,
                b.shape, b.stride(), b.dtype, b.get_device(), b.is_cuda,
                d.shape, d.stride(), d.dtype, d.get_device(), d.is_cuda, c is None, compiled_dims,
                settings._plan_settings, dispatch._backend_setting(), dispatch.generation)
    except Exception:  # not tensors, or tensors without strides (sparse, nested): the full path
        return None


def _bf16_gemm(function: str, a, b, d, c, compiled_dims: str) -> None:
    key = _warm_key(function, a, b, d, c, compiled_dims)
    warm = _warm_plans.get(key) if key is not None else None
    if warm is not None:
        a_ptr, b_ptr, d_ptr = a.data_ptr(), b.data_ptr(), d.data_ptr()
        if not (a_ptr | b_ptr | d_ptr) & 15:
            plan, device_index = warm
            plan.launch(a_ptr, b_ptr, d_ptr, device_index)
            return
    validation.compiled_dims_argument(function, compiled_dims)
    m, n, k, a_k_major, b_k_major, device_index, layout, addresses = validation.bf16_gemm(
        function, a, b, d, c)
    # Empty problems (API.md 1.3): nothing to multiply, no kernel.
    if m == 0 or n == 0:
        return
    if k == 0:
        if c is None:
            d.zero_()
        elif c is not d:
            d.copy_(c)
        return
    backend = dispatch.backend_of(function, d, device_index, (dispatch.SM90,))  # refuse before touching d
    if c is not None and c is not d:
        d.copy_(c)
    if backend == dispatch.PORTABLE:
        from dg_triton.triton import gemm_portable  # imports Triton: only when used
        gemm_portable.bf16_gemm(function, a, b, d, c is not None)
        return
    if heuristics.takes_gemv(m, k, fp8=False) and a_k_major and b_k_major:
        from dg_triton.triton import gemv  # imports Triton: only when used
        gemv.bf16_gemv(function, a, b, d, c is not None)
        return
    plan = sm90_bf16_gemm.run(function, a, b, d,
                              (m, n, k, a_k_major, b_k_major, device_index, layout), addresses,
                              c is not None, compiled_dims)
    if key is not None and d.is_cuda:
        if len(_warm_plans) >= _WARM_PLANS_MAX:
            _warm_plans.clear()
        _warm_plans[key] = (plan, device_index)


def _transpose(t):
    # Only tensors are transposed; anything else reaches validation as it came.
    return t.transpose(0, 1) if isinstance(t, torch.Tensor) and t.dim() == 2 else t


def bf16_gemm_nt(a, b, d, c=None, compiled_dims: str = "nk") -> None:
    """d = c + a @ b.T with a [M, K], b [N, K] BF16, d/c [M, N] BF16 or FP32 (N-major)."""
    _bf16_gemm("bf16_gemm_nt", a, b, d, c, compiled_dims)


def bf16_gemm_nn(a, b, d, c=None, compiled_dims: str = "nk") -> None:
    """d = c + a @ b with a [M, K], b [K, N]."""
    _bf16_gemm("bf16_gemm_nn", a, _transpose(b), d, c, compiled_dims)


def bf16_gemm_tn(a, b, d, c=None, compiled_dims: str = "mn") -> None:
    """d = c + a.T @ b with a [K, M], b [K, N]."""
    _bf16_gemm("bf16_gemm_tn", _transpose(a), _transpose(b), d, c, compiled_dims)


def bf16_gemm_tt(a, b, d, c=None, compiled_dims: str = "mn") -> None:
    """d = c + a.T @ b.T with a [K, M], b [N, K]."""
    _bf16_gemm("bf16_gemm_tt", _transpose(a), b, d, c, compiled_dims)
