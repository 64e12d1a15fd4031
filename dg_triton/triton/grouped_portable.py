"""Portable Triton M-grouped BF16 GEMMs (API.md 3.4, 3.5) on any GPU Triton supports, and on CPU
tensors under the Triton interpreter (dispatch.PORTABLE).

Both kernels follow the dense BF16 kernel of gemm_portable (one BLOCK_M x BLOCK_N tile of D per
program, FP32 accumulation, bf16 D) and read the group structure on the device, so a launch never
waits for the host to learn the group sizes and can be captured in a CUDA graph.

- Contiguous, index layout: ``layout[r]`` is row r's group or -1 (padding). A tile takes its group
  from its first row: BLOCK_M divides the mk alignment every segment starts on, so a tile never
  spans two groups. Rows marked -1 (or with an index outside [0, G)) are written as 0 (what
  DeepGEMM's tests expect of zero-filled padding); a tile whose first row is -1 skips the K loop.
- Contiguous, psum layout: ``layout[g]`` is the end row of group g, which starts at
  ``align(layout[g-1], alignment)``. Group starts are multiples of BLOCK_M, so a tile lies inside
  ``[start_g, start_{g+1})`` of the last group g starting at or before its first row; its rows
  below ``layout[g]`` are computed, the rest are the gap before the next group. Gap rows below
  ``layout[G-1]`` are written as 0 when ZERO_GAPS (``ensure_zero_padding``), else left untouched,
  like the rows past ``layout[G-1]``.
- Masked: group g (the grid's second axis) computes its rows below ``masked_m[g]``; tiles past it
  skip the K loop and rows past it are not written.
"""
import torch
import triton
import triton.language as tl

from dg_triton import dispatch, portable
from dg_triton.portable import PortableGemmConfig
from dg_triton.triton import gemm_portable
from dg_triton.triton.gemm_portable import _mma, _tile_coordinates

__all__ = ["contiguous_block_m", "m_grouped_bf16_gemm_contiguous", "m_grouped_bf16_gemm_masked"]


@triton.jit
def _grouped_tile_product(a_ptr, b_ptr, rows64, cols64, computed, col_ok, num_k_blocks, k,
                          stride_am, stride_bn, stride_bk,
                          EVEN_K: tl.constexpr, DOT_IN_FP32: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """A[rows, :] @ B[cols, :]^T in FP32 over num_k_blocks K blocks; a and b point at the group's
    operands (A K-major, B read through its strides). Rows not `computed` read as 0."""
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows64[:, None] * stride_am + ks.to(tl.int64)[None, :]
    b_ptrs = b_ptr + ks.to(tl.int64)[:, None] * stride_bk + cols64[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_block in range(num_k_blocks):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=computed[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=col_ok[None, :], other=0.0)
        else:
            k_ok = ks < k - k_block * BLOCK_K
            a = tl.load(a_ptrs, mask=computed[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = _mma(a, b, acc, DOT_IN_FP32)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def _m_grouped_contiguous_kernel(
    a_ptr, b_ptr, d_ptr, layout_ptr,
    m, n, k, num_groups, mk_alignment,
    stride_am, stride_bg, stride_bn, stride_bk, stride_dm,
    USE_PSUM: tl.constexpr, ZERO_GAPS: tl.constexpr, EVEN_K: tl.constexpr, DOT_IN_FP32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    BLOCK_G: tl.constexpr,
):
    pid_m, pid_n = _tile_coordinates(m, n, BLOCK_M, BLOCK_N, GROUP_M)
    first_row = pid_m * BLOCK_M
    rows = first_row + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < m
    col_ok = cols < n
    if USE_PSUM:
        groups = tl.arange(0, BLOCK_G)
        previous_end = tl.load(layout_ptr + groups - 1, mask=(groups > 0) & (groups < num_groups), other=0)
        starts = (previous_end + mk_alignment - 1) // mk_alignment * mk_alignment
        # Empty groups share their start with the next group: counting every start at or before
        # the tile picks the last of them, the one that owns rows.
        group = tl.sum(((starts <= first_row) & (groups < num_groups)).to(tl.int32), axis=0) - 1
        group_end = tl.load(layout_ptr + group)
        computed = row_ok & (rows < group_end)
        if ZERO_GAPS:
            written = row_ok & (rows < tl.load(layout_ptr + num_groups - 1))
        else:
            written = computed
        has_rows = group_end > first_row
    else:
        # An index outside [0, G) is treated as padding (-1): it can never send a read past B.
        group = tl.load(layout_ptr + first_row)
        row_groups = tl.load(layout_ptr + rows, mask=row_ok, other=-1)
        computed = row_ok & (row_groups >= 0) & (row_groups < num_groups)
        written = row_ok
        has_rows = (group >= 0) & (group < num_groups)
        group = tl.where(has_rows, group, 0)
    num_k_blocks = tl.where(has_rows, tl.cdiv(k, BLOCK_K), 0)
    rows64 = rows.to(tl.int64)
    cols64 = cols.to(tl.int64)
    group_b_ptr = b_ptr + tl.maximum(group, 0).to(tl.int64) * stride_bg
    acc = _grouped_tile_product(a_ptr, group_b_ptr, rows64, cols64, computed, col_ok, num_k_blocks, k,
                                stride_am, stride_bn, stride_bk,
                                EVEN_K, DOT_IN_FP32, BLOCK_M, BLOCK_N, BLOCK_K)
    acc = tl.where(computed[:, None], acc, 0.0)
    d_ptrs = d_ptr + rows64[:, None] * stride_dm + cols64[None, :]
    tl.store(d_ptrs, acc.to(d_ptr.dtype.element_ty), mask=written[:, None] & col_ok[None, :])


@triton.jit
def _m_grouped_masked_kernel(
    a_ptr, b_ptr, d_ptr, masked_m_ptr,
    max_m, n, k,
    stride_ag, stride_am, stride_bg, stride_bn, stride_bk, stride_dg, stride_dm,
    EVEN_K: tl.constexpr, DOT_IN_FP32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid_m, pid_n = _tile_coordinates(max_m, n, BLOCK_M, BLOCK_N, GROUP_M)
    group = tl.program_id(1).to(tl.int64)
    valid_rows = tl.minimum(tl.load(masked_m_ptr + group), max_m)
    first_row = pid_m * BLOCK_M
    rows = first_row + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    computed = rows < valid_rows
    col_ok = cols < n
    num_k_blocks = tl.where(first_row < valid_rows, tl.cdiv(k, BLOCK_K), 0)
    rows64 = rows.to(tl.int64)
    cols64 = cols.to(tl.int64)
    acc = _grouped_tile_product(a_ptr + group * stride_ag, b_ptr + group * stride_bg, rows64, cols64,
                                computed, col_ok, num_k_blocks, k, stride_am, stride_bn, stride_bk,
                                EVEN_K, DOT_IN_FP32, BLOCK_M, BLOCK_N, BLOCK_K)
    d_ptrs = d_ptr + group * stride_dg + rows64[:, None] * stride_dm + cols64[None, :]
    tl.store(d_ptrs, acc.to(d_ptr.dtype.element_ty), mask=computed[:, None] & col_ok[None, :])


def contiguous_block_m(block_m: int, mk_alignment: int) -> int:
    """The largest power of two <= block_m that divides the mk alignment, so that no tile spans
    two groups (the alignment is a positive multiple of 16: at least 16)."""
    while block_m > 16 and mk_alignment % block_m:
        block_m //= 2
    return block_m


def m_grouped_bf16_gemm_contiguous(function: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                   grouped_layout: torch.Tensor, use_psum_layout: bool,
                                   ensure_zero_padding: bool, mk_alignment: int,
                                   expected_m: int | None = None,
                                   config: PortableGemmConfig | None = None) -> None:
    """The contiguous grouped GEMM for a validated, non-empty problem: a [M, K] bf16 K-major, b
    [G, N, K] bf16 with any per-group strides, d [M, N] bf16 with stride(1) == 1, grouped_layout
    int32 [M] (index) or [G] (psum) on d's device. `expected_m` (rows per group) only guides the
    config; `config` forces one (its block_m is still cut to divide `mk_alignment`)."""
    gemm_portable._check_runnable(d)
    m, k = a.shape
    num_groups, n = b.shape[0], b.shape[1]
    if config is None:
        hint_m = expected_m * num_groups if expected_m else m
        config = portable.choose_config(portable.BF16_GEMM, max(hint_m, 1), n, k, d.device)
        dispatch.print_config_once(function, (m, n, k, num_groups), d.device, config)
    block_m = contiguous_block_m(config.block_m, mk_alignment)
    grid = (gemm_portable._cdiv(m, block_m) * gemm_portable._cdiv(n, config.block_n),)
    gemm_portable._launch(_m_grouped_contiguous_kernel, grid, d,
            (a, b, d, grouped_layout, m, n, k, num_groups, mk_alignment,
             a.stride(0), b.stride(0), b.stride(1), b.stride(2), d.stride(0)),
            {"USE_PSUM": use_psum_layout, "ZERO_GAPS": bool(ensure_zero_padding),
             "EVEN_K": k % config.block_k == 0, "DOT_IN_FP32": not d.is_cuda,
             "BLOCK_M": block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
             "GROUP_M": config.group_m, "BLOCK_G": triton.next_power_of_2(num_groups)},
            config)


def m_grouped_bf16_gemm_masked(function: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                               masked_m: torch.Tensor, expected_m: int,
                               config: PortableGemmConfig | None = None) -> None:
    """The masked grouped GEMM for a validated problem: a [G, max_m, K] and b [G, N, K] bf16
    K-major, d [G, max_m, N] bf16 N-major, masked_m int32 [G] on d's device. `expected_m`
    (typical rows per group) only guides the config."""
    gemm_portable._check_runnable(d)
    num_groups, max_m, k = a.shape
    n = b.shape[1]
    if config is None:
        config = portable.choose_config(portable.BF16_GEMM, min(expected_m, max_m), n, k, d.device)
        dispatch.print_config_once(function, (num_groups, max_m, n, k), d.device, config)
    grid = (gemm_portable._cdiv(max_m, config.block_m) * gemm_portable._cdiv(n, config.block_n), num_groups)
    gemm_portable._launch(_m_grouped_masked_kernel, grid, d,
            (a, b, d, masked_m, max_m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
             b.stride(2), d.stride(0), d.stride(1)),
            {"EVEN_K": k % config.block_k == 0, "DOT_IN_FP32": not d.is_cuda,
             "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
             "GROUP_M": config.group_m},
            config)
