"""Reference math of the scale-factor layouts, API.md 2.3-2.5, in plain torch (any device).

These are the definitions the Triton kernels of ``dg_triton.triton.sf_layout`` are tested against
bitwise, and what the public helpers of ``dg_triton.utils.layout`` run on non-CUDA tensors. They do
no argument checking (the public functions do).

TMA-aligned MN-major layout (2.3), for 4-byte SFs: ``aligned_mn = align(MN, 4)``; element
``(g, r, j)`` of ``[G, MN, SK]`` lives at offset ``g*aligned_mn*SK + j*aligned_mn + r``. The padding
rows ``MN..aligned_mn-1`` are unspecified by the definition; here (and in the kernels) they are 0.

Packed UE8M0 (2.2): byte ``j`` (LSB = byte 0) of int32 word ``p`` is the biased exponent
``(fp32_bits >> 23) & 0xFF`` of K-group ``4p + j``; groups past ``SK`` give byte 0.

PSUM row selection (2.5): with ``psum_layout`` (end rows ``psum[g]`` of the m-grouped experts), row
``r`` is packed only if ``align(psum[g-1], mk_alignment) <= r < psum[g]`` for some ``g``
(``psum[-1] := 0``); every other row is not read and is written as packed 0.

K-grouped packing (2.5): the SF rows of group ``g`` (``ceil(k_g / gran_k)`` of them, groups back to
back in the input) are packed four per int32 on their own, the group's last word padded with 0
bytes, and the groups' packed rows are concatenated. ``k_g`` comes from ``grouped_layout``; a value
that would make ``k_g`` negative (a malformed layout) counts as an empty group, here and in the
kernel, so both stay defined and equal on any input.
"""
import torch

from .utils.math import align, ceil_div

__all__ = [
    "broadcast_sf_rows",
    "empty_mn_major_tma_aligned",
    "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_mn_major_tma_aligned_tensor",
    "is_mn_major_tma_aligned",
    "k_grouped_packed_sf_k",
    "k_grouped_sizes",
    "pack_k_groups",
    "psum_row_mask",
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


def _pack_exponents(exponents: torch.Tensor, dim: int) -> torch.Tensor:
    """int64 exponents with a size-4 ``dim`` -> int32 words (byte j from index j of ``dim``)."""
    words = sum(exponents.select(dim, j) << (8 * j) for j in range(4))
    # Words with byte 3 >= 128 exceed int32's range as int64; wrap them to their int32 bit pattern.
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _exponents(sf: torch.Tensor) -> torch.Tensor:
    return ((sf.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.int64)


def psum_row_mask(psum_layout, mn: int, mk_alignment: int) -> torch.Tensor:
    """Bool ``[mn]``: rows inside some ``[align(psum[g-1], mk_alignment), psum[g])`` (2.5)."""
    ends = psum_layout.tolist() if isinstance(psum_layout, torch.Tensor) else list(psum_layout)
    rows = torch.arange(mn)
    mask = torch.zeros(mn, dtype=torch.bool)
    previous_end = 0
    for end in ends:
        mask |= (rows >= align(previous_end, mk_alignment)) & (rows < end)
        previous_end = end
    return mask


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor, /, psum_layout=None,
                                                 mk_alignment: int | None = None) -> torch.Tensor:
    """fp32 ``[.., MN, SK]`` powers of two -> int32 ``[.., MN, ceil(SK/4)]`` packed UE8M0 (2.2), in
    the 2.3 layout. A value that is not a power of two contributes its exponent byte anyway (the
    mantissa is dropped), exactly as the kernel does; DeepGEMM would device-assert instead.

    With ``psum_layout`` (2-D ``sf`` only) and ``mk_alignment``, rows outside every expert's range
    are written as 0 whatever they hold (``psum_row_mask``)."""
    *batch, mn, sk = sf.shape
    packed_sk = ceil_div(sk, 4)
    exponents = _exponents(sf)
    if psum_layout is not None:
        exponents = exponents * psum_row_mask(psum_layout, mn, mk_alignment).to(sf.device)[:, None]
    groups = torch.zeros(*batch, mn, packed_sk * 4, dtype=torch.int64, device=sf.device)
    groups[..., :sk] = exponents
    words = _pack_exponents(groups.view(*batch, mn, packed_sk, 4), -1)
    out = empty_mn_major_tma_aligned(words.shape, torch.int32, sf.device)
    out.copy_(words)
    return out


def k_grouped_sizes(grouped_layout, k_alignment: int, use_psum_layout: bool) -> list[int]:
    """``k_g`` of every group: ``grouped_layout[g]``, or with the psum layout
    ``end_g - align(end_{g-1}, k_alignment)`` (``end_{-1} := 0``). Negative sizes and negative
    previous ends (malformed layouts) read as 0."""
    values = grouped_layout.tolist() if isinstance(grouped_layout, torch.Tensor) else list(grouped_layout)
    sizes = []
    previous_end = 0
    for value in values:
        size = value - align(max(previous_end, 0), k_alignment) if use_psum_layout else value
        sizes.append(max(size, 0))
        previous_end = value
    return sizes


def k_grouped_packed_sf_k(ks_cpu, sf_k: int, num_groups: int, gran_k: int) -> int:
    """Packed rows PK of the k-grouped output (2.5): exact from the host's ``ks_cpu``, else the
    bound ``(SFK + 3G) // 4`` (each group's last word wastes at most 3 bytes)."""
    if ks_cpu:
        return sum(ceil_div(k, 4 * gran_k) for k in ks_cpu)
    return (sf_k + 3 * num_groups) // 4


def pack_k_groups(sf: torch.Tensor, sizes: list[int], packed_sf_k: int, gran_k: int) -> torch.Tensor:
    """fp32 ``[SFK, MN]`` -> int32 ``[packed_sf_k, MN]``: group g (``ceil(sizes[g] / gran_k)`` SF
    rows, back to back) packed on its own, groups concatenated, rows past the content 0. SF rows
    past SFK read as 0 and packed rows past ``packed_sf_k`` are dropped, so sizes inconsistent with
    ``sf`` or ``packed_sf_k`` never read or write out of bounds."""
    sf_k, mn = sf.shape
    exponents = _exponents(sf)
    out = torch.zeros(packed_sf_k, mn, dtype=torch.int32, device=sf.device)
    sf_row = packed_row = 0
    for size in sizes:
        num_sf_rows = ceil_div(size, gran_k)
        num_packed_rows = ceil_div(num_sf_rows, 4)
        kept = max(0, min(num_packed_rows, packed_sf_k - packed_row))
        if kept:
            group = torch.zeros(4 * kept, mn, dtype=torch.int64, device=sf.device)
            rows = exponents[sf_row:min(sf_row + min(num_sf_rows, 4 * kept), sf_k)]
            group[:rows.size(0)] = rows
            out[packed_row:packed_row + kept] = _pack_exponents(group.view(kept, 4, mn), 1)
        sf_row += num_sf_rows
        packed_row += num_packed_rows
    return out


def get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor, grouped_layout, ks_cpu, gran_k: int,
                                                           k_alignment: int, use_psum_layout: bool = False
                                                           ) -> torch.Tensor:
    """fp32 ``[SFK, MN]`` k-grouped per-channel SFs -> int32 ``[PK, MN]`` row-major, each group
    packed on its own, groups concatenated (2.5). Group sizes (and so which SF rows are packed
    where) come from ``grouped_layout``; PK from ``k_grouped_packed_sf_k``; see ``pack_k_groups``."""
    sizes = k_grouped_sizes(grouped_layout, k_alignment, use_psum_layout)
    packed_sf_k = k_grouped_packed_sf_k(ks_cpu, sf.size(0), len(sizes), gran_k)
    return pack_k_groups(sf, sizes, packed_sf_k, gran_k)


def broadcast_sf_rows(sf: torch.Tensor, mn: int, gran_mn: int) -> torch.Tensor:
    """Row ``r`` of the result is row ``r // gran_mn`` of ``sf``, for ``r < mn`` (2.4, SM100 row)."""
    rows = torch.arange(mn, device=sf.device) // gran_mn
    return sf.index_select(-2, rows)
