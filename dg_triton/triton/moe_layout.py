"""MoE token layouts as Triton kernels: permute tokens into the contiguous (API.md 3.4) or masked
(API.md 3.5) layout of the m-grouped GEMMs, optionally fused with the per-token FP8 cast, and the
weighted un-permute (combine) back to token order. Reference math: ``dg_triton.reference_moe_layout``.

A permute is a few launches, none of which waits on the host:

1. ``_rank_in_chunk_kernel``: the flat slots (t * topk + k) are cut into chunks of ``_CHUNK``; each
   program ranks its slots within their expert inside the chunk (by comparing every pair, so the
   order is the flat order) and writes the chunk's per-expert counts.
2. ``_chunk_prefix_kernel``: per expert, the exclusive prefix of those counts over the chunks, and
   the total. Slot rank = its chunk's prefix + its rank inside the chunk: exactly "earlier slots of
   the same expert", with no atomics, so every output is deterministic.
3. ``_expert_starts_kernel`` (contiguous only): segment starts (an exclusive scan of the
   alignment-rounded counts) and psum.
4. ``_permute_rows_kernel``: the first programs each read a few token rows once and write them (or
   their FP8 cast, computed once per token) to every row their slots were given; the other
   programs zero the padding and tail rows and write ``m_indices`` / ``masked_m``.
5. ``_scatter_scales_kernel`` (quantized only): the SF in the TMA-aligned MN-major layout, walked
   row after row so its stores are coalesced: each row takes its token's scales (step 4 keeps them
   per token, with the token of every row), padding rows the scale of a zero row, alignment rows 0.
   Written straight from step 4, one 4-byte store per (row, K-group) lands on its own DRAM sector
   (consecutive rows come from unrelated tokens); that cost 60 us of 360 on an H200.

Every output element is written exactly once, so outputs are ``torch.empty`` (no memset). Output
sizes come from host-known numbers only (T, topk, E, H, alignment, max_m), so the launchers are
CUDA-graph capturable. The launchers assume validated arguments (``dg_triton.moe_layout`` checks
them); topk ids outside ``[0, E)`` are treated as unused slots, so even bad ids never make a kernel
write out of bounds.

No kernel reads a buffer it also writes: Triton may duplicate a load once per register layout it
needs, and a warp's duplicate could then read what another warp of the same program already
stored (seen on an H200 when the local ranks were updated in place).

Unquantized rows are moved as 16-bit integers: bitwise copies (NaN payloads included), and the
interpreter's bf16 quirks (TOOLCHAIN.md) never come into play. The fused cast calls the same
``_scale_from_amax`` as ``dg_triton.triton.quant`` and multiplies by ``1/sf`` the same way, so it
is bitwise equal to ``per_token_cast_to_fp8`` of the unquantized layout (NaN/Inf in a group: as in
that module, only "no hang, same shapes" is promised for that token). The combine runs with FP
fusion off so that ``acc + y * w`` is a rounded product then a rounded sum, as in the reference.
"""
import contextlib

import torch
import triton
import triton.language as tl

from ..reference_moe_layout import (
    MoEContiguousLayout,
    MoEMaskedLayout,
    contiguous_layout_rows,
)
from .quant import _scale_from_amax

__all__ = ["permute_contiguous", "permute_masked", "unpermute_combine"]

# Slots per ranking program: 512 programs for 8192 tokens x top-8, enough to fill an H200, while
# the per-chunk count table (chunks x experts int32) stays small (512 KiB at 256 experts).
_CHUNK = 128
_RANK_WARPS = 4
# Chunk-prefix tile [chunks, experts].
_PREFIX_MAX_CHUNKS = 512
_PREFIX_ELEMENTS = 4096
# One step of the permute kernel moves about this many elements: a [TOKENS, BLOCK_H] tile of token
# rows, stored once per choice (TOPK_BLOCK stores): at 4 warps and top-8, eight 16-byte bf16 stores
# per thread per step. 8192 elements, 2048 columns at most, 4 warps was the best of 4 / 8 warps x
# 4096-16384 elements x 1024-4096 columns for 8192 tokens x top-8, H = 7168, on an H200 (8 warps
# within 1%).
_MOVE_ELEMENTS = 8192
_MAX_BLOCK_H = 2048
_MAX_ZERO_ROWS = 64
_MOVE_WARPS = 4
# SF pass tile [rows, K-groups].
_SF_BLOCK_ROWS = 128
_SF_BLOCK_COLS = 32
_SF_ALIGNMENT = 4  # rows of a TMA-aligned fp32 SF (API.md 2.3)
# Combine tile [tokens, columns]: 2 tokens x 1024 columns at 8 warps, the best of 4 / 8 warps x
# 2048-8192 elements x 512-2048 columns for 8192 tokens x top-8, N = 7168, on an H200 (262 us,
# 95% of a device copy's bandwidth; 4096 elements at 4 warps took 328 us).
_COMBINE_BLOCK_N = 1024
_COMBINE_ELEMENTS = 2048
_COMBINE_WARPS = 8


def _cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


# ---------------------------------------------------------------------------------------------
# Ranking


@triton.jit
def _rank_in_chunk_kernel(
    topk_ids_ptr, local_rank_ptr, chunk_counts_ptr,
    num_slots, topk, num_experts,
    stride_ids_t, stride_ids_k,
    CHUNK: tl.constexpr, EXPERT_BINS: tl.constexpr,
):
    """Chunk c = slots [c*CHUNK, (c+1)*CHUNK): local_rank[slot] = earlier slots of the chunk with the
    same expert (-1 for an unused slot); chunk_counts[c, g] = slots of the chunk routed to g."""
    chunk = tl.program_id(0)
    positions = tl.arange(0, CHUNK)
    # int32 index math (slots < 2**30, checked by the public functions): Triton repeats these per
    # register layout, and 64-bit division is a long software sequence on the GPU.
    slots = chunk * CHUNK + positions
    in_range = slots < num_slots
    ids = tl.load(topk_ids_ptr + (slots // topk).to(tl.int64) * stride_ids_t + (slots % topk) * stride_ids_k,
                  mask=in_range, other=-1)
    # Range test before the int32 cast: an int64 id of 2**32 + 3 must not pass as expert 3.
    used = in_range & (ids >= 0) & (ids < num_experts)
    expert = tl.where(used, ids, -1).to(tl.int32)
    # One [CHUNK, CHUNK] comparison instead of a running count: no loop-carried dependency.
    earlier_same = (expert[:, None] == expert[None, :]) & (positions[None, :] < positions[:, None])
    rank = tl.sum(earlier_same.to(tl.int32), axis=1)
    tl.store(local_rank_ptr + slots, tl.where(used, rank, -1), mask=in_range)
    bins = tl.arange(0, EXPERT_BINS)
    counts = tl.histogram(expert, EXPERT_BINS, mask=used)
    tl.store(chunk_counts_ptr + chunk * num_experts + bins, counts, mask=bins < num_experts)


@triton.jit
def _chunk_prefix_kernel(
    chunk_counts_ptr, chunk_offsets_ptr, expert_counts_ptr,
    num_chunks, num_experts,
    BLOCK_CHUNKS: tl.constexpr, BLOCK_EXPERTS: tl.constexpr,
):
    """For BLOCK_EXPERTS experts: chunk_offsets[c, g] = slots of g in chunks before c;
    expert_counts[g] = all slots of g."""
    experts = tl.program_id(0) * BLOCK_EXPERTS + tl.arange(0, BLOCK_EXPERTS)
    expert_ok = experts < num_experts
    total = tl.zeros([BLOCK_EXPERTS], dtype=tl.int32)
    for first in range(0, num_chunks, BLOCK_CHUNKS):
        chunks = first + tl.arange(0, BLOCK_CHUNKS)
        mask = (chunks < num_chunks)[:, None] & expert_ok[None, :]
        offsets = chunks[:, None] * num_experts + experts[None, :]
        counts = tl.load(chunk_counts_ptr + offsets, mask=mask, other=0)
        tl.store(chunk_offsets_ptr + offsets, tl.cumsum(counts, axis=0) - counts + total[None, :], mask=mask)
        total += tl.sum(counts, axis=0)
    tl.store(expert_counts_ptr + experts, total, mask=expert_ok)


@triton.jit
def _expert_starts_kernel(
    expert_counts_ptr, start_ptr, psum_ptr,
    num_experts, alignment,
    EXPERT_BINS: tl.constexpr,
):
    """Contiguous layout: start[g] = sum of align(count[h], alignment) over h < g; psum = start + count."""
    experts = tl.arange(0, EXPERT_BINS)
    expert_ok = experts < num_experts
    counts = tl.load(expert_counts_ptr + experts, mask=expert_ok, other=0)
    padded = (counts + alignment - 1) // alignment * alignment
    start = tl.cumsum(padded, axis=0) - padded
    tl.store(start_ptr + experts, start, mask=expert_ok)
    tl.store(psum_ptr + experts, start + counts, mask=expert_ok)


# ---------------------------------------------------------------------------------------------
# Data movement


@triton.jit
def _scatter_tokens(
    first_token, x_ptr, out_ptr, token_sf_ptr, token_of_row_ptr, topk_ids_ptr, local_rank_ptr,
    row_of_slot_ptr, chunk_offsets_ptr, start_ptr,
    num_tokens, hidden, topk, num_experts, num_sf_cols,
    stride_x_t, stride_x_h, stride_ids_t, stride_ids_k,
    group_rows,
    CHUNK: tl.constexpr, TOKENS: tl.constexpr, TOPK_BLOCK: tl.constexpr, BLOCK_H: tl.constexpr,
    GROUPS_PER_BLOCK: tl.constexpr, GRAN_K: tl.constexpr,
    QUANTIZE: tl.constexpr, USE_UE8M0: tl.constexpr, MASKED: tl.constexpr,
):
    """Tokens [first_token, first_token + TOKENS): turn their slots' ranks into rows (row_of_slot),
    then copy (or cast once and copy) each token row to all its rows. Quantized, the token's scales
    go to token_sf [T, SK] and the token of each of its rows to token_of_row."""
    tokens = (first_token + tl.arange(0, TOKENS)).to(tl.int64)
    token_ok = tokens < num_tokens
    choices = tl.arange(0, TOPK_BLOCK)
    slot_ok = token_ok[:, None] & (choices < topk)[None, :]
    ids = tl.load(topk_ids_ptr + tokens[:, None] * stride_ids_t + choices[None, :] * stride_ids_k,
                  mask=slot_ok, other=-1)
    used = slot_ok & (ids >= 0) & (ids < num_experts)
    expert = tl.where(used, ids, 0).to(tl.int32)
    slots = tokens[:, None] * topk + choices[None, :]
    rank = tl.load(local_rank_ptr + slots, mask=used, other=0)
    rank += tl.load(chunk_offsets_ptr + (slots // CHUNK) * num_experts + expert, mask=used, other=0)
    if MASKED:
        kept = used & (rank < group_rows)
        rows = tl.where(kept, expert * group_rows + rank, -1)
    else:
        kept = used
        rows = tl.where(kept, tl.load(start_ptr + expert, mask=used, other=0) + rank, -1)
    tl.store(row_of_slot_ptr + slots, rows, mask=slot_ok)

    rows = rows.to(tl.int64)
    x_rows = x_ptr + tokens * stride_x_t
    # Each token row is loaded (and cast) once per column block, then stored once per choice k.
    # The rows of choice k are pulled out of [TOKENS, TOPK_BLOCK] by a masked sum so that every
    # store stays 2-D (3-D, quantized): a 4-D broadcast store of all choices at once crashes
    # Triton 3.7's layout-conversion pass for several tokens per program.
    if QUANTIZE:
        tl.store(token_of_row_ptr + rows, tl.broadcast_to(tokens[:, None], (TOKENS, TOPK_BLOCK)).to(tl.int32),
                 mask=kept)
        for first in range(0, hidden, BLOCK_H):
            sf_cols = first // GRAN_K + tl.arange(0, GROUPS_PER_BLOCK)
            cols = first + tl.arange(0, GROUPS_PER_BLOCK)[:, None] * GRAN_K + tl.arange(0, GRAN_K)[None, :]
            col_ok = cols < hidden
            values = tl.load(x_rows[:, None, None] + cols[None, :, :] * stride_x_h,
                             mask=token_ok[:, None, None] & col_ok[None, :, :], other=0.0).to(tl.float32)
            sf, inv_sf = _scale_from_amax(tl.max(tl.abs(values), axis=2), USE_UE8M0)
            q = (values * inv_sf[:, :, None]).to(tl.float8e4nv)
            for k in tl.static_range(TOPK_BLOCK):
                rows_k = tl.sum(tl.where(choices[None, :] == k, rows, 0), axis=1)
                tl.store(out_ptr + rows_k[:, None, None] * hidden + cols[None, :, :], q,
                         mask=(rows_k >= 0)[:, None, None] & col_ok[None, :, :])
            tl.store(token_sf_ptr + tokens[:, None] * num_sf_cols + sf_cols[None, :], sf,
                     mask=token_ok[:, None] & (sf_cols < num_sf_cols)[None, :])
    else:
        for first in range(0, hidden, BLOCK_H):
            cols = first + tl.arange(0, BLOCK_H)
            col_ok = cols < hidden
            values = tl.load(x_rows[:, None] + cols[None, :] * stride_x_h,
                             mask=token_ok[:, None] & col_ok[None, :], other=0)
            for k in tl.static_range(TOPK_BLOCK):
                rows_k = tl.sum(tl.where(choices[None, :] == k, rows, 0), axis=1)
                tl.store(out_ptr + rows_k[:, None] * hidden + cols[None, :], values,
                         mask=(rows_k >= 0)[:, None] & col_ok[None, :])


@triton.jit
def _expert_of_rows(rows, start_ptr, num_experts, search_steps):
    """The last expert whose segment starts at or before each row (starts are non-decreasing and
    start[0] = 0): a binary search of ``search_steps`` = bit length of (E - 1) gathered loads."""
    low = tl.zeros_like(rows)
    high = low + num_experts
    for _ in range(search_steps):
        searching = high - low > 1
        middle = (low + high) // 2
        start = tl.load(start_ptr + middle, mask=searching, other=0)
        go_right = start <= rows
        low = tl.where(searching & go_right, middle, low)
        high = tl.where(searching & ~go_right, middle, high)
    return low


@triton.jit
def _fill_padding(
    block, out_ptr, token_of_row_ptr, start_ptr, expert_counts_ptr, m_indices_ptr, masked_m_ptr,
    hidden, num_experts, group_rows, num_groups, search_steps,
    ZERO_ROWS: tl.constexpr, BLOCK_H: tl.constexpr,
    QUANTIZE: tl.constexpr, MASKED: tl.constexpr, STORE_M_INDICES: tl.constexpr,
):
    """Rows [block*ZERO_ROWS, (block+1)*ZERO_ROWS) of the layout: zero every row that holds no slot
    (token_of_row -1 when quantized) and write m_indices / masked_m."""
    rows = block.to(tl.int64) * ZERO_ROWS + tl.arange(0, ZERO_ROWS)
    is_row = rows < num_groups * group_rows
    if MASKED:
        group = rows // group_rows
        data_rows = tl.minimum(tl.load(expert_counts_ptr + group, mask=is_row, other=0), group_rows)
        row_in_group = rows - group * group_rows
        is_data = is_row & (row_in_group < data_rows)
        tl.store(masked_m_ptr + group, data_rows, mask=is_row & (row_in_group == 0))
    else:
        expert = _expert_of_rows(rows, start_ptr, num_experts, search_steps)
        offset = rows - tl.load(start_ptr + expert, mask=is_row, other=0)
        is_data = is_row & (offset < tl.load(expert_counts_ptr + expert, mask=is_row, other=0))
        if STORE_M_INDICES:
            tl.store(m_indices_ptr + rows, tl.where(is_data, expert, -1).to(tl.int32), mask=is_row)
    padding = is_row & ~is_data
    if QUANTIZE:
        tl.store(token_of_row_ptr + rows, tl.full([ZERO_ROWS], -1, tl.int32), mask=padding)

    # Most blocks of a big layout hold data rows only; they skip the column loop.
    if tl.max(padding.to(tl.int32), axis=0) > 0:
        zeros = tl.zeros([ZERO_ROWS, BLOCK_H], dtype=out_ptr.dtype.element_ty)
        for first in range(0, hidden, BLOCK_H):
            cols = first + tl.arange(0, BLOCK_H)
            tl.store(out_ptr + rows[:, None] * hidden + cols[None, :], zeros,
                     mask=padding[:, None] & (cols < hidden)[None, :])


@triton.jit
def _permute_rows_kernel(
    x_ptr, out_ptr, token_sf_ptr, token_of_row_ptr, topk_ids_ptr, local_rank_ptr, row_of_slot_ptr,
    chunk_offsets_ptr, start_ptr, expert_counts_ptr, m_indices_ptr, masked_m_ptr,
    num_tokens, num_token_programs, hidden, topk, num_experts, num_sf_cols,
    stride_x_t, stride_x_h, stride_ids_t, stride_ids_k,
    group_rows, num_groups, search_steps,
    CHUNK: tl.constexpr, TOKENS: tl.constexpr, TOPK_BLOCK: tl.constexpr, BLOCK_H: tl.constexpr,
    GROUPS_PER_BLOCK: tl.constexpr, ZERO_ROWS: tl.constexpr, GRAN_K: tl.constexpr,
    QUANTIZE: tl.constexpr, USE_UE8M0: tl.constexpr, MASKED: tl.constexpr, STORE_M_INDICES: tl.constexpr,
):
    """Programs [0, num_token_programs): TOKENS tokens each (_scatter_tokens); the rest: ZERO_ROWS
    rows each (_fill_padding). The layout is num_groups groups of group_rows rows (masked:
    E x max_m; contiguous: 1 x M_pad)."""
    pid = tl.program_id(0)
    if pid < num_token_programs:
        _scatter_tokens(pid * TOKENS, x_ptr, out_ptr, token_sf_ptr, token_of_row_ptr, topk_ids_ptr, local_rank_ptr,
                        row_of_slot_ptr, chunk_offsets_ptr, start_ptr,
                        num_tokens, hidden, topk, num_experts, num_sf_cols,
                        stride_x_t, stride_x_h, stride_ids_t, stride_ids_k, group_rows,
                        CHUNK, TOKENS, TOPK_BLOCK, BLOCK_H, GROUPS_PER_BLOCK, GRAN_K, QUANTIZE, USE_UE8M0, MASKED)
    else:
        _fill_padding(pid - num_token_programs, out_ptr, token_of_row_ptr, start_ptr, expert_counts_ptr,
                      m_indices_ptr, masked_m_ptr, hidden, num_experts, group_rows, num_groups, search_steps,
                      ZERO_ROWS, BLOCK_H, QUANTIZE, MASKED, STORE_M_INDICES)


@triton.jit
def _scatter_scales_kernel(
    token_sf_ptr, token_of_row_ptr, sf_ptr,
    num_sf_cols, group_rows, sf_group_rows,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, USE_UE8M0: tl.constexpr,
):
    """Tile [BLOCK_ROWS rows, BLOCK_COLS K-groups] of group program_id(2) of the SF, TMA-aligned
    MN-major (element (g, r, j) at g*sf_group_rows*SK + j*sf_group_rows + r, API.md 2.3): a data
    row's token scales, a padding row's zero-row scale, an alignment row (r >= group_rows) 0."""
    group = tl.program_id(2).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    is_row = rows < group_rows
    col_ok = cols < num_sf_cols
    token = tl.load(token_of_row_ptr + group * group_rows + rows, mask=is_row, other=-1)
    has_token = token >= 0
    values = tl.load(token_sf_ptr + token.to(tl.int64)[:, None] * num_sf_cols + cols[None, :],
                     mask=has_token[:, None] & col_ok[None, :], other=0.0)
    zero_row_sf, _ = _scale_from_amax(tl.zeros([BLOCK_ROWS], dtype=tl.float32), USE_UE8M0)
    values = tl.where(has_token[:, None], values, tl.where(is_row, zero_row_sf, 0.0)[:, None])
    tl.store(sf_ptr + group * sf_group_rows * num_sf_cols + cols[None, :] * sf_group_rows + rows[:, None], values,
             mask=(rows < sf_group_rows)[:, None] & col_ok[None, :])


# ---------------------------------------------------------------------------------------------
# Combine


@triton.jit
def _unpermute_combine_kernel(
    y_ptr, row_of_slot_ptr, weights_ptr, out_ptr,
    num_tokens, n, num_rows, rows_per_group,
    stride_y_g, stride_y_m, stride_y_n,
    stride_rows_t, stride_rows_k, stride_w_t, stride_w_k,
    TOPK: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, GROUPED: tl.constexpr,
):
    """out[t, cols] = bf16(sum over used slots k, in increasing k, of float(y[row]) * w[t, k]) for
    BLOCK_T tokens. Unrolled over k so every slot's loads are in flight together; each token's sum
    still runs in k order."""
    tokens = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
    token_ok = tokens < num_tokens
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n
    acc = tl.zeros([BLOCK_T, BLOCK_N], dtype=tl.float32)
    for k in tl.static_range(TOPK):
        rows = tl.load(row_of_slot_ptr + tokens * stride_rows_t + k * stride_rows_k, mask=token_ok, other=-1)
        rows = rows.to(tl.int64)
        used = token_ok & (rows >= 0) & (rows < num_rows)
        rows = tl.where(used, rows, 0)
        if GROUPED:
            y_rows = y_ptr + (rows // rows_per_group) * stride_y_g + (rows % rows_per_group) * stride_y_m
        else:
            y_rows = y_ptr + rows * stride_y_m
        values = tl.load(y_rows[:, None] + cols[None, :] * stride_y_n, mask=used[:, None] & col_ok[None, :],
                         other=0.0).to(tl.float32)
        weights = tl.load(weights_ptr + tokens * stride_w_t + k * stride_w_k, mask=used, other=0.0)
        acc = tl.where(used[:, None], acc + values * weights[:, None], acc)
    tl.store(out_ptr + tokens[:, None] * n + cols[None, :], acc.to(tl.bfloat16),
             mask=token_ok[:, None] & col_ok[None, :])


# ---------------------------------------------------------------------------------------------
# Launchers


def _rank_slots(topk_ids: torch.Tensor, num_experts: int):
    """Launches 1 and 2: (local_rank [T*topk], chunk_offsets [chunks, E], expert_counts [E])."""
    num_tokens, topk = topk_ids.shape
    num_slots = num_tokens * topk
    num_chunks = max(1, _cdiv(num_slots, _CHUNK))
    expert_bins = triton.next_power_of_2(num_experts)
    device = topk_ids.device
    local_rank = torch.empty(num_slots, dtype=torch.int32, device=device)
    chunk_counts = torch.empty((num_chunks, num_experts), dtype=torch.int32, device=device)
    chunk_offsets = torch.empty((num_chunks, num_experts), dtype=torch.int32, device=device)
    expert_counts = torch.empty(num_experts, dtype=torch.int32, device=device)
    _rank_in_chunk_kernel[(num_chunks,)](
        topk_ids, local_rank, chunk_counts,
        num_slots, topk, num_experts, topk_ids.stride(0), topk_ids.stride(1),
        CHUNK=_CHUNK, EXPERT_BINS=expert_bins, num_warps=_RANK_WARPS)
    # One tile covers every chunk of a few experts when it can, so most programs make one pass.
    block_chunks = min(_PREFIX_MAX_CHUNKS, triton.next_power_of_2(num_chunks))
    block_experts = min(expert_bins, max(1, _PREFIX_ELEMENTS // block_chunks))
    _chunk_prefix_kernel[(_cdiv(num_experts, block_experts),)](
        chunk_counts, chunk_offsets, expert_counts, num_chunks, num_experts,
        BLOCK_CHUNKS=block_chunks, BLOCK_EXPERTS=block_experts, num_warps=4)
    return local_rank, chunk_offsets, expert_counts


def _move_blocks(hidden: int, topk: int, quantize: bool, gran_k: int):
    """(TOKENS, TOPK_BLOCK, BLOCK_H, GROUPS_PER_BLOCK, ZERO_ROWS) for the permute kernel: one store
    covers about _MOVE_ELEMENTS elements; small H packs several tokens into one program."""
    topk_block = triton.next_power_of_2(topk)
    block_h = min(_MAX_BLOCK_H, triton.next_power_of_2(max(hidden, 1)), max(16, _MOVE_ELEMENTS // topk_block))
    if quantize:
        block_h = max(block_h, gran_k)
    tokens = max(1, _MOVE_ELEMENTS // (topk_block * block_h))
    zero_rows = max(1, min(_MAX_ZERO_ROWS, _MOVE_ELEMENTS // block_h))
    return tokens, topk_block, block_h, (block_h // gran_k if quantize else 1), zero_rows


def _permute(x, topk_ids, num_experts, ranking, *, start, m_indices, masked_m, group_rows, num_groups,
             quantize, use_ue8m0, gran_k):
    """Launch 4 (and 5 when quantized); returns (permuted [num_groups * group_rows, H],
    sf [num_groups, group_rows, SK] or None, row_of_slot)."""
    local_rank, chunk_offsets, expert_counts = ranking
    num_tokens, hidden = x.shape
    topk = topk_ids.size(1)
    device = x.device
    num_rows = num_groups * group_rows
    num_sf_cols = _cdiv(hidden, gran_k) if quantize else 0
    row_of_slot = torch.empty((num_tokens, topk), dtype=torch.int32, device=device)
    # Unused pointer arguments get some tensor of the right device; their code is compiled out.
    placeholder = expert_counts
    if quantize:
        out = torch.empty((num_rows, hidden), dtype=torch.float8_e4m3fn, device=device)
        token_sf = torch.empty((num_tokens, num_sf_cols), dtype=torch.float32, device=device)
        token_of_row = torch.empty(num_rows, dtype=torch.int32, device=device)
        source, target = x, out
    else:
        out = torch.empty((num_rows, hidden), dtype=x.dtype, device=device)
        token_sf = token_of_row = placeholder
        source, target = x.view(torch.int16), out.view(torch.int16)

    tokens, topk_block, block_h, groups_per_block, zero_rows = _move_blocks(hidden, topk, quantize, gran_k)
    num_token_programs = _cdiv(num_tokens, tokens)
    _permute_rows_kernel[(num_token_programs + _cdiv(num_rows, zero_rows),)](
        source, target, token_sf, token_of_row, topk_ids, local_rank, row_of_slot, chunk_offsets,
        start if start is not None else placeholder, expert_counts,
        m_indices if m_indices is not None else placeholder,
        masked_m if masked_m is not None else placeholder,
        num_tokens, num_token_programs, hidden, topk, num_experts, num_sf_cols,
        x.stride(0), x.stride(1), topk_ids.stride(0), topk_ids.stride(1),
        group_rows, num_groups, (num_experts - 1).bit_length(),
        CHUNK=_CHUNK, TOKENS=tokens, TOPK_BLOCK=topk_block, BLOCK_H=block_h, GROUPS_PER_BLOCK=groups_per_block,
        ZERO_ROWS=zero_rows, GRAN_K=gran_k if quantize else 1,
        QUANTIZE=quantize, USE_UE8M0=bool(use_ue8m0), MASKED=masked_m is not None,
        STORE_M_INDICES=m_indices is not None, num_warps=_MOVE_WARPS)
    if not quantize:
        return out, None, row_of_slot

    sf_group_rows = _cdiv(group_rows, _SF_ALIGNMENT) * _SF_ALIGNMENT
    sf_storage = torch.empty(num_groups * num_sf_cols * sf_group_rows, dtype=torch.float32, device=device)
    if num_sf_cols > 0:
        grid = (_cdiv(sf_group_rows, _SF_BLOCK_ROWS), _cdiv(num_sf_cols, _SF_BLOCK_COLS), num_groups)
        _scatter_scales_kernel[grid](
            token_sf, token_of_row, sf_storage, num_sf_cols, group_rows, sf_group_rows,
            BLOCK_ROWS=_SF_BLOCK_ROWS, BLOCK_COLS=_SF_BLOCK_COLS, USE_UE8M0=bool(use_ue8m0), num_warps=4)
    sf = sf_storage.as_strided((num_groups, group_rows, num_sf_cols), (num_sf_cols * sf_group_rows, 1, sf_group_rows))
    return out, sf, row_of_slot


def permute_contiguous(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, alignment: int,
                       use_psum_layout: bool = False, quantize: bool = False, use_ue8m0: bool = False,
                       gran_k: int = 128) -> MoEContiguousLayout:
    """Contiguous layout (API.md 3.4) of bf16 ``x [T, H]`` routed by ``topk_ids [T, topk]``; see
    ``dg_triton.moe_layout.moe_permute_contiguous``. Arguments are assumed valid."""
    with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
        num_tokens, topk = topk_ids.shape
        ranking = _rank_slots(topk_ids, num_experts)
        expert_counts = ranking[2]
        start = torch.empty(num_experts, dtype=torch.int32, device=x.device)
        psum = torch.empty(num_experts, dtype=torch.int32, device=x.device)
        _expert_starts_kernel[(1,)](expert_counts, start, psum, num_experts, alignment,
                                    EXPERT_BINS=triton.next_power_of_2(num_experts), num_warps=4)
        num_rows = contiguous_layout_rows(num_tokens, topk, num_experts, alignment)
        m_indices = None if use_psum_layout else torch.empty(num_rows, dtype=torch.int32, device=x.device)
        permuted, sf, row_of_slot = _permute(x, topk_ids, num_experts, ranking, start=start, m_indices=m_indices,
                                             masked_m=None, group_rows=num_rows, num_groups=1, quantize=quantize,
                                             use_ue8m0=use_ue8m0, gran_k=gran_k)
    return MoEContiguousLayout(permuted, None if sf is None else sf[0], m_indices, psum, row_of_slot, expert_counts)


def permute_masked(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, max_m: int,
                   quantize: bool = False, use_ue8m0: bool = False, gran_k: int = 128) -> MoEMaskedLayout:
    """Masked layout (API.md 3.5) ``[E, max_m, H]``; see ``dg_triton.moe_layout.moe_permute_masked``.
    Arguments are assumed valid."""
    with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
        ranking = _rank_slots(topk_ids, num_experts)
        masked_m = torch.empty(num_experts, dtype=torch.int32, device=x.device)
        permuted, sf, row_of_slot = _permute(x, topk_ids, num_experts, ranking, start=None, m_indices=None,
                                             masked_m=masked_m, group_rows=max_m, num_groups=num_experts,
                                             quantize=quantize, use_ue8m0=use_ue8m0, gran_k=gran_k)
    return MoEMaskedLayout(permuted.view(num_experts, max_m, x.size(1)), sf, masked_m, row_of_slot, ranking[2])


def unpermute_combine(y: torch.Tensor, row_of_slot: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """bf16 ``[T, N]``: the weighted sum of each token's rows of ``y`` ([rows, N] or [E, max_m, N]);
    see ``dg_triton.moe_layout.moe_unpermute_combine``. Arguments are assumed valid."""
    num_tokens, topk = row_of_slot.shape
    n = y.size(-1)
    out = torch.empty((num_tokens, n), dtype=torch.bfloat16, device=y.device)
    if y.dim() == 3 and y.stride(0) != y.size(1) * y.stride(1):
        # Groups not evenly spaced: a row is found by a 64-bit division, slower but any strides.
        grouped = True
        num_groups, rows_per_group = y.size(0), y.size(1)
        stride_g, stride_m, stride_n = y.stride()
    else:
        # [rows, N], or [E, max_m, N] with evenly spaced groups: one row stride covers every row.
        grouped = False
        num_groups, rows_per_group = 1, y.size(0) * (y.size(1) if y.dim() == 3 else 1)
        stride_g, stride_m, stride_n = 0, y.stride(-2), y.stride(-1)
    if num_tokens == 0 or n == 0:
        return out
    block_n = min(_COMBINE_BLOCK_N, triton.next_power_of_2(n))
    block_t = max(1, _COMBINE_ELEMENTS // block_n)
    with torch.cuda.device(y.device) if y.is_cuda else contextlib.nullcontext():
        _unpermute_combine_kernel[(_cdiv(num_tokens, block_t), _cdiv(n, block_n))](
            y, row_of_slot, topk_weights, out,
            num_tokens, n, num_groups * rows_per_group, max(1, rows_per_group),
            stride_g, stride_m, stride_n,
            row_of_slot.stride(0), row_of_slot.stride(1), topk_weights.stride(0), topk_weights.stride(1),
            TOPK=topk, BLOCK_T=block_t, BLOCK_N=block_n, GROUPED=grouped, num_warps=_COMBINE_WARPS,
            # A fused multiply-add rounds once where the reference rounds twice.
            enable_fp_fusion=False)
    return out
