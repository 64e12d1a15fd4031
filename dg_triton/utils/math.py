"""Helpers of ``deep_gemm.utils.math`` (API.md 3.15), re-exported at the top level.

The cast helpers of API.md 3.15 belong here too; whoever adds one also lists it in ``__all__`` so
``dg_triton.utils`` picks it up.

The casts run the Triton kernels of ``dg_triton.triton.quant`` (FP8) and ``dg_triton.triton.fp4``
(FP4) on CUDA tensors and the plain-torch reference (``dg_triton.reference_quant``) on any other
device, so they work everywhere, as DeepGEMM's pure-torch helpers do.
"""
import torch

from .. import reference_quant
from ..errors import reject
from ..reference_quant import ceil_to_ue8m0, pack_ue8m0_to_int, unpack_ue8m0_from_int

__all__ = [
    "align",
    "cast_back_from_fp4",
    "ceil_div",
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "per_custom_dims_cast_to_fp8",
    "per_token_cast_to_fp4",
    "per_token_cast_to_fp8",
    "transpose_packed_fp4",
    "unpack_ue8m0_from_int",
]


def ceil_div(x: int, y: int) -> int:
    # Plain integer arithmetic, no checks: it runs inside every shape computation on the call path.
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    return ceil_div(x, y) * y


_CAST_INPUT_DTYPES = (torch.bfloat16, torch.float32)


def _check_cast_input(function: str, x, gran_k) -> int:
    """The checks every FP8 / FP4 cast shares; returns gran_k as an int."""
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


def _as_tma_aligned(sf: torch.Tensor) -> torch.Tensor:
    """The values of a CPU-computed sf in the TMA-aligned MN-major layout of API.md 2.3."""
    # Imported here: reference_sf_layout imports this module.
    from ..reference_sf_layout import empty_mn_major_tma_aligned
    aligned = empty_mn_major_tma_aligned(sf.shape, sf.dtype, sf.device)
    aligned.copy_(sf)
    return aligned


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
    return q, (_as_tma_aligned(sf) if tma_aligned_sf else sf)


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


def per_custom_dims_cast_to_fp8(x: torch.Tensor, dims, use_ue8m0: bool):
    """FP8 E4M3 cast with one scale per index of the kept ``dims`` (API.md 3.15), the amax taken
    over every other dim: ``(q float8_e4m3fn shaped as x, sf fp32 .squeeze()d)``. E.g.
    ``dims=(0,)`` on a ``[SK, Dh]`` key cache gives one scale a token, ``sf [SK]``. Plain torch on
    any device, as DeepGEMM's helper (the scale tensors it serves are small).

    Negative and repeated dims name the same dim once. When ``dims`` keeps every dim there is
    nothing to reduce and each element gets its own scale, as API.md's "amax over every dim not
    in dims" reads; DeepGEMM's helper instead passes an empty dim tuple to ``amax``, which torch
    treats as "reduce all", so it returns one scale for the whole tensor there. A dim taken the
    amax over must not be empty (there is no amax of nothing); a kept dim may be."""
    function = "per_custom_dims_cast_to_fp8"
    if not isinstance(x, torch.Tensor):
        raise reject(function, "x", "a torch.Tensor", type(x).__name__)
    if x.dtype not in _CAST_INPUT_DTYPES:
        raise reject(function, "x", "torch.bfloat16 or torch.float32", x.dtype)
    if x.dim() == 0:
        raise reject(function, "x", "at least 1-D", "a 0-D tensor")
    kept = tuple(dims) if isinstance(dims, (tuple, list)) else None
    if kept is None or not all(type(d) is int for d in kept):
        raise reject(function, "dims", "a tuple of ints (the dims that keep their own scales)",
                     repr(dims))
    if any(not -x.dim() <= d < x.dim() for d in kept):
        raise reject(function, "dims", f"dims of a {x.dim()}-D x, in [-{x.dim()}, {x.dim()})", kept)
    kept = tuple(sorted({d % x.dim() for d in kept}))
    empty = [d for d in range(x.dim()) if d not in kept and x.size(d) == 0]
    if empty:
        raise reject(function, "x", f"non-empty in the dims its amax is taken over ({empty})",
                     f"shape {tuple(x.shape)}")
    return reference_quant.per_custom_dims_cast_to_fp8(x, kept, bool(use_ue8m0))


def per_token_cast_to_fp4(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                          use_packed_ue8m0: bool = False, tma_aligned_sf: bool = False):
    """1 x gran_k FP4 E2M1 cast of 2-D ``x`` [m, n], n even (API.md 3.15).

    ``sf = max(amax, 1e-4) / 6`` (rounded up to a power of two with ``use_ue8m0``); each value
    ``x * (1 / sf)`` rounds to the nearest E2M1 magnitude, ties toward zero, and codes pack in
    pairs (even column in the low nibble). Returns ``(int8 [m, n/2], sf fp32 [m, ceil(n/gran_k)])``,
    or with ``use_packed_ue8m0`` (needs ``use_ue8m0``) the SF count padded to a multiple of 4
    with 1.0 and packed to int32 ``[m, ceil(ceil(n/gran_k)/4)]``. ``tma_aligned_sf`` (a dg_triton
    extension, as in ``per_token_cast_to_fp8``) returns sf in the TMA-aligned MN-major layout of
    API.md 2.3 (strides ``(1, align(m, 4))``).
    """
    function = "per_token_cast_to_fp4"
    gran_k = _check_cast_input(function, x, gran_k)
    if x.size(1) % 2:
        raise reject(function, "x", "an even number of columns n (two FP4 codes per byte)",
                     f"n={x.size(1)}")
    if use_packed_ue8m0 and not use_ue8m0:
        raise reject(function, "use_ue8m0", "True when use_packed_ue8m0 is True", use_ue8m0)
    if x.is_cuda:
        from ..triton.fp4 import per_token_cast_to_fp4_triton
        return per_token_cast_to_fp4_triton(x, bool(use_ue8m0), gran_k, bool(use_packed_ue8m0),
                                            bool(tma_aligned_sf))
    packed, sf = reference_quant.per_token_cast_to_fp4(x, bool(use_ue8m0), gran_k,
                                                       bool(use_packed_ue8m0))
    return packed, (_as_tma_aligned(sf) if tma_aligned_sf else sf)


def _check_packed_fp4(function: str, argument: str, packed) -> None:
    if not isinstance(packed, torch.Tensor):
        raise reject(function, argument, "a torch.Tensor", type(packed).__name__)
    if packed.dim() != 2:
        raise reject(function, argument, "2-D [m, n/2] packed FP4",
                     f"{packed.dim()}-D shape {tuple(packed.shape)}")
    if packed.dtype != torch.int8:
        raise reject(function, argument, "torch.int8 (two FP4 codes per byte)", packed.dtype)


def transpose_packed_fp4(a: torch.Tensor) -> torch.Tensor:
    """int8 ``[m, n/2]`` packed FP4 (logical ``[m, n]``, m even) -> int8 ``[n, m/2]``, the packed
    form of the logical transpose ``[n, m]`` (API.md 3.15). Codes move unchanged."""
    function = "transpose_packed_fp4"
    _check_packed_fp4(function, "a", a)
    if a.size(0) % 2:
        raise reject(function, "a", "an even number of rows m (they become packed pairs)",
                     f"m={a.size(0)}")
    if a.is_cuda:
        from ..triton.fp4 import transpose_packed_fp4_triton
        return transpose_packed_fp4_triton(a)
    return reference_quant.transpose_packed_fp4(a)


def cast_back_from_fp4(packed: torch.Tensor, sf: torch.Tensor, gran_k: int = 128,
                       use_packed_ue8m0: bool = False) -> torch.Tensor:
    """Dequantize int8 ``[m, n/2]`` FP4 data with its per-token SF (API.md 3.15): fp32
    ``[m, n]``, each value times the SF of its gran_k-group. ``sf`` is fp32
    ``[m, ceil(n/gran_k)]``, or with ``use_packed_ue8m0`` int32 ``[m, ceil(ceil(n/gran_k)/4)]``
    (packed UE8M0); any strides (the TMA-aligned layout included)."""
    function = "cast_back_from_fp4"
    _check_packed_fp4(function, "packed", packed)
    if isinstance(gran_k, bool) or not isinstance(gran_k, int) or gran_k <= 0:
        raise reject(function, "gran_k", "a positive int", repr(gran_k))
    if not isinstance(sf, torch.Tensor):
        raise reject(function, "sf", "a torch.Tensor", type(sf).__name__)
    m, n = packed.size(0), 2 * packed.size(1)
    num_groups = ceil_div(n, gran_k)
    if use_packed_ue8m0:
        expected_dtype, expected_shape = torch.int32, (m, ceil_div(num_groups, 4))
    else:
        expected_dtype, expected_shape = torch.float32, (m, num_groups)
    if sf.dtype != expected_dtype:
        raise reject(function, "sf",
                     f"{expected_dtype} when use_packed_ue8m0={bool(use_packed_ue8m0)}", sf.dtype)
    if tuple(sf.shape) != expected_shape:
        raise reject(function, "sf", f"of shape {expected_shape} for packed {tuple(packed.shape)} "
                     f"and gran_k={gran_k}", tuple(sf.shape))
    if sf.device != packed.device:
        raise reject(function, "sf", f"on the device of packed ({packed.device})", sf.device)
    if packed.is_cuda:
        from ..triton.fp4 import cast_back_from_fp4_triton
        return cast_back_from_fp4_triton(packed, sf, gran_k, bool(use_packed_ue8m0))
    return reference_quant.cast_back_from_fp4(packed, sf, gran_k, bool(use_packed_ue8m0))
