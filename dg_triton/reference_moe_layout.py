"""Reference math of the MoE token layouts, in plain torch on any device: the specification the
Triton kernels of ``dg_triton.triton.moe_layout`` are tested against bitwise, and what the public
functions of ``dg_triton.moe_layout`` run on non-CUDA tensors. No argument checks here (the public
functions do them); this code may synchronize freely.

Vocabulary:

- a *slot* is one (token t, choice k) pair of ``topk_ids [T, topk]``; its flat index is
  ``t * topk + k``. A slot whose id is outside ``[0, E)`` (``-1`` by convention) is *unused*.
- within an expert, slots are ranked in ascending flat index (rank 0 = the first slot routed there).
  The order is what makes every layout deterministic and bitwise comparable.

Contiguous layout (API.md 3.4, index and psum form share the physical rows): expert ``g``'s
segment starts at ``start[g] = sum_{h<g} align(count[h], alignment)`` (a multiple of the
alignment); its ``count[g]`` rows come first, in rank order, then padding rows up to the next
multiple. ``psum[g] = start[g] + count[g]``, so ``align(psum[g-1], alignment) == start[g]``.
The row count is the host-known bound ``align(T*topk + E*(alignment-1), alignment)``; rows past the
last segment are *tail* rows. Padding and tail rows of the activations are 0, of ``m_indices`` -1.

Masked layout (API.md 3.5): expert ``g``'s slot of rank ``r < max_m`` goes to ``[g, r]``; slots of
rank ``>= max_m`` are dropped. ``masked_m[g] = min(count[g], max_m)``; rows ``>= masked_m[g]`` are 0.

Quantized outputs are ``per_token_cast_to_fp8`` (``dg_triton.reference_quant``) of the bf16 layout,
with the SF in the TMA-aligned MN-major layout of API.md 2.3 (its alignment rows 0).
"""
from typing import NamedTuple

import torch

from . import reference_quant
from .reference_sf_layout import empty_mn_major_tma_aligned

__all__ = [
    "MoEContiguousLayout",
    "MoEMaskedLayout",
    "contiguous_layout_rows",
    "expert_ranks",
    "moe_permute_contiguous",
    "moe_permute_masked",
    "moe_unpermute_combine",
]


class MoEContiguousLayout(NamedTuple):
    """Result of ``moe_permute_contiguous``.

    permuted: bf16 ``[M_pad, H]``, or float8_e4m3fn ``[M_pad, H]`` when quantized.
    sf: None, or (quantized) fp32 ``[M_pad, ceil(H/gran_k)]`` in the TMA-aligned MN-major layout.
    m_indices: int32 ``[M_pad]`` (index layout), or None when the psum layout was asked for.
    psum: int32 ``[E]``, end row of each expert (always given: it costs nothing).
    row_of_slot: int32 ``[T, topk]``, the permuted row of each slot, -1 for unused slots.
    expert_counts: int32 ``[E]``, slots routed to each expert.
    """

    permuted: torch.Tensor
    sf: torch.Tensor | None
    m_indices: torch.Tensor | None
    psum: torch.Tensor
    row_of_slot: torch.Tensor
    expert_counts: torch.Tensor

    @property
    def a(self):
        """The ``a`` argument of the m-grouped contiguous GEMMs: ``permuted`` or ``(permuted, sf)``."""
        return self.permuted if self.sf is None else (self.permuted, self.sf)

    @property
    def grouped_layout(self) -> torch.Tensor:
        """The ``grouped_layout`` argument matching the layout asked for: m_indices, else psum."""
        return self.psum if self.m_indices is None else self.m_indices


class MoEMaskedLayout(NamedTuple):
    """Result of ``moe_permute_masked``.

    permuted: bf16 ``[E, max_m, H]``, or float8_e4m3fn when quantized.
    sf: None, or (quantized) fp32 ``[E, max_m, ceil(H/gran_k)]`` TMA-aligned MN-major (API.md 2.3).
    masked_m: int32 ``[E]``, ``min(expert_counts, max_m)``.
    row_of_slot: int32 ``[T, topk]``, ``g * max_m + r`` for a kept slot, -1 if unused or dropped.
    expert_counts: int32 ``[E]``, slots routed to each expert before dropping; any value above
        ``max_m`` means that expert overflowed (checkable on the device, no host sync needed).
    """

    permuted: torch.Tensor
    sf: torch.Tensor | None
    masked_m: torch.Tensor
    row_of_slot: torch.Tensor
    expert_counts: torch.Tensor

    @property
    def a(self):
        """The ``a`` argument of the m-grouped masked GEMMs: ``permuted`` or ``(permuted, sf)``."""
        return self.permuted if self.sf is None else (self.permuted, self.sf)


def _align(x, y):
    return (x + y - 1) // y * y


def contiguous_layout_rows(num_tokens: int, topk: int, num_experts: int, alignment: int) -> int:
    """``M_pad``: the rows of the contiguous layout, an upper bound known on the host. It assumes
    every slot is used (``T * topk``) and every expert wastes ``alignment - 1`` padding rows."""
    return _align(num_tokens * topk + num_experts * (alignment - 1), alignment)


def expert_ranks(topk_ids: torch.Tensor, num_experts: int):
    """Per flat slot: ``(expert, rank)`` int64 ``[T*topk]`` (both -1 for an unused slot) and the
    int32 ``[E]`` slot count of each expert. ``rank`` counts the earlier slots of the same expert."""
    flat = topk_ids.reshape(-1).to(torch.int64)
    used = (flat >= 0) & (flat < num_experts)
    # Unused slots sort after every expert under the sentinel key E; a stable sort keeps each
    # expert's slots in flat order, so a slot's rank is its sorted position minus its expert's first.
    key = torch.where(used, flat, num_experts)
    order = torch.sort(key, stable=True).indices
    counts = torch.bincount(key, minlength=num_experts + 1)
    first_position = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(flat)
    rank[order] = torch.arange(flat.numel(), device=flat.device) - first_position[key[order]]
    expert = torch.where(used, flat, -1)
    return expert, torch.where(used, rank, -1), counts[:num_experts].to(torch.int32)


def _scatter_rows(x: torch.Tensor, topk: int, rows: torch.Tensor, num_rows: int) -> torch.Tensor:
    """A zero ``[num_rows, H]`` tensor holding ``x[t]`` at row ``rows[t*topk + k]`` (>= 0)."""
    out = torch.zeros((num_rows, x.size(1)), dtype=x.dtype, device=x.device)
    kept = rows >= 0
    tokens = torch.arange(rows.numel(), device=x.device) // topk
    out[rows[kept]] = x[tokens[kept]]
    return out


def _quantize(permuted: torch.Tensor, use_ue8m0: bool, gran_k: int, num_groups: int | None):
    """Per-token cast of a ``[rows, H]`` layout; SF in the 2.3 layout, 3-D with ``num_groups``."""
    q, sf = reference_quant.per_token_cast_to_fp8(permuted, use_ue8m0, gran_k)
    if num_groups is not None:
        q = q.view(num_groups, -1, q.size(1))
        sf = sf.view(num_groups, -1, sf.size(1))
    aligned = empty_mn_major_tma_aligned(sf.shape, sf.dtype, sf.device)
    aligned.copy_(sf)
    return q, aligned


def moe_permute_contiguous(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, alignment: int,
                           use_psum_layout: bool = False, quantize: bool = False, use_ue8m0: bool = False,
                           gran_k: int = 128) -> MoEContiguousLayout:
    num_tokens, topk = topk_ids.shape
    expert, rank, counts = expert_ranks(topk_ids, num_experts)
    aligned_counts = (counts + alignment - 1) // alignment * alignment
    start = torch.cumsum(aligned_counts, 0, dtype=torch.int32) - aligned_counts
    num_rows = contiguous_layout_rows(num_tokens, topk, num_experts, alignment)

    rows = torch.where(expert >= 0, start[expert.clamp(min=0)] + rank, -1)
    permuted = _scatter_rows(x, topk, rows, num_rows)
    m_indices = None
    if not use_psum_layout:
        m_indices = torch.full((num_rows,), -1, dtype=torch.int32, device=x.device)
        m_indices[rows[rows >= 0]] = expert[rows >= 0].to(torch.int32)
    sf = None
    if quantize:
        permuted, sf = _quantize(permuted, use_ue8m0, gran_k, None)
    return MoEContiguousLayout(permuted, sf, m_indices, (start + counts).to(torch.int32),
                               rows.view(num_tokens, topk).to(torch.int32), counts)


def moe_permute_masked(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, max_m: int,
                       quantize: bool = False, use_ue8m0: bool = False, gran_k: int = 128) -> MoEMaskedLayout:
    num_tokens, topk = topk_ids.shape
    expert, rank, counts = expert_ranks(topk_ids, num_experts)
    kept = (expert >= 0) & (rank < max_m)
    rows = torch.where(kept, expert * max_m + rank, -1)
    permuted = _scatter_rows(x, topk, rows, num_experts * max_m)
    sf = None
    if quantize:
        permuted, sf = _quantize(permuted, use_ue8m0, gran_k, num_experts)
    else:
        permuted = permuted.view(num_experts, max_m, x.size(1))
    return MoEMaskedLayout(permuted, sf, counts.clamp(max=max_m), rows.view(num_tokens, topk).to(torch.int32),
                           counts)


def moe_unpermute_combine(y: torch.Tensor, row_of_slot: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """``out[t] = bf16(sum over used k, in increasing k, of float(y[row_of_slot[t, k]]) * w[t, k])``,
    fp32 accumulation from +0.0, one rounding per product and per sum (no FMA). A slot is used
    when its row is in ``[0, rows of y)``; unused slots' weights are never read (NaN there is
    harmless). ``y`` is ``[rows, N]`` or ``[E, max_m, N]`` (rows = E * max_m)."""
    y_rows = y.reshape(-1, y.size(-1))
    num_tokens, topk = row_of_slot.shape
    out = torch.zeros((num_tokens, y_rows.size(1)), dtype=torch.float32, device=y.device)
    if y_rows.size(0) == 0:
        return out.to(torch.bfloat16)
    for k in range(topk):
        rows = row_of_slot[:, k].to(torch.int64)
        used = ((rows >= 0) & (rows < y_rows.size(0))).unsqueeze(1)
        product = y_rows[rows.clamp(0, y_rows.size(0) - 1)].float() * topk_weights[:, k:k + 1]
        out = torch.where(used, out + product, out)
    return out.to(torch.bfloat16)
