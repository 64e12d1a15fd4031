"""Scale-factor layout kernels (API.md 2.3-2.5): fp32 SFs into the TMA-aligned MN-major layout,
fp32 power-of-two SFs into packed UE8M0 in that layout (optionally skipping the gap rows of an
m-grouped psum layout), and k-grouped per-channel SFs into per-group packed UE8M0.

Each kernel is one pass: read every source element once, write every output word (padding rows
included) once. Launchers allocate the output and launch; they never read device memory on the
host, so they are CUDA-graph safe. Arguments are not checked here: ``dg_triton.utils.layout`` does
that. Reference math: ``dg_triton.reference_sf_layout``.

The kernels move fp32 SFs as int32 bit patterns (the launcher reinterprets the tensor), so the
copy is bitwise by construction (NaN payloads and -0.0 included) and the exponent extraction needs
no bitcast. Padding rows ``MN..align(MN, 4)-1`` are written as 0.

Group boundaries (psum ends, k-grouped sizes) stay on the device: each program reads them itself
(a binary search over at most a few hundred psum ends, or a prefix sum over at most 128 group
sizes), so no launcher waits for the device and every output word is still written exactly once.
"""
import torch
import triton
import triton.language as tl

from ..utils.math import align, ceil_div

__all__ = ["k_grouped_packed_ue8m0", "mn_major_tma_aligned", "mn_major_tma_aligned_packed_ue8m0"]

_MN_ALIGNMENT = 4
# A tile of 4096 elements: enough bytes in flight per program for a memory-bound transpose, few
# enough registers (32 per thread at 4 warps) to keep occupancy high.
_TILE_ELEMENTS = 4096
_MAX_BLOCK_K = 32
_MAX_BLOCK_MN = 1024
# The packing kernels hold 64-bit addresses for 4096 source elements per tile: at 4 warps that is
# 126-211 registers per thread (ptxas, sm_90a, the tiles their launchers pick), at 8 warps 47-110.
PACKING_NUM_WARPS = 8


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
def _rows_inside_psum_groups(rows, psum_ptr, num_psum_groups, mk_alignment, search_steps):
    """Whether each row lies in ``[align(psum[g-1], mk_alignment), psum[g])`` for some g.

    psum is non-decreasing (end rows of consecutive experts), so the only candidate is the first
    g with ``psum[g] > row``; a binary search finds it in ``search_steps`` (= bit length of the
    group count) gathered loads instead of a scan over every group."""
    low = tl.zeros_like(rows)
    high = tl.zeros_like(rows) + num_psum_groups
    for _ in range(search_steps):
        middle = (low + high) // 2
        searching = low < high
        end = tl.load(psum_ptr + middle, mask=searching, other=0).to(tl.int64)
        go_right = searching & (end <= rows)
        low = tl.where(go_right, middle + 1, low)
        high = tl.where(searching & ~go_right, middle, high)
    group = low
    in_some_group = group < num_psum_groups
    previous_end = tl.load(psum_ptr + group - 1, mask=in_some_group & (group > 0), other=0).to(tl.int64)
    start = (previous_end + mk_alignment - 1) // mk_alignment * mk_alignment
    return in_some_group & (rows >= start)


@triton.jit
def _mn_major_tma_aligned_packed_ue8m0_kernel(
    sf_ptr, out_ptr, psum_ptr,
    mn, sk, packed_sk, aligned_mn,
    sf_stride_g, sf_stride_mn, sf_stride_k,
    num_psum_groups, mk_alignment, search_steps,
    GRAN_MN: tl.constexpr, BLOCK_MN: tl.constexpr, BLOCK_P: tl.constexpr, HAS_PSUM: tl.constexpr,
    K_CONTIGUOUS: tl.constexpr, ROWS_16B_ALIGNED: tl.constexpr,
):
    """One [BLOCK_MN, BLOCK_P] tile of packed words of group ``program_id(2)``: byte j of word p of
    row r is the biased exponent of source element (r // GRAN_MN, 4p + j); 0 past sk or mn, and
    with HAS_PSUM 0 (nothing read) for rows outside every psum group."""
    group = tl.program_id(2).to(tl.int64)
    rows = (tl.program_id(0) * BLOCK_MN + tl.arange(0, BLOCK_MN)).to(tl.int64)
    words = (tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64)
    # GRAN_MN > 1 broadcasts one source row to GRAN_MN output rows (SM100 per-block SFs, API.md
    # 2.4), fused here instead of materializing the index_select of the definition. A compile-time
    # divisor: with a run-time one every thread called the 64-bit division routine once per row it
    # holds, before its first load (16 calls at 128x8 words, ~1 us of a 3.5 us kernel at [16384, 56]).
    if ROWS_16B_ALIGNED:
        # Rows start 16-byte aligned and hold whole words (the launcher checked): written as
        # multiples of 4, which the compiler's alignment analysis can see (it drops tl.multiple_of
        # on scalars), so the row-major load below and its column mask become 16-byte vectors.
        sf_stride_g = sf_stride_g // 4 * 4
        sf_stride_mn = sf_stride_mn // 4 * 4
        sk = sk // 4 * 4
    source_rows = group * sf_stride_g + (rows // GRAN_MN)[:, None] * sf_stride_mn
    row_ok = rows < mn
    if HAS_PSUM:
        # Gap rows between experts may be uninitialized memory whose bits are not valid UE8M0;
        # they are masked off before any load.
        row_ok = row_ok & _rows_inside_psum_groups(rows, psum_ptr, num_psum_groups, mk_alignment, search_steps)
    row_ok = row_ok[:, None]

    if K_CONTIGUOUS:
        # A row-major sf: one load of 4 * BLOCK_P consecutive columns (one contiguous segment per
        # row), then the four bytes of a word are summed. They never overlap, so the sum is their
        # OR, and it wraps to the same int32 bits when byte 3 is >= 128.
        cols = tl.program_id(1) * (4 * BLOCK_P) + tl.arange(0, 4 * BLOCK_P)
        bits = tl.load(sf_ptr + source_rows + cols[None, :].to(tl.int64) * sf_stride_k,
                       mask=row_ok & (cols[None, :] < sk), other=0)
        exponents = tl.reshape((bits >> 23) & 0xFF, [BLOCK_MN, BLOCK_P, 4])
        packed = tl.sum(exponents << (8 * tl.arange(0, 4))[None, None, :], axis=2)
    else:
        # An MN-major (or otherwise strided) sf: rows are the contiguous dimension, so each of the
        # four byte loads reads whole column segments.
        packed = tl.zeros([BLOCK_MN, BLOCK_P], dtype=tl.int32)
        for byte in tl.static_range(4):
            cols = words[None, :] * 4 + byte
            bits = tl.load(sf_ptr + source_rows + cols * sf_stride_k, mask=row_ok & (cols < sk), other=0)
            packed |= ((bits >> 23) & 0xFF) << (8 * byte)

    target = out_ptr + group * aligned_mn * packed_sk + words[None, :] * aligned_mn + rows[:, None]
    tl.store(target, packed, mask=(rows[:, None] < aligned_mn) & (words[None, :] < packed_sk))


@triton.jit
def _k_grouped_packed_ue8m0_kernel(
    sf_ptr, out_ptr, grouped_layout_ptr,
    num_groups, sf_k, packed_sf_k, mn, k_alignment,
    GRAN_K: tl.constexpr, USE_PSUM: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_P: tl.constexpr,
    BLOCK_MN: tl.constexpr,
):
    """One [BLOCK_P, BLOCK_MN] tile of the row-major int32 [PK, MN] output: packed row p belongs to
    the group g whose packed rows [P_g, P_g + ceil(n_g/4)) hold it (n_g = ceil(k_g/GRAN_K) SF rows,
    P_g and the SF row start S_g prefix sums over the groups before g); byte j of (p, c) is the
    exponent of SF row S_g + 4(p - P_g) + j of column c if that row is still in group g, else 0.
    Rows owned by no group (past the last group's content) are 0."""
    packed_rows = (tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64)
    cols = (tl.program_id(1) * BLOCK_MN + tl.arange(0, BLOCK_MN)).to(tl.int64)

    # Every program redoes the group prefix sums (<= 128 values, one cached load): cheaper than a
    # second launch or a host round trip, and the launch stays graph-capturable.
    groups = tl.arange(0, BLOCK_G)
    group_ok = groups < num_groups
    layout = tl.load(grouped_layout_ptr + groups, mask=group_ok, other=0).to(tl.int64)
    if USE_PSUM:
        previous_end = tl.load(grouped_layout_ptr + groups - 1, mask=group_ok & (groups > 0), other=0).to(tl.int64)
        previous_end = tl.maximum(previous_end, 0)
        k_sizes = layout - (previous_end + k_alignment - 1) // k_alignment * k_alignment
    else:
        k_sizes = layout
    k_sizes = tl.maximum(k_sizes, 0)
    # A compile-time GRAN_K (128 in practice): a shift, where a run-time one was a call to the
    # 64-bit division routine on the path to every data load.
    sf_rows_in_group = (k_sizes + GRAN_K - 1) // GRAN_K
    packed_rows_in_group = (sf_rows_in_group + 3) // 4
    packed_end = tl.cumsum(packed_rows_in_group, 0)
    sf_end = tl.cumsum(sf_rows_in_group, 0)

    # Exactly one group owns a packed row that is inside some group (empty groups own nothing),
    # so the masked sums below pick that group's values; an unowned row gets 0 everywhere.
    owner = ((packed_end - packed_rows_in_group)[None, :] <= packed_rows[:, None]) & \
        (packed_rows[:, None] < packed_end[None, :])
    row_in_group = tl.sum(tl.where(owner, packed_rows[:, None] - (packed_end - packed_rows_in_group)[None, :], 0), 1)
    first_sf_row = tl.sum(tl.where(owner, (sf_end - sf_rows_in_group)[None, :], 0), 1) + 4 * row_in_group
    sf_row_limit = tl.minimum(tl.sum(tl.where(owner, sf_end[None, :], 0), 1), sf_k)

    col_ok = cols[None, :] < mn
    packed = tl.zeros([BLOCK_P, BLOCK_MN], dtype=tl.int32)
    for byte in tl.static_range(4):
        sf_rows = first_sf_row + byte
        bits = tl.load(sf_ptr + sf_rows[:, None] * mn + cols[None, :],
                       mask=(sf_rows < sf_row_limit)[:, None] & col_ok, other=0)
        packed |= ((bits >> 23) & 0xFF) << (8 * byte)

    tl.store(out_ptr + packed_rows[:, None] * mn + cols[None, :], packed,
             mask=(packed_rows < packed_sf_k)[:, None] & col_ok)


def _tile(inner: int) -> tuple[int, int]:
    """(BLOCK_MN, BLOCK_K): as wide in K as the SFs are (up to 32), the rest of the tile in MN, so a
    narrow SF (SK of 1-4, e.g. K=512) does not leave most lanes masked off."""
    block_inner = min(_MAX_BLOCK_K, triton.next_power_of_2(max(inner, 1)))
    return min(_MAX_BLOCK_MN, _TILE_ELEMENTS // block_inner), block_inner


def _packing_tile(packed_sk: int, k_contiguous: bool) -> tuple[int, int]:
    """(BLOCK_MN, BLOCK_P) of the packing kernel. A row-major input is read 4 * BLOCK_P columns
    at a time, up to 32 (128 bytes of a row), 4096 source elements per tile: on the H200 this packs
    [4096, 56] in 2.2-2.5 us (a clone takes 2.2) where four strided byte loads over 4096-word tiles
    took 9.3 us. Strided inputs keep the word tile of ``_tile`` and its byte loop, whose column
    reads are coalesced there (the wide load took [65536, 56] MN-major from 4.1 to 22 us)."""
    if not k_contiguous:
        return _tile(packed_sk)
    block_p = min(_MAX_BLOCK_K // 4, triton.next_power_of_2(max(packed_sk, 1)))
    return min(_MAX_BLOCK_MN, _TILE_ELEMENTS // (4 * block_p)), block_p


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


def mn_major_tma_aligned_packed_ue8m0(sf: torch.Tensor, mn: int | None = None, gran_mn: int = 1,
                                      psum_layout: torch.Tensor | None = None, mk_alignment: int = 1) -> torch.Tensor:
    """fp32 [.., MN_sf, SK] power-of-two SFs, any strides -> int32 [.., mn, ceil(SK/4)] packed UE8M0
    in the 2.3 layout, padding rows 0. Output row r packs source row r // gran_mn; ``mn`` defaults
    to MN_sf (then gran_mn must be 1); the caller guarantees ceil(mn / gran_mn) <= MN_sf.

    ``psum_layout`` (int32 [G], G >= 1, on sf's device; 2-D sf): output rows outside every
    ``[align(psum[g-1], mk_alignment), psum[g])`` are written as 0 without reading ``sf``."""
    *batch, mn_sf, sk = sf.shape
    mn = mn_sf if mn is None else mn
    packed_sk = ceil_div(sk, 4)
    out = empty_like_mn_major((*batch, mn, packed_sk), torch.int32, sf.device)
    if out.numel() == 0:
        return out
    source = _as_3d_bits(sf)
    aligned_mn = align(mn, _MN_ALIGNMENT)
    k_contiguous = source.stride(2) == 1
    block_mn, block_p = _packing_tile(packed_sk, k_contiguous)
    grid = (triton.cdiv(aligned_mn, block_mn), triton.cdiv(packed_sk, block_p), source.size(0))
    has_psum = psum_layout is not None
    num_psum_groups = psum_layout.numel() if has_psum else 0
    _mn_major_tma_aligned_packed_ue8m0_kernel[grid](
        # Without psum the pointer is never dereferenced; any int32 tensor keeps one specialization.
        source, out, psum_layout if has_psum else out,
        mn, sk, packed_sk, aligned_mn,
        source.stride(0), source.stride(1), source.stride(2),
        num_psum_groups, mk_alignment, num_psum_groups.bit_length(),
        GRAN_MN=gran_mn, BLOCK_MN=block_mn, BLOCK_P=block_p, HAS_PSUM=has_psum, K_CONTIGUOUS=k_contiguous,
        ROWS_16B_ALIGNED=k_contiguous and sk % 4 == 0 and source.stride(1) % 4 == 0
        and source.stride(0) % 4 == 0 and source.data_ptr() % 16 == 0,
        num_warps=PACKING_NUM_WARPS,
    )
    return out


# Output words per program of the k-grouped kernel: each reads four source rows per word, so a
# program moves 16 KiB in and 4 KiB out. A 4096-word tile gave [256, 7168] (8 groups of 4096 K)
# only 112 programs for 132 SMs on the H200, one 64 KiB block per SM with nothing to overlap its
# load, pack and store phases (0.72 of a copy); 1024 words give 448, several per SM.
_K_GROUPED_TILE_WORDS = 1024


def _k_grouped_tile(mn: int, block_g: int) -> tuple[int, int]:
    """(BLOCK_P, BLOCK_MN): up to 1024 contiguous int32 columns per packed row for coalesced
    row-major stores, the rest of the _K_GROUPED_TILE_WORDS tile in packed rows, but no more rows
    than keep the [BLOCK_P, BLOCK_G] group-ownership temporaries within 4096 elements."""
    block_mn = min(_MAX_BLOCK_MN, triton.next_power_of_2(max(mn, 1)))
    return max(1, min(_K_GROUPED_TILE_WORDS // block_mn, _TILE_ELEMENTS // block_g)), block_mn


def k_grouped_packed_ue8m0(sf: torch.Tensor, grouped_layout: torch.Tensor, packed_sf_k: int, gran_k: int,
                           k_alignment: int, use_psum_layout: bool) -> torch.Tensor:
    """fp32 [SFK, MN] contiguous k-grouped SFs -> int32 [packed_sf_k, MN] row-major, each group of
    ``grouped_layout`` (int32 [G], 1 <= G <= 128, on sf's device; sizes, or psum ends aligned to
    ``k_alignment``) packed on its own, groups concatenated, every row past the content 0."""
    sf_k, mn = sf.shape
    out = torch.empty(packed_sf_k, mn, dtype=torch.int32, device=sf.device)
    if out.numel() == 0:
        return out
    num_groups = grouped_layout.numel()
    block_g = triton.next_power_of_2(max(num_groups, 1))
    block_p, block_mn = _k_grouped_tile(mn, block_g)
    grid = (triton.cdiv(packed_sf_k, block_p), triton.cdiv(mn, block_mn))
    _k_grouped_packed_ue8m0_kernel[grid](
        sf.view(torch.int32), out, grouped_layout,
        num_groups, sf_k, packed_sf_k, mn, k_alignment,
        GRAN_K=gran_k, USE_PSUM=use_psum_layout, BLOCK_G=block_g, BLOCK_P=block_p, BLOCK_MN=block_mn,
        num_warps=PACKING_NUM_WARPS,
    )
    return out


def empty_like_mn_major(shape, dtype, device) -> torch.Tensor:
    """An uninitialized [.., MN, SK] tensor in the 2.3 layout; the kernels write every element of
    its storage, padding rows included."""
    *batch, mn, sk = shape
    storage = torch.empty(*batch, sk, align(mn, _MN_ALIGNMENT), dtype=dtype, device=device)
    return storage.mT[..., :mn, :]
