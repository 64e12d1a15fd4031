"""Scale-factor layout kernels (API.md 2.3-2.5): fp32 SFs into the TMA-aligned MN-major layout, and
fp32 power-of-two SFs into packed UE8M0 in that layout.

Each kernel is one pass: read every source element once, write every output word (padding rows
included) once. Launchers allocate the output and launch; they never read device memory on the
host, so they are CUDA-graph safe. Arguments are not checked here: ``dg_triton.utils.layout`` does
that. Reference math: ``dg_triton.reference_sf_layout``.

The kernels move fp32 SFs as int32 bit patterns (the launcher reinterprets the tensor), so the
copy is bitwise by construction (NaN payloads and -0.0 included) and the exponent extraction needs
no bitcast. Padding rows ``MN..align(MN, 4)-1`` are written as 0.
"""
import torch
import triton
import triton.language as tl

from ..utils.math import align, ceil_div

__all__ = ["mn_major_tma_aligned", "mn_major_tma_aligned_packed_ue8m0"]

_MN_ALIGNMENT = 4
# A tile of 4096 elements: enough bytes in flight per program for a memory-bound transpose, few
# enough registers (32 per thread at 4 warps) to keep occupancy high.
_TILE_ELEMENTS = 4096
_MAX_BLOCK_K = 32
_MAX_BLOCK_MN = 1024


@triton.jit
def _mn_major_tma_aligned_kernel(
    sf_ptr, out_ptr,
    mn, sk, aligned_mn,
    sf_stride_g, sf_stride_mn, sf_stride_k,
    BLOCK_MN: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """One [BLOCK_MN, BLOCK_K] tile of group ``program_id(2)``: element (g, r, j) to offset
    g*aligned_mn*sk + j*aligned_mn + r; rows mn..aligned_mn-1 get 0."""
    group = tl.program_id(2).to(tl.int64)
    rows = (tl.program_id(0) * BLOCK_MN + tl.arange(0, BLOCK_MN)).to(tl.int64)
    cols = (tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.int64)
    col_ok = cols[None, :] < sk

    source = sf_ptr + group * sf_stride_g + rows[:, None] * sf_stride_mn + cols[None, :] * sf_stride_k
    values = tl.load(source, mask=(rows[:, None] < mn) & col_ok, other=0)

    target = out_ptr + group * aligned_mn * sk + cols[None, :] * aligned_mn + rows[:, None]
    tl.store(target, values, mask=(rows[:, None] < aligned_mn) & col_ok)


@triton.jit
def _mn_major_tma_aligned_packed_ue8m0_kernel(
    sf_ptr, out_ptr,
    mn, sk, packed_sk, aligned_mn, gran_mn,
    sf_stride_g, sf_stride_mn, sf_stride_k,
    BLOCK_MN: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """One [BLOCK_MN, BLOCK_P] tile of packed words of group ``program_id(2)``: byte j of word p of
    row r is the biased exponent of source element (r // gran_mn, 4p + j); 0 past sk or mn."""
    group = tl.program_id(2).to(tl.int64)
    rows = (tl.program_id(0) * BLOCK_MN + tl.arange(0, BLOCK_MN)).to(tl.int64)
    words = (tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64)
    # gran_mn > 1 broadcasts one source row to gran_mn output rows (SM100 per-block SFs, API.md
    # 2.4), fused here instead of materializing the index_select of the definition.
    source_rows = group * sf_stride_g + (rows // gran_mn)[:, None] * sf_stride_mn
    row_ok = rows[:, None] < mn

    packed = tl.zeros([BLOCK_MN, BLOCK_P], dtype=tl.int32)
    for byte in tl.static_range(4):
        cols = words[None, :] * 4 + byte
        bits = tl.load(sf_ptr + source_rows + cols * sf_stride_k, mask=row_ok & (cols < sk), other=0)
        packed |= ((bits >> 23) & 0xFF) << (8 * byte)

    target = out_ptr + group * aligned_mn * packed_sk + words[None, :] * aligned_mn + rows[:, None]
    tl.store(target, packed, mask=(rows[:, None] < aligned_mn) & (words[None, :] < packed_sk))


def _tile(inner: int) -> tuple[int, int]:
    """(BLOCK_MN, BLOCK_K): as wide in K as the SFs are (up to 32), the rest of the tile in MN, so a
    narrow SF (SK of 1-4, e.g. K=512) does not leave most lanes masked off."""
    block_inner = min(_MAX_BLOCK_K, triton.next_power_of_2(max(inner, 1)))
    return min(_MAX_BLOCK_MN, _TILE_ELEMENTS // block_inner), block_inner


def _as_3d_bits(sf: torch.Tensor) -> torch.Tensor:
    """``sf`` as an int32 [G, MN, SK] view (no copy): the kernels index with explicit strides."""
    bits = sf.view(torch.int32)
    return bits if bits.dim() == 3 else bits.unsqueeze(0)


def mn_major_tma_aligned(sf: torch.Tensor) -> torch.Tensor:
    """fp32 [MN, SK] or [G, MN, SK], any strides -> a new tensor of the same values in the 2.3
    layout, padding rows 0. (The as-is shortcut of API.md 2.5 is the caller's.)"""
    *_, mn, sk = sf.shape
    out = empty_like_mn_major(sf.shape, sf.dtype, sf.device)
    if out.numel() == 0:
        return out
    source = _as_3d_bits(sf)
    aligned_mn = align(mn, _MN_ALIGNMENT)
    block_mn, block_k = _tile(sk)
    grid = (triton.cdiv(aligned_mn, block_mn), triton.cdiv(sk, block_k), source.size(0))
    _mn_major_tma_aligned_kernel[grid](
        source, out.view(torch.int32),
        mn, sk, aligned_mn,
        source.stride(0), source.stride(1), source.stride(2),
        BLOCK_MN=block_mn, BLOCK_K=block_k,
    )
    return out


def mn_major_tma_aligned_packed_ue8m0(sf: torch.Tensor, mn: int | None = None, gran_mn: int = 1) -> torch.Tensor:
    """fp32 [.., MN_sf, SK] power-of-two SFs, any strides -> int32 [.., mn, ceil(SK/4)] packed UE8M0
    in the 2.3 layout, padding rows 0. Output row r packs source row r // gran_mn; ``mn`` defaults
    to MN_sf (then gran_mn must be 1); the caller guarantees ceil(mn / gran_mn) <= MN_sf."""
    *batch, mn_sf, sk = sf.shape
    mn = mn_sf if mn is None else mn
    packed_sk = ceil_div(sk, 4)
    out = empty_like_mn_major((*batch, mn, packed_sk), torch.int32, sf.device)
    if out.numel() == 0:
        return out
    source = _as_3d_bits(sf)
    aligned_mn = align(mn, _MN_ALIGNMENT)
    block_mn, block_p = _tile(packed_sk)
    grid = (triton.cdiv(aligned_mn, block_mn), triton.cdiv(packed_sk, block_p), source.size(0))
    _mn_major_tma_aligned_packed_ue8m0_kernel[grid](
        source, out,
        mn, sk, packed_sk, aligned_mn, gran_mn,
        source.stride(0), source.stride(1), source.stride(2),
        BLOCK_MN=block_mn, BLOCK_P=block_p,
    )
    return out


def empty_like_mn_major(shape, dtype, device) -> torch.Tensor:
    """An uninitialized [.., MN, SK] tensor in the 2.3 layout; the kernels write every element of
    its storage, padding rows included."""
    *batch, mn, sk = shape
    storage = torch.empty(*batch, sk, align(mn, _MN_ALIGNMENT), dtype=dtype, device=device)
    return storage.mT[..., :mn, :]
