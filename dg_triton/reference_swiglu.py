"""Reference math of the SwiGLU activation between MoE linear 1 and linear 2, and of its fusion with
the per-token FP8 cast, in plain torch on any device. This is the specification the Triton kernels
of ``dg_triton.triton.swiglu`` are tested against; the public wrappers of ``dg_triton.activation`` run
it on non-CUDA tensors. No argument checks here beyond what the math needs: the wrappers validate.

``x`` is bf16 ``[M, 2*I]``: the gate is ``x[:, :I]``, the up projection ``x[:, I:]``. In fp32:

    gate = min(gate, c); up = clamp(up, -c, c)        # only with a clamp c (torch.clamp, NaN kept)
    act  = (gate / (1 + exp(-gate))) * up             # silu(gate) * up, in this order
    act  = act * w[row]                               # only with routing weights w ([M], upcast)

The clamp ``c`` is applied as the fp32 value nearest to it (what a kernel receives). The fused
cast is ``per_token_cast_to_fp8`` of that fp32 ``act`` (API.md 2.1 / 3.15): there is **no bf16
intermediate**. The unfused sequence ``swiglu`` -> ``per_token_cast_to_fp8`` rounds ``act`` to bf16
first (8 significant bits), so its scales and codes carry one more rounding: the fused result is
the more accurate of the two, and the two differ in general.
"""
import torch

from . import reference_quant
from .reference_quant import pack_ue8m0_to_int

__all__ = [
    "pack_ue8m0_padded",
    "silu",
    "swiglu",
    "swiglu_fp32",
    "swiglu_per_token_cast_to_fp8",
]

# Looked up at call time, so the interpreter tests can substitute numpy's exp (what ``tl.exp`` runs
# under TRITON_INTERPRET=1) and check every other step of the kernels bitwise: torch's and numpy's
# fp32 exp differ in the last bit on about 5% of bf16 inputs. (On CUDA the kernels call the same
# libdevice expf as torch's CUDA exp.)
_exp = torch.exp


def silu(gate: torch.Tensor) -> torch.Tensor:
    """``gate / (1 + exp(-gate))`` of an fp32 tensor, in fp32."""
    return gate / (1.0 + _exp(-gate))


def _fp32_clamp(clamp: float) -> float:
    return torch.tensor(float(clamp), dtype=torch.float32).item()


def swiglu_fp32(x: torch.Tensor, routing_weights=None, clamp=None) -> torch.Tensor:
    """fp32 ``[M, I]`` activation of bf16 ``x`` ``[M, 2*I]`` (module docstring)."""
    intermediate = x.size(1) // 2
    gate = x[:, :intermediate].float()
    up = x[:, intermediate:].float()
    if clamp is not None:
        limit = _fp32_clamp(clamp)
        gate = gate.clamp(max=limit)
        up = up.clamp(-limit, limit)
    act = silu(gate) * up
    if routing_weights is not None:
        act = act * routing_weights.float().unsqueeze(1)
    return act


def swiglu(x: torch.Tensor, routing_weights=None, clamp=None) -> torch.Tensor:
    """The unfused activation: ``swiglu_fp32`` rounded to bf16 (RTNE), ``[M, I]``."""
    return swiglu_fp32(x, routing_weights, clamp).to(torch.bfloat16)


def pack_ue8m0_padded(sf: torch.Tensor) -> torch.Tensor:
    """fp32 ``[M, G]`` powers of two -> packed int32 ``[M, ceil(G/4)]`` (API.md 2.2): groups past
    ``G`` are byte 0, as the SM100 SF layout defines them."""
    missing = -sf.size(1) % 4
    if missing:
        sf = torch.cat([sf, sf.new_zeros(sf.size(0), missing)], dim=1)
    return pack_ue8m0_to_int(sf)


def swiglu_per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                                 routing_weights=None, clamp=None, use_packed_ue8m0: bool = False):
    """``per_token_cast_to_fp8(swiglu_fp32(x, routing_weights, clamp), use_ue8m0, gran_k)``:
    ``(q [M, I] float8_e4m3fn, sf fp32 [M, ceil(I/gran_k)])``, or with ``use_packed_ue8m0`` (needs
    ``use_ue8m0``) sf packed by ``pack_ue8m0_padded`` to int32 ``[M, ceil(ceil(I/gran_k)/4)]``.
    Row-major sf; the public wrapper applies the TMA-aligned layout."""
    act = swiglu_fp32(x, routing_weights, clamp)
    if act.size(0) == 0:
        # No tokens (an expert nobody was routed to); reference_quant's view(m, -1, gran_k) cannot
        # infer a size from 0 elements.
        sf = act.new_empty((0, -(-act.size(1) // gran_k)))
        q = act.to(torch.float8_e4m3fn)
    else:
        q, sf = reference_quant.per_token_cast_to_fp8(act, use_ue8m0, gran_k)
    return q, (pack_ue8m0_padded(sf) if use_packed_ue8m0 else sf)
