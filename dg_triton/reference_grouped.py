"""Plain-torch reference math of the M-grouped BF16 and FP8 GEMMs (API.md 3.4, 3.5), the spec the
kernels are tested against.

Each function returns the D the GEMM leaves behind, as a new tensor: rows the GEMM computes hold
``a.float() @ b[g].float().T`` cast to bf16 (FP8: the operands dequantized first, API.md 3.1);
padding rows the kernels write as 0 hold 0; rows the GEMM leaves untouched keep d's content.
``meaningful_rows`` says which rows carry meaning for a caller (API.md 10: padding and masked-off
rows do not). The group structure is read on the host (.tolist()): this is reference code, not a
kernel. BF16 and FP8 share the row bookkeeping (`_contiguous`, `_masked`), so both follow the same
padding and masking rules; they differ only in the per-group product.
"""
import torch

from dg_triton.reference_fp8 import dequantize_operand, resolve_recipe
from dg_triton.utils.math import align


def _product(a_rows: torch.Tensor, b_group: torch.Tensor) -> torch.Tensor:
    return (a_rows.float() @ b_group.float().T).to(torch.bfloat16)


def psum_group_ranges(psum: torch.Tensor, mk_alignment: int) -> list[tuple[int, int]]:
    """[(start, end)] of each group of a psum layout: ``[align(psum[g-1], alignment), psum[g])``."""
    ranges, previous_end = [], 0
    for end in psum.tolist():
        ranges.append((align(previous_end, mk_alignment), end))
        previous_end = end
    return ranges


def m_grouped_contiguous_reference(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                   grouped_layout: torch.Tensor, use_psum_layout: bool = False,
                                   mk_alignment: int | None = None,
                                   ensure_zero_padding: bool = True) -> torch.Tensor:
    """``m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, ...)``'s D.

    Index layout: row r of group ``grouped_layout[r] >= 0`` is ``a[r] @ b[g].T``; rows of -1 are 0.
    Psum layout: group g's rows ``[align(psum[g-1], mk_alignment), psum[g])`` are computed; with
    ``ensure_zero_padding`` the gap rows below ``psum[G-1]`` are 0; every other row keeps d's content.
    """
    return _contiguous(d, grouped_layout, b.shape[0], lambda rows, g: _product(a[rows], b[g]),
                       use_psum_layout, mk_alignment, ensure_zero_padding)


def _contiguous(d, grouped_layout, num_groups: int, product, use_psum_layout: bool, mk_alignment,
                ensure_zero_padding: bool) -> torch.Tensor:
    """The row bookkeeping of the contiguous layouts; ``product(rows, g)`` is group g's bf16 output
    for the rows selected by ``rows`` (a bool mask or a slice of A's rows)."""
    out = d.clone()
    if d.shape[0] == 0:
        return out
    if not use_psum_layout:
        indices = grouped_layout.to(torch.int64)
        out[indices < 0] = 0
        for g in range(num_groups):
            rows = indices == g
            out[rows] = product(rows, g)
        return out
    ranges = psum_group_ranges(grouped_layout, mk_alignment)
    last_end = ranges[-1][1]
    if ensure_zero_padding:
        out[:last_end] = 0
    for g, (start, end) in enumerate(ranges):
        if end > start:
            out[start:end] = product(slice(start, end), g)
    return out


def contiguous_meaningful_rows(grouped_layout: torch.Tensor, m: int, use_psum_layout: bool = False,
                               mk_alignment: int | None = None) -> torch.Tensor:
    """Bool [M]: the rows that belong to a group (not padding, not a psum gap)."""
    if not use_psum_layout:
        return grouped_layout.to(torch.int64) >= 0
    mask = torch.zeros(m, dtype=torch.bool)
    for start, end in psum_group_ranges(grouped_layout, mk_alignment):
        mask[start:end] = True
    return mask.to(grouped_layout.device)


def m_grouped_masked_reference(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                               masked_m: torch.Tensor) -> torch.Tensor:
    """``m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, ...)``'s D on the rows that carry meaning:
    ``d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g].T``; rows at or past masked_m[g] keep d's
    content (the API leaves them unspecified; the portable kernel does not write them)."""
    return _masked(d, masked_m, lambda g, rows: _product(a[g, :rows], b[g]))


def _masked(d, masked_m, product) -> torch.Tensor:
    """The row bookkeeping of the masked layout; ``product(g, rows)`` is group g's bf16 output for
    its first ``rows`` rows."""
    out = d.clone()
    for g, rows in enumerate(masked_m.tolist()):
        out[g, :rows] = product(g, rows)
    return out


def masked_meaningful_rows(masked_m: torch.Tensor, max_m: int) -> torch.Tensor:
    """Bool [G, max_m]: row r of group g is below masked_m[g]."""
    return torch.arange(max_m, device=masked_m.device)[None, :] < masked_m.to(torch.int64)[:, None]


# ---------------------------------------------------------------------------------------------
# FP8 (API.md 3.4, 3.5 with a = (data, sfa), b = (data, sfb)): each group's B dequantized when its
# rows are computed, so a reference of many large experts never holds all of B in FP32 at once.


def _fp8_granularities(sfb: torch.Tensor, recipe, recipe_a, recipe_b):
    # The default of API.md 1.5 for an fp32 per-block sfb: (1, 128, 128).
    return resolve_recipe(sfb, recipe, recipe_a, recipe_b)


def m_grouped_fp8_contiguous_reference(a, b, d: torch.Tensor, grouped_layout: torch.Tensor,
                                       use_psum_layout: bool = False, mk_alignment: int | None = None,
                                       ensure_zero_padding: bool = True, recipe=None, recipe_a=None,
                                       recipe_b=None) -> torch.Tensor:
    """``m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, ...)``'s D, with the row
    rules of ``m_grouped_contiguous_reference``: a = (A fp8 [M, K], sfa [M, ceil(K/gk)]), b = (B fp8
    [G, N, K], sfb [G, ceil(N/gn), ceil(K/gk)]), any SF strides; row r of group g is
    ``dequant(a)[r] @ dequant(b[g]).T`` in FP32, cast to bf16."""
    (a_data, sfa), (b_data, sfb) = a, b
    gran_a, gran_b = _fp8_granularities(sfb, recipe, recipe_a, recipe_b)
    m, n = a_data.shape[0], b_data.shape[1]
    a_values = dequantize_operand(a_data, sfa, m, *gran_a) if m else None

    def product(rows, g):
        return _product(a_values[rows], dequantize_operand(b_data[g], sfb[g], n, *gran_b))
    return _contiguous(d, grouped_layout, b_data.shape[0], product, use_psum_layout, mk_alignment,
                       ensure_zero_padding)


def m_grouped_fp8_masked_reference(a, b, d: torch.Tensor, masked_m: torch.Tensor, recipe=None,
                                   recipe_a=None, recipe_b=None) -> torch.Tensor:
    """``m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, ...)``'s D on the rows that carry
    meaning, with the row rules of ``m_grouped_masked_reference``: a = (A fp8 [G, max_m, K], sfa
    [G, max_m, ceil(K/gk)]), b = (B fp8 [G, N, K], sfb [G, ceil(N/gn), ceil(K/gk)])."""
    (a_data, sfa), (b_data, sfb) = a, b
    gran_a, gran_b = _fp8_granularities(sfb, recipe, recipe_a, recipe_b)
    n = b_data.shape[1]

    def product(g, rows):
        gran_m = gran_a[0]
        a_rows = dequantize_operand(a_data[g, :rows], sfa[g, :-(-rows // gran_m)], rows, *gran_a)
        return _product(a_rows, dequantize_operand(b_data[g], sfb[g], n, *gran_b))
    return _masked(d, masked_m, product)
