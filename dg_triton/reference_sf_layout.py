"""Reference math of the scale-factor layouts, API.md 2.3-2.5, in plain torch (any device).

These are the definitions the Triton kernels of ``dg_triton.triton.sf_layout`` are tested against
bitwise, and what the public helpers of ``dg_triton.utils.layout`` run on non-CUDA tensors. They do
no argument checking (the public functions do).

TMA-aligned MN-major layout (2.3), for 4-byte SFs: ``aligned_mn = align(MN, 4)``; element
``(g, r, j)`` of ``[G, MN, SK]`` lives at offset ``g*aligned_mn*SK + j*aligned_mn + r``. The padding
rows ``MN..aligned_mn-1`` are unspecified by the definition; here (and in the kernels) they are 0.

Packed UE8M0 (2.2): byte ``j`` (LSB = byte 0) of int32 word ``p`` is the biased exponent
``(fp32_bits >> 23) & 0xFF`` of K-group ``4p + j``; groups past ``SK`` give byte 0.
"""
import torch

from .utils.math import align, ceil_div

__all__ = [
    "is_mn_major_tma_aligned",
    "empty_mn_major_tma_aligned",
    "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "broadcast_sf_rows",
]

# 4-byte SFs (fp32, int32): 16-byte TMA stride alignment / 4 bytes (2.3).
_MN_ALIGNMENT = 4


def is_mn_major_tma_aligned(sf: torch.Tensor) -> bool:
    """Whether a 2-D/3-D 4-byte ``sf`` already has the 2.3 layout (the check of 2.3)."""
    mn, sk = sf.shape[-2:]
    if sf.stride(-2) != 1 and mn != 1:
        return False
    if sf.stride(-1) != align(mn, _MN_ALIGNMENT):
        return False
    return sf.dim() == 2 or sf.stride(-3) == sf.stride(-1) * sk


def empty_mn_major_tma_aligned(shape, dtype, device) -> torch.Tensor:
    """A zero-filled ``[.., MN, SK]`` tensor in the 2.3 layout (padding rows included, as 0)."""
    *batch, mn, sk = shape
    storage = torch.zeros(*batch, sk, align(mn, _MN_ALIGNMENT), dtype=dtype, device=device)
    return storage.mT[..., :mn, :]


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor, /) -> torch.Tensor:
    """The values of ``sf`` ([MN, SK] or [G, MN, SK]) in the 2.3 layout; ``sf`` itself if it already
    has that layout."""
    if is_mn_major_tma_aligned(sf):
        return sf
    out = empty_mn_major_tma_aligned(sf.shape, sf.dtype, sf.device)
    out.copy_(sf)
    return out


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor, /) -> torch.Tensor:
    """fp32 ``[.., MN, SK]`` powers of two -> int32 ``[.., MN, ceil(SK/4)]`` packed UE8M0 (2.2), in
    the 2.3 layout. A value that is not a power of two contributes its exponent byte anyway (the
    mantissa is dropped), exactly as the kernel does; DeepGEMM would device-assert instead."""
    *batch, mn, sk = sf.shape
    packed_sk = ceil_div(sk, 4)
    exponents = (sf.contiguous().view(torch.int32) >> 23) & 0xFF
    groups = torch.zeros(*batch, mn, packed_sk * 4, dtype=torch.int64, device=sf.device)
    groups[..., :sk] = exponents
    groups = groups.view(*batch, mn, packed_sk, 4)
    words = sum(groups[..., j] << (8 * j) for j in range(4))
    # Words with byte 3 >= 128 exceed int32's range as int64; wrap them to their int32 bit pattern.
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    out = empty_mn_major_tma_aligned(words.shape, torch.int32, sf.device)
    out.copy_(words)
    return out


def broadcast_sf_rows(sf: torch.Tensor, mn: int, gran_mn: int) -> torch.Tensor:
    """Row ``r`` of the result is row ``r // gran_mn`` of ``sf``, for ``r < mn`` (2.4, SM100 row)."""
    rows = torch.arange(mn, device=sf.device) // gran_mn
    return sf.index_select(-2, rows)
