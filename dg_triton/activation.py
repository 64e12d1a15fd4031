"""SwiGLU between MoE linear 1 and linear 2 (a dg_triton extension; DeepGEMM fuses it inside Mega
MoE only): the bare activation, and the activation fused with the per-token FP8 cast that feeds
linear 2 (one read of x, one write of q and its scales).

``x`` is bf16 ``[M, 2*I]`` with gate ``x[:, :I]`` and up ``x[:, I:]``; the math is
``dg_triton.reference_swiglu`` (fp32 throughout, optional clamp and per-row routing weight). The
fused cast quantizes the fp32 activation directly, while ``swiglu`` followed by
``per_token_cast_to_fp8`` rounds it to bf16 in between: the fused result is the more accurate one,
and the two differ in general.

On CUDA tensors these run the Triton kernels of ``dg_triton.triton.swiglu``; on any other device
the plain-torch reference, so they work everywhere.
"""
import torch

from . import reference_swiglu
from .errors import reject
from .reference_sf_layout import empty_mn_major_tma_aligned

__all__ = ["swiglu", "swiglu_per_token_cast_to_fp8"]

_WEIGHT_DTYPES = (torch.float32, torch.bfloat16)


def _check_x(function: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise reject(function, "x", "a torch.Tensor", type(x).__name__)
    if x.dim() != 2:
        raise reject(function, "x", "2-D [M, 2*I]", f"{x.dim()}-D shape {tuple(x.shape)}")
    if x.dtype != torch.bfloat16:
        raise reject(function, "x", "torch.bfloat16", x.dtype)
    if x.size(1) == 0 or x.size(1) % 2:
        raise reject(function, "x", "[M, 2*I] with an even, non-zero last dim (gate | up)",
                     f"shape {tuple(x.shape)}")


def _check_routing_weights(function: str, x: torch.Tensor, routing_weights) -> None:
    if routing_weights is None:
        return
    argument = "routing_weights"
    if not isinstance(routing_weights, torch.Tensor):
        raise reject(function, argument, "a torch.Tensor or None", type(routing_weights).__name__)
    if routing_weights.dim() != 1 or routing_weights.size(0) != x.size(0):
        raise reject(function, argument, f"1-D of shape [M] = [{x.size(0)}]",
                     f"shape {tuple(routing_weights.shape)}")
    if routing_weights.dtype not in _WEIGHT_DTYPES:
        raise reject(function, argument, "torch.float32 or torch.bfloat16", routing_weights.dtype)
    if routing_weights.device != x.device:
        raise reject(function, argument, f"on x's device {x.device}", routing_weights.device)


def _check_clamp(function: str, clamp):
    """Returns the clamp as a float (or None)."""
    if clamp is None:
        return None
    if isinstance(clamp, bool) or not isinstance(clamp, (int, float)):
        raise reject(function, "clamp", "a float >= 0 or None", repr(clamp))
    # `not >=` also turns NaN away.
    if not clamp >= 0:
        raise reject(function, "clamp", "a float >= 0 or None", repr(clamp))
    return float(clamp)


def _check_gran_k(function: str, x: torch.Tensor, gran_k) -> int:
    if isinstance(gran_k, bool) or not isinstance(gran_k, int) or gran_k <= 0:
        raise reject(function, "gran_k", "a positive int", repr(gran_k))
    if x.is_cuda:
        from .triton.swiglu import MAX_GRAN_K, MAX_GROUPS
        # tl.arange needs a power-of-two extent, and one group must fit a program's registers.
        if gran_k & (gran_k - 1) or gran_k > MAX_GRAN_K:
            raise reject(function, "gran_k", f"a power of two <= {MAX_GRAN_K} for CUDA tensors",
                         gran_k)
        num_groups = -(-(x.size(1) // 2) // gran_k)
        if num_groups > MAX_GROUPS:
            raise reject(function, "gran_k", f"at least I / {MAX_GROUPS} for CUDA tensors "
                         f"(I={x.size(1) // 2}: at most {MAX_GROUPS} groups per row)", gran_k)
    return gran_k


def swiglu(x: torch.Tensor, routing_weights=None, clamp=None) -> torch.Tensor:
    """SwiGLU of bf16 ``x`` ``[M, 2*I]``: ``silu(gate) * up [* routing_weights[row]]`` in fp32,
    rounded to bf16 ``[M, I]``. ``routing_weights``: fp32 or bf16 ``[M]`` on x's device, or None.
    ``clamp`` (float >= 0, or None): ``gate = min(gate, clamp)``, ``up = clamp(up, -clamp, clamp)``
    before the activation, with the clamp rounded to fp32."""
    function = "swiglu"
    _check_x(function, x)
    _check_routing_weights(function, x, routing_weights)
    clamp = _check_clamp(function, clamp)
    if x.is_cuda:
        # Imported on first CUDA use: triton is slow to import and not needed on CPU.
        from .triton.swiglu import swiglu_triton
        return swiglu_triton(x, routing_weights, clamp)
    return reference_swiglu.swiglu(x, routing_weights, clamp)


def swiglu_per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128,
                                 routing_weights=None, clamp=None, tma_aligned_sf: bool = True,
                                 use_packed_ue8m0: bool = False):
    """``swiglu`` fused with the per-token 1 x gran_k FP8 E4M3 cast of its fp32 result (no bf16
    intermediate), exactly as ``per_token_cast_to_fp8`` would cast that fp32 activation.

    Returns ``(q [M, I] float8_e4m3fn, sf)``: sf fp32 ``[M, ceil(I/gran_k)]`` (groups over the I
    output columns, the tail zero-padded), or with ``use_packed_ue8m0`` (needs ``use_ue8m0``)
    packed UE8M0 int32 ``[M, ceil(ceil(I/gran_k)/4)]`` whose missing groups are byte 0 (API.md 2.2).
    By default sf is in the TMA-aligned MN-major layout the GEMMs read (strides
    ``(1, align(M, 4))``, API.md 2.3, padding rows 0); ``tma_aligned_sf=False`` gives row-major.
    """
    function = "swiglu_per_token_cast_to_fp8"
    _check_x(function, x)
    gran_k = _check_gran_k(function, x, gran_k)
    _check_routing_weights(function, x, routing_weights)
    clamp = _check_clamp(function, clamp)
    if use_packed_ue8m0 and not use_ue8m0:
        raise reject(function, "use_ue8m0", "True when use_packed_ue8m0 is True", use_ue8m0)
    if x.is_cuda:
        from .triton.swiglu import swiglu_per_token_cast_to_fp8_triton
        return swiglu_per_token_cast_to_fp8_triton(
            x, bool(use_ue8m0), gran_k, routing_weights, clamp, bool(tma_aligned_sf),
            bool(use_packed_ue8m0))
    q, sf = reference_swiglu.swiglu_per_token_cast_to_fp8(
        x, bool(use_ue8m0), gran_k, routing_weights, clamp, bool(use_packed_ue8m0))
    if tma_aligned_sf:
        aligned = empty_mn_major_tma_aligned(sf.shape, sf.dtype, sf.device)
        aligned.copy_(sf)
        sf = aligned
    return q, sf
