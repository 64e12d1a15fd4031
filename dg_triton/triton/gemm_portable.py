"""Portable Triton GEMMs: the dense BF16 and FP8 families of API.md 3.1 / 3.2 on any GPU Triton
supports, and on CPU tensors under the Triton interpreter (dispatch.PORTABLE).

Both kernels compute one BLOCK_M x BLOCK_N tile of D per program, tiles ordered in groups of
GROUP_M rows of tiles so that consecutive programs share B tiles in L2. Operands are read through
their strides, so every major-ness the BF16 API accepts (A, B each K- or MN-major) is one kernel:
Triton specializes a unit stride as a constant and vectorizes the loads along that dim.

- BF16: ``D = (D if ACCUMULATE else 0) + A @ B^T``, FP32 accumulation, D bf16 or fp32.
- FP8 (E4M3, K-major, fp32 scale factors): per 128-wide K block, ``tl.dot`` into a fresh FP32
  accumulator, then ``acc += partial * (sfa[:, None] * sfb[None, :])`` in FP32, the promotion of
  the SM90 CUDA kernel. sfa is per token (1 x 128); sfb per 128 x 128 block ("1d2d") or per
  token ("1d1d"). The scale factors are read through their strides, so the layouts
  ``transform_sf_into_required_layout`` produces (TMA-aligned MN-major sfa) need no copy.

How the operands reach shared memory and ``tl.dot``:

- on GPUs with TMA (SM90 on), through host-built TMA descriptors (``USE_TMA``): no address math
  or masks in the K loop (out-of-bounds boxes read as 0), fewer registers, and the pipeline's
  copies issued by one thread; elsewhere (and where an operand breaks TMA's 16-byte rules, and by
  default under the interpreter) through pointers and masks;
- bf16 or fp8 straight into the tensor cores (FP8 MMA exists from SM89 on);
- GPUs without FP8 tensor cores (capability < 8.9; Triton has no fp8e4nv type there at all):
  the FP8 codes are loaded as bytes and decoded in registers to fp16 (``FP8_AS_BITS``), which
  holds every E4M3 value exactly, so only the accumulation order differs from the FP8 MMA;
- under the interpreter, whose bf16 arithmetic works on raw bits (TOOLCHAIN.md), BF16 tiles are
  multiplied in fp32 (``DOT_IN_FP32``): bf16 -> fp32 is exact and products of bf16 values are
  exact in fp32, so the result is the same sum in another order.

Split-K (``config.split_k`` > 1, for decode-sized M whose output tiles cannot fill the GPU): the
grid's second axis cuts K into slices of whole K blocks; each program writes its slice's FP32
partial tile to a workspace, and a second kernel sums the slices in a fixed order (deterministic)
into D, adding c. FP8 with a 1D2D B and tiles of at most 128 columns reads one B scale per K block
(a tile lies inside one 128-column scale block) and folds it into the per-row A scale.

Launchers take validated operands, pick a config (dg_triton.portable: tuned file, else built-in
default), launch one kernel (two with split-K) and never read device data on the host, so they can
be captured in a CUDA graph. ``d`` already holds ``c`` when ``accumulate`` is set (the public layer
copied it).
"""
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from dg_triton import dispatch, portable
from dg_triton.portable import PortableGemmConfig

__all__ = ["bf16_gemm", "fp8_gemm", "fp8_operand_mode"]

# The K granularity of every FP8 scale factor the portable path reads (API.md 1.5, SM90 recipes).
FP8_GRAN_K = 128


@triton.jit
def _tile_coordinates(m, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of this program: tiles in column-major order within bands of GROUP_M tile
    rows, so the programs running together reuse the same B columns from L2."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(m, BLOCK_M)
    num_pid_n = tl.cdiv(n, BLOCK_N)
    tiles_per_band = GROUP_M * num_pid_n
    band = pid // tiles_per_band
    first_pid_m = band * GROUP_M
    band_rows = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    within = pid % tiles_per_band
    return first_pid_m + within % band_rows, within // band_rows


@triton.jit
def _mma(a, b, acc, DOT_IN_FP32: tl.constexpr):
    """acc + a @ b; in exact fp32 under the interpreter (see the module docstring)."""
    if DOT_IN_FP32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _e4m3_bits_to_float16(bits):
    """FP8 E4M3 codes (the fn variant: no infinities, 0x7F / 0xFF are NaN) loaded as uint8, as
    exact fp16, for GPUs whose Triton has no fp8e4nv type (SM80). The sign, exponent and mantissa
    bits move into fp16's positions, which reads the value scaled by 2^(7 - 15); the multiply by
    2^8 restores it, subnormals included (fp16's range holds every E4M3 value exactly)."""
    x = bits.to(tl.int16)
    half_bits = ((x & 0x80) << 8) | ((x & 0x7F) << 7)
    value = half_bits.to(tl.float16, bitcast=True) * 256.0
    return tl.where((x & 0x7F) == 0x7F, float("nan"), value)


@triton.jit
def _operand_tile(desc, first, k_start, K_MAJOR: tl.constexpr, AS_RIGHT: tl.constexpr):
    """The tile of an operand at (rows from `first`, K from `k_start`) through its TMA descriptor:
    [rows, K] for the left operand of tl.dot, [K, rows] for the right one. A K-major operand's
    descriptor is over [rows, K], an MN-major one's over [K, rows]; rows or K past the end read
    as 0 (TMA's out-of-bounds fill), so neither tails nor masks need handling here."""
    if K_MAJOR:
        tile = desc.load([first, k_start])
        if AS_RIGHT:
            tile = tile.T
    else:
        tile = desc.load([k_start, first])
        if not AS_RIGHT:
            tile = tile.T
    return tile


@triton.jit
def _store_tile(acc, d_ptr, ws_ptr, rows64, out_cols, row_ok, col_ok, m, n, stride_dm,
                ACCUMULATE: tl.constexpr, SPLIT: tl.constexpr):
    """The tile's result: with SPLIT, this K slice's FP32 partial into the workspace
    [splits, m, n] (summed by _split_k_reduce_kernel); else into D (plus D's content, c, when
    ACCUMULATE), only the in-range part."""
    mask = row_ok[:, None] & col_ok[None, :]
    if SPLIT:
        ws_ptrs = ws_ptr + tl.program_id(1).to(tl.int64) * m * n + rows64[:, None] * n + out_cols[None, :]
        tl.store(ws_ptrs, acc, mask=mask)
    else:
        d_ptrs = d_ptr + rows64[:, None] * stride_dm + out_cols[None, :]
        if ACCUMULATE:
            acc = tl.load(d_ptrs, mask=mask, other=0.0).to(tl.float32) + acc
        tl.store(d_ptrs, acc.to(d_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _k_block_range(k, k_blocks_per_split, BLOCK_K: tl.constexpr):
    """[first, last) K blocks of this program's K slice (program_id(1); one slice without
    split-K, where k_blocks_per_split covers all of K)."""
    first = tl.program_id(1) * k_blocks_per_split
    return first, tl.minimum(first + k_blocks_per_split, tl.cdiv(k, BLOCK_K))


@triton.jit
def _bf16_gemm_kernel(
    a_ptr, b_ptr, d_ptr, ws_ptr, a_desc, b_desc,
    m, n, k, k_blocks_per_split,
    stride_am, stride_ak, stride_bn, stride_bk, stride_dm,
    ACCUMULATE: tl.constexpr, EVEN_K: tl.constexpr, DOT_IN_FP32: tl.constexpr,
    USE_TMA: tl.constexpr, A_K_MAJOR: tl.constexpr, B_K_MAJOR: tl.constexpr, SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """D[tile] = (D[tile] if ACCUMULATE else 0) + A[rows, kslice] @ B[cols, kslice]^T. Rows and
    columns past M / N and K past the end read as 0; only the in-range part of the tile is
    stored. Operands come through TMA descriptors (USE_TMA) or pointers and masks."""
    pid_m, pid_n = _tile_coordinates(m, n, BLOCK_M, BLOCK_N, GROUP_M)
    first_block, last_block = _k_block_range(k, k_blocks_per_split, BLOCK_K)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < m
    col_ok = cols < n
    # 64-bit offsets: an fp32 D of 129280 x 7168 (the LM head) has more than 2^31 elements.
    rows64 = rows.to(tl.int64)
    k_first = first_block * BLOCK_K
    a_ptrs = a_ptr + rows64[:, None] * stride_am + (k_first + ks).to(tl.int64)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_first + ks).to(tl.int64)[:, None] * stride_bk + cols.to(tl.int64)[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_block in range(first_block, last_block):
        if USE_TMA:
            a = _operand_tile(a_desc, pid_m * BLOCK_M, k_block * BLOCK_K, A_K_MAJOR, False)
            b = _operand_tile(b_desc, pid_n * BLOCK_N, k_block * BLOCK_K, B_K_MAJOR, True)
        elif EVEN_K:
            a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=col_ok[None, :], other=0.0)
        else:
            k_ok = ks < k - k_block * BLOCK_K
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = _mma(a, b, acc, DOT_IN_FP32)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    _store_tile(acc, d_ptr, ws_ptr, rows64, cols.to(tl.int64), row_ok, col_ok, m, n, stride_dm,
                ACCUMULATE, SPLIT)


@triton.jit
def _fp8_gemm_kernel(
    a_ptr, sfa_ptr, b_ptr, sfb_ptr, d_ptr, ws_ptr, a_desc, b_desc,
    m, n, k, k_blocks_per_split,
    stride_am, stride_ak, stride_bn, stride_bk, stride_dm,
    stride_sfa_m, stride_sfa_k, stride_sfb_n, stride_sfb_k,
    head_left, head_mid, head_right,
    SFB_PER_BLOCK: tl.constexpr, ACCUMULATE: tl.constexpr, SKIP_HEAD_MID: tl.constexpr,
    FP8_AS_BITS: tl.constexpr, DOT_IN_FP32: tl.constexpr, USE_TMA: tl.constexpr, SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
):
    """D[tile] = (D[tile] if ACCUMULATE else 0) + sum over the 128-wide K blocks kb of this
    program's K slice of (A[rows, kb] @ B[cols, kb]^T) * sfa[rows, kb] * sfb[cols (or cols // 128), kb].

    With FP8_AS_BITS, a and b point to the FP8 codes as uint8 and are decoded to fp16.
    With USE_TMA, both (K-major) operands come through TMA descriptors.
    With SKIP_HEAD_MID, product column j lands at column j + (j // (left + right)) * mid (+ mid
    when j % (left + right) >= left) of D (API.md 3.3); the mid columns are never written."""
    BLOCK_K: tl.constexpr = 128
    # A tile of at most 128 columns lies inside one 128-column block of B (BLOCK_N is a power of
    # two): its 1D2D scale is one number per K block, folded into the per-row scale before the
    # promotion, which then costs one FMA per element instead of a multiply and an FMA.
    SFB_SCALAR: tl.constexpr = SFB_PER_BLOCK and BLOCK_N <= BLOCK_K
    pid_m, pid_n = _tile_coordinates(m, n, BLOCK_M, BLOCK_N, GROUP_M)
    first_block, last_block = _k_block_range(k, k_blocks_per_split, BLOCK_K)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < m
    col_ok = cols < n
    rows64 = rows.to(tl.int64)
    cols64 = cols.to(tl.int64)
    k_first = first_block * BLOCK_K
    a_ptrs = a_ptr + rows64[:, None] * stride_am + (k_first + ks).to(tl.int64)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_first + ks).to(tl.int64)[:, None] * stride_bk + cols64[None, :] * stride_bn
    sfa_ptrs = sfa_ptr + rows64 * stride_sfa_m
    if SFB_SCALAR:
        sfb_ptrs = sfb_ptr + (pid_n * BLOCK_N // BLOCK_K).to(tl.int64) * stride_sfb_n
    elif SFB_PER_BLOCK:
        sfb_ptrs = sfb_ptr + (cols64 // BLOCK_K) * stride_sfb_n
    else:
        sfb_ptrs = sfb_ptr + cols64 * stride_sfb_n

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_block in range(first_block, last_block):
        if USE_TMA:
            a = _operand_tile(a_desc, pid_m * BLOCK_M, k_block * BLOCK_K, True, False)
            b = _operand_tile(b_desc, pid_n * BLOCK_N, k_block * BLOCK_K, True, True)
        else:
            k_ok = ks < k - k_block * BLOCK_K
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if FP8_AS_BITS:
            a = _e4m3_bits_to_float16(a)
            b = _e4m3_bits_to_float16(b)
        partial = _mma(a, b, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), DOT_IN_FP32)
        sfa = tl.load(sfa_ptrs + k_block * stride_sfa_k, mask=row_ok, other=0.0)
        if SFB_SCALAR:
            acc += partial * (sfa * tl.load(sfb_ptrs + k_block * stride_sfb_k))[:, None]
        else:
            sfb = tl.load(sfb_ptrs + k_block * stride_sfb_k, mask=col_ok, other=0.0)
            acc += partial * (sfa[:, None] * sfb[None, :])
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if SKIP_HEAD_MID:
        # 32-bit column math: D's width fits, and 64-bit division costs registers that the
        # 128 x 128 tile does not have to spare on SM100.
        head_width = head_left + head_right
        within = cols % head_width
        out_cols = (cols + (cols // head_width) * head_mid
                    + tl.where(within >= head_left, head_mid, 0)).to(tl.int64)
    else:
        out_cols = cols64
    _store_tile(acc, d_ptr, ws_ptr, rows64, out_cols, row_ok, col_ok, m, n, stride_dm, ACCUMULATE, SPLIT)


@triton.jit
def _split_k_reduce_kernel(ws_ptr, d_ptr, m, n, splits, stride_dm, ACCUMULATE: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """D = (D if ACCUMULATE else 0) + the sum of the split-K partials ws[0..splits-1] (FP32
    [splits, m, n]), added in slice order so that the result does not depend on timing."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < m)[:, None] & (cols < n)[None, :]
    offsets = rows.to(tl.int64)[:, None] * n + cols[None, :]
    plane = m.to(tl.int64) * n
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for split in range(splits):
        total += tl.load(ws_ptr + split * plane + offsets, mask=mask, other=0.0)
    d_ptrs = d_ptr + rows.to(tl.int64)[:, None] * stride_dm + cols[None, :]
    if ACCUMULATE:
        total = tl.load(d_ptrs, mask=mask, other=0.0).to(tl.float32) + total
    tl.store(d_ptrs, total.to(d_ptr.dtype.element_ty), mask=mask)


# Kernels run interpreted when TRITON_INTERPRET=1 was set before this module was imported.
_INTERPRETED = not isinstance(_bf16_gemm_kernel, triton.runtime.JITFunction)


def _cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


def _check_runnable(d: torch.Tensor) -> None:
    if not d.is_cuda and not _INTERPRETED:
        raise RuntimeError("dg_triton portable GEMM: CPU tensors need the Triton interpreter, and "
                           "dg_triton.triton.gemm_portable was imported without TRITON_INTERPRET=1; "
                           "set it before importing dg_triton")


def _launch(kernel, grid, d: torch.Tensor, args, constexprs: dict, config: PortableGemmConfig):
    """Launches on d's device; returns Triton's compiled kernel (sweeps read its spill count)."""
    launch = kernel[grid]
    if d.is_cuda and d.device.index != torch.cuda.current_device():
        # Triton launches on the current device.
        with torch.cuda.device(d.device):
            return launch(*args, **constexprs, num_warps=config.num_warps, num_stages=config.num_stages)
    return launch(*args, **constexprs, num_warps=config.num_warps, num_stages=config.num_stages)


def _tma_available(device: torch.device) -> bool:
    """Whether the operands go through TMA descriptors by default: on GPUs that have TMA (SM90
    on); not under the interpreter (which runs them, but the tests choose that explicitly)."""
    return device.type == "cuda" and portable.device_capability(device) >= (9, 0)


def _operand_descriptor(x: torch.Tensor, k_major: bool, block_rows: int, block_k: int):
    """A TMA descriptor of operand x ([rows, K], unit stride along K when k_major, else along
    rows) for tiles of block_rows x block_k, in the orientation _operand_tile reads; None where
    x breaks TMA's rules (16-byte aligned base and row stride), which leaves the pointer path."""
    rows, k = x.shape
    shape, stride = ([rows, k], x.stride(0)) if k_major else ([k, rows], x.stride(1))
    block = [block_rows, block_k] if k_major else [block_k, block_rows]
    if x.data_ptr() % 16 or (stride * x.element_size()) % 16:
        return None
    return TensorDescriptor(x, shape, [stride, 1], block)


class _Slices(NamedTuple):
    """How K is cut for split-K: `count` slices of `blocks_per_slice` K blocks each (the last
    may have fewer; none is empty)."""
    count: int
    blocks_per_slice: int


def _k_slices(k: int, block_k: int, requested: int) -> _Slices:
    blocks = _cdiv(k, block_k)
    per_slice = _cdiv(blocks, max(1, min(requested, blocks)))
    return _Slices(_cdiv(blocks, per_slice), per_slice)


def _split_k_workspace(slices: _Slices, m: int, n: int, d: torch.Tensor):
    """The FP32 partials of split-K (one [m, n] plane per slice), or d itself as an unused
    placeholder without split-K."""
    if slices.count == 1:
        return d
    return torch.empty((slices.count, m, n), device=d.device, dtype=torch.float32)


def _reduce_split_k(workspace: torch.Tensor, d: torch.Tensor, accumulate: bool) -> None:
    splits, m, n = workspace.shape
    block_m, block_n = 32, 128
    config = PortableGemmConfig(block_m, block_n, 16, 1, 4, 1)
    _launch(_split_k_reduce_kernel, (_cdiv(m, block_m), _cdiv(n, block_n)), d,
            (workspace, d, m, n, splits, d.stride(0)),
            {"ACCUMULATE": accumulate, "BLOCK_M": block_m, "BLOCK_N": block_n}, config)


def bf16_gemm(function: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, accumulate: bool,
              config: PortableGemmConfig | None = None, use_tma: bool | None = None):
    """d (+)= a @ b.T for a validated, non-empty problem: a [M, K] and b [N, K] bf16 with any
    strides (one of each pair 1), d [M, N] bf16/fp32 with stride(1) == 1. `accumulate`: d holds
    c. `config` forces a tile config (tests, sweeps); None picks one (dg_triton.portable).
    `use_tma` forces the TMA-descriptor operand path on (where the operands allow it) or off;
    None takes it on GPUs that have TMA. Returns Triton's compiled GEMM kernel (None under the
    interpreter)."""
    _check_runnable(d)
    m, k = a.shape
    n = b.shape[0]
    if config is None:
        config = portable.choose_config(portable.BF16_GEMM, m, n, k, d.device)
        if accumulate:
            config = portable.config_for_accumulation(config)
        dispatch.print_config_once(function, (m, n, k), d.device, config)
    a_k_major, b_k_major = a.stride(1) == 1, b.stride(1) == 1
    a_desc = b_desc = None
    want_tma = _tma_available(d.device) if use_tma is None else use_tma
    if want_tma:
        a_desc = _operand_descriptor(a, a_k_major, config.block_m, config.block_k)
        b_desc = _operand_descriptor(b, b_k_major, config.block_n, config.block_k)
    tma = a_desc is not None and b_desc is not None
    slices = _k_slices(k, config.block_k, config.split_k)
    workspace = _split_k_workspace(slices, m, n, d)
    grid = (_cdiv(m, config.block_m) * _cdiv(n, config.block_n), slices.count)
    compiled = _launch(_bf16_gemm_kernel, grid, d,
            (a, b, d, workspace, a_desc if tma else a, b_desc if tma else b, m, n, k,
             slices.blocks_per_slice, a.stride(0), a.stride(1), b.stride(0), b.stride(1), d.stride(0)),
            {"ACCUMULATE": accumulate, "EVEN_K": k % config.block_k == 0, "DOT_IN_FP32": not d.is_cuda,
             "USE_TMA": tma, "A_K_MAJOR": a_k_major, "B_K_MAJOR": b_k_major, "SPLIT": slices.count > 1,
             "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
             "GROUP_M": config.group_m},
            config)
    if slices.count > 1:
        _reduce_split_k(workspace, d, accumulate)
    return compiled


def fp8_operand_mode(device: torch.device) -> bool:
    """FP8_AS_BITS of the FP8 kernel on `device`: False (FP8 straight into tl.dot) where the
    tensor cores take FP8 (SM89+) and under the interpreter; True (codes loaded as bytes, decoded
    and multiplied as fp16) below SM89, where Triton has no fp8e4nv type."""
    return device.type == "cuda" and portable.device_capability(device) < (8, 9)


def fp8_gemm(function: str, a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
             d: torch.Tensor, kind: str, accumulate: bool, head_splits: tuple | None = None,
             config: PortableGemmConfig | None = None, fp8_as_bits: bool | None = None,
             use_tma: bool | None = None):
    """d (+)= dequant(a) @ dequant(b).T for a validated, non-empty problem.

    a [M, K], b [N, K]: float8_e4m3fn, any strides. sfa: fp32 [M, ceil(K/128)], any strides.
    sfb: fp32 [ceil(N/128), ceil(K/128)] for kind "1d2d", [N, ceil(K/128)] for "1d1d", any
    strides. d: [M, N] (with head_splits (left, mid, right): [M, N + N/(left+right)*mid]) bf16 or
    fp32, stride(1) == 1. `accumulate`: d holds c. `config.block_k` is ignored: the kernel steps
    K by the scale granularity, 128; `config.split_k` is ignored with head_splits. `fp8_as_bits`
    forces the byte-decoding path of GPUs without FP8 support (True; tests run it under the
    interpreter) or keeps it off (False); None decides by the device. `use_tma` as bf16_gemm's
    (the TMA path needs both operands K-major and the FP8 tensor cores).
    """
    _check_runnable(d)
    m, k = a.shape
    n = b.shape[0]
    family = portable.FP8_GEMM_1D2D if kind == "1d2d" else portable.FP8_GEMM_1D1D
    if config is None:
        config = portable.choose_config(family, m, n, k, d.device)
        if accumulate:
            config = portable.config_for_accumulation(config)
        dispatch.print_config_once(function, (m, n, k), d.device, config)
    left, mid, right = head_splits if head_splits is not None else (0, 0, 0)
    as_bits = fp8_operand_mode(d.device) if fp8_as_bits is None else fp8_as_bits
    a_desc = b_desc = None
    want_tma = _tma_available(d.device) if use_tma is None else use_tma
    if want_tma and not as_bits and a.stride(1) == 1 and b.stride(1) == 1:
        a_desc = _operand_descriptor(a, True, config.block_m, FP8_GRAN_K)
        b_desc = _operand_descriptor(b, True, config.block_n, FP8_GRAN_K)
    tma = a_desc is not None and b_desc is not None
    if as_bits:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    # The skip-head-mid column map lives in the GEMM's store; the split-K reduction has none.
    slices = _k_slices(k, FP8_GRAN_K, 1 if head_splits is not None else config.split_k)
    workspace = _split_k_workspace(slices, m, n, d)
    grid = (_cdiv(m, config.block_m) * _cdiv(n, config.block_n), slices.count)
    compiled = _launch(_fp8_gemm_kernel, grid, d,
            (a, sfa, b, sfb, d, workspace, a_desc if tma else a, b_desc if tma else b, m, n, k,
             slices.blocks_per_slice, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
             d.stride(0), sfa.stride(0), sfa.stride(1), sfb.stride(0), sfb.stride(1), left, mid, right),
            {"SFB_PER_BLOCK": kind == "1d2d", "ACCUMULATE": accumulate,
             "SKIP_HEAD_MID": head_splits is not None, "FP8_AS_BITS": as_bits,
             "DOT_IN_FP32": as_bits and not d.is_cuda, "USE_TMA": tma, "SPLIT": slices.count > 1,
             "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "GROUP_M": config.group_m},
            config)
    if slices.count > 1:
        _reduce_split_k(workspace, d, accumulate)
    return compiled
