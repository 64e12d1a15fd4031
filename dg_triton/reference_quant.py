"""Reference math for the FP8 casts of API.md 2.1 / 3.15, in plain torch on any device.

These are DeepGEMM's pure-torch helpers, step for step: the Triton kernels in
``dg_triton/triton/quant.py`` are tested bitwise against them, so the order of operations here
(fp32 amax, clamp to 1e-4, divide by 448, optional UE8M0 rounding up, multiply by ``1 / sf``, cast)
is the specification. The public wrappers in ``dg_triton.utils.math`` run these on CPU tensors.
No argument checks here beyond what the math needs: the wrappers validate.
"""
import torch

__all__ = [
    "FP8_E4M3_MAX",
    "SF_AMAX_FLOOR",
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "unpack_ue8m0_from_int",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
]

FP8_E4M3_MAX = 448.0
# A group of zeros would give sf = 0 and 1/sf = inf; the floor keeps q = 0 there (API.md 2.1).
SF_AMAX_FLOOR = 1e-4

_FP32_MANTISSA_MASK = (1 << 23) - 1


def align(x: int, y: int) -> int:
    # A copy of utils.math.align: utils.math imports this module, so this one imports nothing of ours.
    return (x + y - 1) // y * y


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """``|x|`` rounded up to a power of two: biased exponent + 1 when the mantissa is non-zero,
    clamped to [1, 254], mantissa cleared (fp32 out)."""
    bits = x.abs().float().view(torch.int32)
    exponent = ((bits >> 23) & 0xFF) + ((bits & _FP32_MANTISSA_MASK) != 0).to(torch.int32)
    return (exponent.clamp(1, 254) << 23).view(torch.float32)


def pack_ue8m0_to_int(x: torch.Tensor) -> torch.Tensor:
    """fp32 ``[..., 4p]`` powers of two → int32 ``[..., p]``; byte j (little-endian) of element p
    is the biased exponent of ``x[..., 4p + j]``."""
    assert x.dtype == torch.float32 and x.size(-1) % 4 == 0
    bits = x.contiguous().view(torch.int32)
    assert bool(((bits & _FP32_MANTISSA_MASK) == 0).all()) and bool((bits >= 0).all())
    return (bits >> 23).to(torch.uint8).view(torch.int32)


def unpack_ue8m0_from_int(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of ``pack_ue8m0_to_int``: int32 ``[..., p]`` → fp32 ``[..., 4p]``."""
    assert packed.dtype == torch.int32
    return (packed.contiguous().view(torch.uint8).to(torch.int32) << 23).view(torch.float32)


def _scale_from_amax(amax: torch.Tensor, use_ue8m0: bool) -> torch.Tensor:
    sf = amax.clamp(min=SF_AMAX_FLOOR) / FP8_E4M3_MAX
    return ceil_to_ue8m0(sf) if use_ue8m0 else sf


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                          use_packed_ue8m0: bool = False):
    """1 x gran_k groups along each row: ``(q [m, n] fp8, sf fp32 [m, ceil(n/gran_k)])``, or
    the SF packed to int32 ``[m, ceil(n/gran_k)/4]``."""
    assert x.dim() == 2
    m, n = x.shape
    padded_n = align(n, gran_k)
    x_padded = torch.zeros((m, padded_n), dtype=x.dtype, device=x.device)
    x_padded[:, :n] = x
    x_view = x_padded.view(m, -1, gran_k)
    sf = _scale_from_amax(x_view.abs().float().amax(dim=2), use_ue8m0)
    q = (x_view.float() * (1.0 / sf.unsqueeze(2))).to(torch.float8_e4m3fn)
    q = q.view(m, padded_n)[:, :n].contiguous()
    return q, (pack_ue8m0_to_int(sf) if use_packed_ue8m0 else sf)


def per_block_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128):
    """gran_k x gran_k tiles (zero-padded): ``(q [m, n] fp8, sf fp32 [ceil(m/g), ceil(n/g)])``."""
    assert x.dim() == 2
    m, n = x.shape
    x_padded = torch.zeros((align(m, gran_k), align(n, gran_k)), dtype=x.dtype, device=x.device)
    x_padded[:m, :n] = x
    x_view = x_padded.view(-1, gran_k, x_padded.size(1) // gran_k, gran_k)
    sf = _scale_from_amax(x_view.abs().float().amax(dim=(1, 3), keepdim=True), use_ue8m0)
    q = (x_view.float() * (1.0 / sf)).to(torch.float8_e4m3fn)
    return q.view_as(x_padded)[:m, :n].contiguous(), sf.view(x_view.size(0), x_view.size(2))


def per_channel_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128):
    """gran_k consecutive rows of one column (``m % gran_k == 0``):
    ``(q [m, n] fp8, sf fp32 [m/gran_k, n])``."""
    assert x.dim() == 2 and x.size(0) % gran_k == 0
    m, n = x.shape
    x_view = x.reshape(-1, gran_k, n)
    sf = _scale_from_amax(x_view.abs().float().amax(dim=1), use_ue8m0)
    q = (x_view.float() * (1.0 / sf.unsqueeze(1))).to(torch.float8_e4m3fn)
    return q.view(m, n), sf
