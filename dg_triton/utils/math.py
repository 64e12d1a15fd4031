"""Helpers of ``deep_gemm.utils.math`` (API.md 3.15), re-exported at the top level.

The cast helpers of API.md 3.15 belong here too; whoever adds one also lists it in ``__all__`` so
``dg_triton.utils`` picks it up.

The FP8 casts run the Triton kernels of ``dg_triton.triton.quant`` on CUDA tensors and the
plain-torch reference (``dg_triton.reference_quant``) on any other device, so they work
everywhere, as DeepGEMM's pure-torch helpers do.
"""
import torch

from .. import reference_quant
from ..errors import reject
from ..reference_quant import ceil_to_ue8m0, pack_ue8m0_to_int, unpack_ue8m0_from_int

__all__ = [
    "ceil_div",
    "align",
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "unpack_ue8m0_from_int",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
]


def ceil_div(x: int, y: int) -> int:
    # Plain integer arithmetic, no checks: it runs inside every shape computation on the call path.
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    return ceil_div(x, y) * y


_CAST_INPUT_DTYPES = (torch.bfloat16, torch.float32)


def _check_cast_input(function: str, x, gran_k) -> int:
    """The checks every FP8 cast shares; returns gran_k as an int."""
    if not isinstance(x, torch.Tensor):
        raise reject(function, "x", "a torch.Tensor", type(x).__name__)
    if x.dim() != 2:
        raise reject(function, "x", "2-D [m, n]", f"{x.dim()}-D shape {tuple(x.shape)}")
    if x.dtype not in _CAST_INPUT_DTYPES:
        raise reject(function, "x", "torch.bfloat16 or torch.float32", x.dtype)
    if isinstance(gran_k, bool) or not isinstance(gran_k, int) or gran_k <= 0:
        raise reject(function, "gran_k", "a positive int", repr(gran_k))
    if x.is_cuda and gran_k & (gran_k - 1):
        # tl.arange needs a power-of-two extent.
        raise reject(function, "gran_k", "a power of two for CUDA tensors", gran_k)
    return gran_k


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                          use_packed_ue8m0: bool = False, tma_aligned_sf: bool = False):
    """1 x gran_k FP8 E4M3 cast of 2-D ``x`` [m, n] (API.md 3.15).

    Returns ``(q [m, n] float8_e4m3fn, sf fp32 [m, ceil(n/gran_k)])``, or with
    ``use_packed_ue8m0`` (needs ``use_ue8m0`` and ``ceil(n/gran_k) % 4 == 0``) int32
    ``[m, ceil(n/gran_k)/4]``. ``tma_aligned_sf`` (a dg_triton extension) returns sf already in
    the TMA-aligned MN-major layout of API.md 2.3 (strides ``(1, align(m, 4))``), the layout the
    GEMMs read, so no separate transform is needed.
    """
    function = "per_token_cast_to_fp8"
    gran_k = _check_cast_input(function, x, gran_k)
    num_groups = ceil_div(x.size(1), gran_k)
    if use_packed_ue8m0 and not use_ue8m0:
        raise reject(function, "use_ue8m0", "True when use_packed_ue8m0 is True", use_ue8m0)
    if use_packed_ue8m0 and num_groups % 4:
        raise reject(function, "x", f"ceil(n / gran_k) a multiple of 4 when use_packed_ue8m0 "
                     f"(n={x.size(1)}, gran_k={gran_k})", num_groups)
    if x.is_cuda:
        # Imported on first CUDA use: triton is slow to import and not needed on CPU.
        from ..triton.quant import per_token_cast_to_fp8_triton
        return per_token_cast_to_fp8_triton(x, bool(use_ue8m0), gran_k, bool(use_packed_ue8m0),
                                            bool(tma_aligned_sf))
    q, sf = reference_quant.per_token_cast_to_fp8(x, bool(use_ue8m0), gran_k,
                                                  bool(use_packed_ue8m0))
    if tma_aligned_sf:
        # Imported here: reference_sf_layout imports this module.
        from ..reference_sf_layout import empty_mn_major_tma_aligned
        aligned = empty_mn_major_tma_aligned(sf.shape, sf.dtype, sf.device)
        aligned.copy_(sf)
        sf = aligned
    return q, sf


def per_block_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128):
    """gran_k x gran_k FP8 E4M3 cast of 2-D ``x`` [m, n] (API.md 3.15):
    ``(q [m, n] float8_e4m3fn, sf fp32 [ceil(m/gran_k), ceil(n/gran_k)])``."""
    gran_k = _check_cast_input("per_block_cast_to_fp8", x, gran_k)
    if x.is_cuda:
        from ..triton.quant import per_block_cast_to_fp8_triton
        return per_block_cast_to_fp8_triton(x, bool(use_ue8m0), gran_k)
    return reference_quant.per_block_cast_to_fp8(x, bool(use_ue8m0), gran_k)


def per_channel_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128):
    """gran_k x 1 FP8 E4M3 cast of 2-D ``x`` [m, n], ``m % gran_k == 0`` (API.md 3.15):
    ``(q [m, n] float8_e4m3fn, sf fp32 [m/gran_k, n])``."""
    function = "per_channel_cast_to_fp8"
    gran_k = _check_cast_input(function, x, gran_k)
    if x.size(0) % gran_k:
        raise reject(function, "x", f"m a multiple of gran_k={gran_k}", f"m={x.size(0)}")
    if x.is_cuda:
        from ..triton.quant import per_channel_cast_to_fp8_triton
        return per_channel_cast_to_fp8_triton(x, bool(use_ue8m0), gran_k)
    return reference_quant.per_channel_cast_to_fp8(x, bool(use_ue8m0), gran_k)
