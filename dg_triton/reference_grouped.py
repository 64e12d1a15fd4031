"""Plain-torch reference math of the M-grouped BF16 GEMMs (API.md 3.4, 3.5), the spec the portable
kernels (dg_triton/triton/grouped_portable.py) are tested against.

Each function returns the D the GEMM leaves behind, as a new tensor: rows the GEMM computes hold
``a.float() @ b[g].float().T`` cast to bf16; padding rows the portable path writes as 0 hold 0;
rows the GEMM leaves untouched keep d's content. ``meaningful_rows`` says which rows carry meaning
for a caller (API.md 10: padding and masked-off rows do not). The group structure is read on the
host (.tolist()): this is reference code, not a kernel.
"""
import torch

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
    out = d.clone()
    if a.shape[0] == 0:
        return out
    if not use_psum_layout:
        indices = grouped_layout.to(torch.int64)
        out[indices < 0] = 0
        for g in range(b.shape[0]):
            rows = indices == g
            out[rows] = _product(a[rows], b[g])
        return out
    ranges = psum_group_ranges(grouped_layout, mk_alignment)
    last_end = ranges[-1][1]
    if ensure_zero_padding:
        out[:last_end] = 0
    for g, (start, end) in enumerate(ranges):
        if end > start:
            out[start:end] = _product(a[start:end], b[g])
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
    out = d.clone()
    for g, rows in enumerate(masked_m.tolist()):
        out[g, :rows] = _product(a[g, :rows], b[g])
    return out


def masked_meaningful_rows(masked_m: torch.Tensor, max_m: int) -> torch.Tensor:
    """Bool [G, max_m]: row r of group g is below masked_m[g]."""
    return torch.arange(max_m, device=masked_m.device)[None, :] < masked_m.to(torch.int64)[:, None]
