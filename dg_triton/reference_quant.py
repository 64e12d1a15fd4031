"""Reference math for the FP8 and FP4 casts of API.md 2.1 / 3.15, in plain torch on any device.

These are DeepGEMM's pure-torch helpers, step for step: the Triton kernels in
``dg_triton/triton/quant.py`` are tested bitwise against them, so the order of operations here
(fp32 amax, clamp to 1e-4, divide by 448, optional UE8M0 rounding up, multiply by ``1 / sf``, cast)
is the specification; the same holds for the FP4 casts and ``dg_triton/triton/fp4.py``. The
public wrappers in ``dg_triton.utils.math`` run these on CPU tensors. No argument checks here
beyond what the math needs: the wrappers validate.
"""
import torch

__all__ = [
    "FP4_E2M1_MAGNITUDES",
    "FP4_E2M1_MAX",
    "FP4_E2M1_THRESHOLDS",
    "FP8_E4M3_MAX",
    "SF_AMAX_FLOOR",
    "cast_back_from_fp4",
    "ceil_to_ue8m0",
    "dequantize_from_fp4_e2m1",
    "pack_fp4_codes",
    "pack_ue8m0_to_int",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "per_custom_dims_cast_to_fp8",
    "per_token_cast_to_fp4",
    "per_token_cast_to_fp8",
    "quantize_to_fp4_e2m1",
    "transpose_packed_fp4",
    "unpack_fp4_codes",
    "unpack_ue8m0_from_int",
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
    if x.size(-1) == 0:  # no SF at all (n == 0): a byte view of an empty last dim is refused
        return torch.empty((*x.shape[:-1], 0), dtype=torch.int32, device=x.device)
    bits = x.contiguous().view(torch.int32)
    assert bool(((bits & _FP32_MANTISSA_MASK) == 0).all()) and bool((bits >= 0).all())
    return (bits >> 23).to(torch.uint8).view(torch.int32)


def unpack_ue8m0_from_int(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of ``pack_ue8m0_to_int``: int32 ``[..., p]`` → fp32 ``[..., 4p]``."""
    assert packed.dtype == torch.int32
    # Shifts, not a byte view: a view needs a unit last stride, which a TMA-aligned [m, 1] packed
    # tensor (strides (1, align(m, 4))) lacks even though .contiguous() does not copy it.
    shifts = torch.arange(0, 32, 8, dtype=torch.int32, device=packed.device)
    exponents = (packed.unsqueeze(-1) >> shifts) & 0xFF
    return (exponents.flatten(-2) << 23).view(torch.float32)


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
    x_view = x_padded.view(m, padded_n // gran_k, gran_k)  # -1 cannot be inferred when m == 0
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
    # Sizes spelled out: -1 cannot be inferred when n == 0.
    x_view = x_padded.view(x_padded.size(0) // gran_k, gran_k, x_padded.size(1) // gran_k, gran_k)
    sf = _scale_from_amax(x_view.abs().float().amax(dim=(1, 3), keepdim=True), use_ue8m0)
    q = (x_view.float() * (1.0 / sf)).to(torch.float8_e4m3fn)
    return q.view_as(x_padded)[:m, :n].contiguous(), sf.view(x_view.size(0), x_view.size(2))


def per_channel_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128):
    """gran_k consecutive rows of one column (``m % gran_k == 0``):
    ``(q [m, n] fp8, sf fp32 [m/gran_k, n])``."""
    assert x.dim() == 2 and x.size(0) % gran_k == 0
    m, n = x.shape
    x_view = x.reshape(m // gran_k, gran_k, n)  # -1 cannot be inferred when n == 0
    sf = _scale_from_amax(x_view.abs().float().amax(dim=1), use_ue8m0)
    q = (x_view.float() * (1.0 / sf.unsqueeze(1))).to(torch.float8_e4m3fn)
    return q.view(m, n), sf


def per_custom_dims_cast_to_fp8(x: torch.Tensor, dims: tuple, use_ue8m0: bool):
    """One scale per index of the kept ``dims``, the amax taken over every other dim:
    ``(q fp8 shaped as x, sf fp32 squeezed)`` (e.g. ``dims=(0,)`` on ``[SK, Dh]`` gives one scale a
    token, ``sf [SK]``). ``squeeze`` drops every size-1 dim of the kept-dims-shaped SF, as
    DeepGEMM's helper does."""
    reduced = tuple(d for d in range(x.dim()) if d not in dims)
    amax = x.abs().float().amax(dim=reduced, keepdim=True) if reduced else x.abs().float()
    sf = _scale_from_amax(amax, use_ue8m0)
    q = (x.float() * (1.0 / sf)).to(torch.float8_e4m3fn)
    return q, sf.squeeze()


# FP4 E2M1 (API.md 1.4): a code is sign << 3 | index, the index picking one of these magnitudes.
FP4_E2M1_MAX = 6.0
FP4_E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring magnitudes. A value exactly on one rounds down (strict ``>``),
# which is torch.bucketize's default (right=False) as DeepGEMM uses it; counting comparisons
# instead of bucketize also gives NaN the index 0 (every comparison is false).
FP4_E2M1_THRESHOLDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def quantize_to_fp4_e2m1(x: torch.Tensor) -> torch.Tensor:
    """fp32 (already scaled) -> E2M1 codes 0..15 as uint8, same shape. Magnitudes above 6 (and
    inf) saturate to index 7. The sign bit is set only for a negative value with a non-zero index,
    so a value that rounds to zero never becomes code 8 ("-0")."""
    magnitude = x.abs()
    index = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for threshold in FP4_E2M1_THRESHOLDS:
        index += (magnitude > threshold).to(torch.uint8)
    negative = (x < 0) & (index != 0)
    return index | (negative.to(torch.uint8) << 3)


def dequantize_from_fp4_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (any integer dtype, low 4 bits used) -> fp32 values; code 8 is +0."""
    magnitudes = torch.tensor(FP4_E2M1_MAGNITUDES, dtype=torch.float32, device=codes.device)
    index = (codes & 0x7).long()
    value = magnitudes[index]
    return torch.where(((codes & 0x8) != 0) & (index != 0), -value, value)


def pack_fp4_codes(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes ``[..., 2p]`` -> int8 ``[..., p]``: element 2i in the low nibble, 2i+1 in the
    high nibble (API.md 1.4)."""
    pairs = codes.to(torch.uint8).reshape(*codes.shape[:-1], codes.size(-1) // 2, 2)
    return ((pairs[..., 0] & 0xF) | ((pairs[..., 1] & 0xF) << 4)).view(torch.int8)


def unpack_fp4_codes(packed: torch.Tensor) -> torch.Tensor:
    """int8/uint8 ``[..., p]`` -> uint8 codes ``[..., 2p]``, the inverse of ``pack_fp4_codes``."""
    byte = packed.view(torch.uint8) if packed.dtype == torch.int8 else packed.to(torch.uint8)
    return torch.stack((byte & 0xF, byte >> 4), dim=-1).reshape(*packed.shape[:-1],
                                                                 2 * packed.size(-1))


def per_token_cast_to_fp4(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                          use_packed_ue8m0: bool = False):
    """1 x gran_k groups along each row of ``x`` [m, n] (n even), FP4 E2M1 data:
    ``(int8 [m, n/2], sf fp32 [m, ceil(n/gran_k)])``, or with ``use_packed_ue8m0`` the SF count
    padded to a multiple of 4 with 1.0 and packed to int32 ``[m, ceil(ceil(n/gran_k)/4)]``."""
    assert x.dim() == 2 and x.size(1) % 2 == 0
    m, n = x.shape
    num_groups = (n + gran_k - 1) // gran_k
    x_padded = torch.zeros((m, num_groups * gran_k), dtype=x.dtype, device=x.device)
    x_padded[:, :n] = x
    x_view = x_padded.view(m, num_groups, gran_k)
    sf = x_view.abs().float().amax(dim=2).clamp_min(SF_AMAX_FLOOR) / FP4_E2M1_MAX
    if use_ue8m0:
        sf = ceil_to_ue8m0(sf)
    codes = quantize_to_fp4_e2m1(x_view.float() * (1.0 / sf.unsqueeze(2)))
    packed = pack_fp4_codes(codes.view(m, num_groups * gran_k)[:, :n])
    if use_packed_ue8m0:
        padded_sf = torch.ones((m, align(num_groups, 4)), dtype=torch.float32, device=x.device)
        padded_sf[:, :num_groups] = sf
        return packed, pack_ue8m0_to_int(padded_sf)
    return packed, sf


def transpose_packed_fp4(a: torch.Tensor) -> torch.Tensor:
    """int8 ``[m, n/2]`` (m even), the packed form of a logical ``[m, n]`` FP4 matrix -> int8
    ``[n, m/2]``, the packed form of its transpose. Codes move unchanged (code 8 stays 8)."""
    assert a.dim() == 2 and a.size(0) % 2 == 0
    return pack_fp4_codes(unpack_fp4_codes(a).t())


def cast_back_from_fp4(packed: torch.Tensor, sf: torch.Tensor, gran_k: int = 128,
                       use_packed_ue8m0: bool = False) -> torch.Tensor:
    """Dequantize int8 ``[m, n/2]`` FP4 data with its per-token SF (fp32 ``[m, ceil(n/gran_k)]``,
    or packed UE8M0 int32): fp32 ``[m, n]``, each value times the SF of its group."""
    assert packed.dim() == 2
    n = packed.size(1) * 2
    if use_packed_ue8m0:
        # Byte j of word p by shifts rather than unpack_ue8m0_from_int's byte view, which needs a
        # unit last stride (a TMA-aligned [m, 1] sf has stride (1, align(m, 4))).
        byte_shifts = torch.arange(0, 32, 8, device=sf.device)
        exponents = (sf.to(torch.int64).unsqueeze(-1) >> byte_shifts) & 0xFF
        sf = (exponents.reshape(sf.size(0), -1).to(torch.int32) << 23).view(torch.float32)
    group_of_column = torch.arange(n, device=packed.device) // gran_k
    return dequantize_from_fp4_e2m1(unpack_fp4_codes(packed)) * sf[:, group_of_column]
