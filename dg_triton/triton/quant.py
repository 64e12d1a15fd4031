"""FP8 E4M3 casts of API.md 3.15 as Triton kernels: per-token (1 x gran_k), per-block
(gran_k x gran_k) and per-channel (gran_k x 1).

Each kernel is one pass: load a group, take its fp32 amax, compute the scale exactly as
``dg_triton.reference_quant`` does, store the scaled FP8 data and the scale. The results are
bitwise equal to the reference because every step is the same IEEE fp32 operation:

- all arithmetic in fp32 (loads are upcast; bf16 -> fp32 is exact);
- ``sf = max(amax, 1e-4) / 448`` and ``1 / sf`` are correctly rounded: ``div_rn``, or in the
  per-channel cast exact_math's FMA sequences (the same bits, checked for every fp32); Triton's
  ``/`` on fp32 lowers to the approximate ``div.full.f32`` on NVIDIA, which is not; a UE8M0
  ``1 / 2^e`` is exact bit arithmetic;
- ``q = x * (1 / sf)`` (a multiply, as in the reference, not ``x / sf``), then an RTNE cast to
  e4m3. ``|x * (1/sf)|`` never exceeds 448 by more than an ulp, which rounds to 448 both in torch
  and in the saturating PTX cvt, so the two casts agree.

NaN and Inf follow the reference: the amax keeps NaN (``exact_math.max_keeping_nan``, as
``torch.amax``; ``tl.max`` would drop it), so a group holding a NaN has sf NaN and every code NaN;
a group holding an Inf (and no NaN) has sf Inf, 1/sf 0, codes 0 and NaN for the Inf itself. One
documented exception: under UE8M0 the Inf sf rounds to 2^127 and the Inf element becomes +-448
by the saturating cvt, where torch before 2.13 casts inf to NaN (tests/test_quant_gpu.py).

Launchers allocate their outputs, never read device values on the host (no sync) and launch one
kernel each, so they can be captured in a CUDA graph. Arguments are validated by the public
wrappers in ``dg_triton.utils.math``; the launchers assume valid input.
"""
import torch
import triton
import triton.language as tl

from dg_triton.triton.exact_math import div_rn_by_448, fused_fma, max_keeping_nan, reciprocal_rn

__all__ = [
    "per_token_cast_to_fp8_triton",
    "per_block_cast_to_fp8_triton",
    "per_channel_cast_to_fp8_triton",
]

# Rows per program of the per-token kernel: 32 x 128 fp32 values is 16 KiB of registers over 4
# warps, and 32 consecutive SF stores are coalesced in the TMA-aligned (MN-major) layout.
_PER_TOKEN_BLOCK_M = 32
# Per-channel tile: gran_k rows x 64 columns over 2 warps, each thread 8 rows of 16 columns
# (sm_90a SASS with the exact_math divisions and the 1-D grid: 9.6 instructions per element, 183
# registers; on the 2-D grid with div_rn 11.9 and 189). With 4 warps a thread has 4 rows and
# repeats its columns' divisions over half the elements; 8 warps at 128 columns, 1 warp at 32 and a two-pass tile (the column amax
# streamed in row slices, then the rows read again from L2) all measured slower on the H200
# (benchmarks/NOTES.md, session 15).
_PER_CHANNEL_BLOCK_N = 64
_PER_CHANNEL_NUM_WARPS = 2


@triton.jit
def _scale_from_amax(amax, USE_UE8M0: tl.constexpr, KEEP_NAN: tl.constexpr = False,
                     FAST_DIV: tl.constexpr = False):
    """fp32 amax -> (sf, 1/sf), API.md 2.1; with USE_UE8M0 the sf is rounded up to 2^e.
    FAST_DIV: the divisions by exact_math's FMA sequences (same bits; launchers pass
    ``fused_fma()``, False under the interpreter). KEEP_NAN: a NaN amax stays NaN through the
    1e-4 floor, as torch.clamp keeps it (the default tl.maximum returns the other operand); with
    UE8M0 a NaN or Inf sf becomes 2^127, as the reference's ceil_to_ue8m0 does."""
    if KEEP_NAN:
        floored = tl.maximum(amax, 1e-4, propagate_nan=tl.PropagateNan.ALL)
    else:
        floored = tl.maximum(amax, 1e-4)
    if FAST_DIV:
        sf = div_rn_by_448(floored)
    else:
        sf = tl.math.div_rn(floored, 448.0)
    if USE_UE8M0:
        bits = sf.to(tl.int32, bitcast=True)
        exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(tl.int32)
        exponent = tl.minimum(tl.maximum(exponent, 1), 254)
        sf = (exponent << 23).to(tl.float32, bitcast=True)
        # 1 / 2^(e - 127) is exact: biased exponent 254 - e, or for e = 254 the subnormal
        # 2^-127 (the bits of div_rn(1, sf), without a division).
        inverse_bits = tl.where(exponent < 254, (254 - exponent) << 23, 0x00400000)
        return sf, inverse_bits.to(tl.float32, bitcast=True)
    if FAST_DIV:
        return sf, reciprocal_rn(sf)
    return sf, tl.math.div_rn(1.0, sf)


@triton.jit
def _per_token_cast_to_fp8_kernel(
    x_ptr, q_ptr, sf_ptr,
    m, n,
    stride_xm, stride_xn,
    stride_sfm, stride_sfk,
    GRAN_K: tl.constexpr, BLOCK_M: tl.constexpr,
    USE_UE8M0: tl.constexpr, PACKED_UE8M0: tl.constexpr,
):
    """Program (i, g): rows [i*BLOCK_M, (i+1)*BLOCK_M), K-group g. Columns past n read as 0.

    The SF goes to ``sf_ptr + row * stride_sfm + g * stride_sfk`` (fp32 elements), which covers
    both the row-major and the TMA-aligned MN-major layout. With PACKED_UE8M0, ``sf_ptr`` is the
    byte view of the int32 packed SF and the strides are in int32 elements: group g's exponent is
    byte g % 4 of int32 element (row, g // 4).
    """
    pid_m = tl.program_id(0)
    group = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = group * GRAN_K + tl.arange(0, GRAN_K)
    row_ok = rows < m
    mask = row_ok[:, None] & (cols < n)[None, :]
    rows64 = rows.to(tl.int64)

    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask,
                other=0.0).to(tl.float32)
    sf, inv_sf = _scale_from_amax(tl.reduce(tl.abs(x), 1, max_keeping_nan), USE_UE8M0, KEEP_NAN=True)
    q = (x * inv_sf[:, None]).to(tl.float8e4nv)
    tl.store(q_ptr + rows64[:, None] * n + cols[None, :], q, mask=mask)

    if PACKED_UE8M0:
        sf_offsets = 4 * (rows64 * stride_sfm + (group // 4) * stride_sfk) + group % 4
        biased_exponent = (sf.to(tl.int32, bitcast=True) >> 23).to(tl.uint8)
        tl.store(sf_ptr + sf_offsets, biased_exponent, mask=row_ok)
    else:
        tl.store(sf_ptr + rows64 * stride_sfm + group * stride_sfk, sf, mask=row_ok)


@triton.jit
def _per_block_cast_to_fp8_kernel(
    x_ptr, q_ptr, sf_ptr,
    m, n,
    stride_xm, stride_xn,
    num_col_blocks,
    GRAN_K: tl.constexpr, USE_UE8M0: tl.constexpr,
):
    """Program (i, j): one GRAN_K x GRAN_K tile; elements outside [m, n] read as 0."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = (pid_m * GRAN_K + tl.arange(0, GRAN_K)).to(tl.int64)
    cols = pid_n * GRAN_K + tl.arange(0, GRAN_K)
    mask = (rows < m)[:, None] & (cols < n)[None, :]

    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask,
                other=0.0).to(tl.float32)
    amax = tl.reduce(tl.reduce(tl.abs(x), 1, max_keeping_nan), 0, max_keeping_nan)
    sf, inv_sf = _scale_from_amax(amax, USE_UE8M0, KEEP_NAN=True)
    tl.store(q_ptr + rows[:, None] * n + cols[None, :], (x * inv_sf).to(tl.float8e4nv), mask=mask)
    tl.store(sf_ptr + pid_m * num_col_blocks + pid_n, sf)


@triton.jit
def _per_channel_cast_to_fp8_kernel(
    x_ptr, q_ptr, sf_ptr,
    n,
    stride_xm, stride_xn,
    GRAN_K: tl.constexpr, BLOCK_N: tl.constexpr, USE_UE8M0: tl.constexpr,
    FAST_DIV: tl.constexpr = False,
):
    """Program g * ceil(n / BLOCK_N) + j: rows [g*GRAN_K, (g+1)*GRAN_K) (m % GRAN_K == 0),
    columns [j*BLOCK_N, (j+1)*BLOCK_N).

    A thread's share of the tile (Triton's coalesced layout: 16 contiguous columns, the fp8
    store's 16 bytes, by GRAN_K / (rows of threads) rows) decides the cost: the column amax is
    in-thread down its rows, then shuffles and one shared-memory round across warps, and every
    thread holding a column repeats that column's two correctly rounded divisions (FAST_DIV: the
    FMA-based ones of exact_math, same bits). With the launcher's 2 warps a thread holds 8 rows
    of 16 columns, so those divisions and the shuffles are spread over twice the elements of a
    4-warp (4-row) tile.

    Column blocks are the grid's fast axis: the programs in flight read neighbouring 128-byte
    pieces of the same rows rather than one piece each of rows 128 apart (0.75 ->
    0.80 of a copy's bandwidth at 16384 x 7168 with div_rn, 0.87 -> 0.97 with the FMA divisions).
    """
    # A 1-D grid, column blocks fastest (a 2-D grid's second axis stops at 65535 groups).
    num_col_blocks = tl.cdiv(n, BLOCK_N)
    pid_n = tl.program_id(0) % num_col_blocks
    group = tl.program_id(0) // num_col_blocks
    rows = (group * GRAN_K + tl.arange(0, GRAN_K)).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n
    mask = col_ok[None, :]

    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask,
                other=0.0).to(tl.float32)
    sf, inv_sf = _scale_from_amax(tl.reduce(tl.abs(x), 0, max_keeping_nan), USE_UE8M0, KEEP_NAN=True,
                                  FAST_DIV=FAST_DIV)
    tl.store(q_ptr + rows[:, None] * n + cols[None, :], (x * inv_sf[None, :]).to(tl.float8e4nv),
             mask=mask)
    tl.store(sf_ptr + group * n + cols, sf, mask=col_ok)


def _cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


def per_token_cast_to_fp8_triton(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                                 use_packed_ue8m0: bool = False, tma_aligned_sf: bool = False):
    """Per-token 1 x gran_k cast. ``x`` 2-D bf16/fp32 [m, n], any strides; gran_k a power of two;
    ``use_packed_ue8m0`` needs ``use_ue8m0`` and ``ceil(n/gran_k) % 4 == 0``.

    Returns ``(q [m, n] float8_e4m3fn contiguous, sf)``; sf is fp32 [m, ceil(n/gran_k)] or, packed,
    int32 [m, ceil(n/gran_k)/4]. With ``tma_aligned_sf`` sf has strides ``(1, align(m, 4))``
    (API.md 2.3); its padding rows m..align(m, 4)-1 are left unwritten.
    """
    m, n = x.shape
    num_groups = _cdiv(n, gran_k)
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn, device=x.device)
    sf_cols = num_groups // 4 if use_packed_ue8m0 else num_groups
    sf_rows = _cdiv(m, 4) * 4 if tma_aligned_sf else m
    sf_strides = (1, sf_rows) if tma_aligned_sf else (sf_cols, 1)
    if use_packed_ue8m0:
        # The kernel writes the packed SF byte by byte through the uint8 buffer under it.
        sf_target = torch.empty(4 * sf_rows * sf_cols, dtype=torch.uint8, device=x.device)
        sf = sf_target.view(torch.int32).as_strided((m, sf_cols), sf_strides)
    else:
        sf_target = torch.empty(sf_rows * sf_cols, dtype=torch.float32, device=x.device)
        sf = sf_target.as_strided((m, sf_cols), sf_strides)
    grid = (_cdiv(m, _PER_TOKEN_BLOCK_M), num_groups)
    if m > 0 and num_groups > 0:
        _per_token_cast_to_fp8_kernel[grid](
            x, q, sf_target, m, n, x.stride(0), x.stride(1), sf.stride(0), sf.stride(1),
            GRAN_K=gran_k, BLOCK_M=_PER_TOKEN_BLOCK_M, USE_UE8M0=bool(use_ue8m0),
            PACKED_UE8M0=bool(use_packed_ue8m0), num_warps=4)
    return q, sf


def per_block_cast_to_fp8_triton(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128):
    """Per-block gran_k x gran_k cast of 2-D bf16/fp32 ``x`` [m, n] (any strides):
    ``(q [m, n] float8_e4m3fn, sf fp32 [ceil(m/gran_k), ceil(n/gran_k)])``."""
    m, n = x.shape
    row_blocks, col_blocks = _cdiv(m, gran_k), _cdiv(n, gran_k)
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn, device=x.device)
    sf = torch.empty((row_blocks, col_blocks), dtype=torch.float32, device=x.device)
    if row_blocks > 0 and col_blocks > 0:
        _per_block_cast_to_fp8_kernel[(row_blocks, col_blocks)](
            x, q, sf, m, n, x.stride(0), x.stride(1), col_blocks,
            GRAN_K=gran_k, USE_UE8M0=bool(use_ue8m0), num_warps=8)
    return q, sf


def per_channel_cast_to_fp8_triton(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128, *,
                                   block_n: int = _PER_CHANNEL_BLOCK_N,
                                   num_warps: int = _PER_CHANNEL_NUM_WARPS):
    """Per-channel gran_k x 1 cast of 2-D bf16/fp32 ``x`` [m, n], ``m % gran_k == 0``:
    ``(q [m, n] float8_e4m3fn, sf fp32 [m/gran_k, n])``. ``block_n`` and ``num_warps`` override
    the tile (for timing alternatives without an edit)."""
    m, n = x.shape
    num_groups = m // gran_k
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn, device=x.device)
    sf = torch.empty((num_groups, n), dtype=torch.float32, device=x.device)
    if num_groups > 0 and n > 0:
        _per_channel_cast_to_fp8_kernel[(_cdiv(n, block_n) * num_groups,)](
            x, q, sf, n, x.stride(0), x.stride(1),
            GRAN_K=gran_k, BLOCK_N=block_n, USE_UE8M0=bool(use_ue8m0), FAST_DIV=fused_fma(),
            num_warps=num_warps)
    return q, sf
