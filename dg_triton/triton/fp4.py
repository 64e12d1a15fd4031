"""FP4 E2M1 helpers of API.md 3.15 as Triton kernels: the per-token cast
(``per_token_cast_to_fp4``), the transpose of packed FP4 data (``transpose_packed_fp4``) and the
dequantization (``cast_back_from_fp4``).

Every result is bitwise equal to ``dg_triton.reference_quant`` because each step is the same IEEE
fp32 operation, or pure bit movement:

- loads are upcast to fp32 (bf16 -> fp32 is exact);
- the group amax is an integer max over the fp32 bit patterns with the sign bit cleared. For
  non-negative floats the bit order is the value order, and a NaN (exponent 255, non-zero
  mantissa) sorts above +inf, so a NaN in the group gives a NaN amax as ``torch.amax`` does;
  ``tl.max`` on floats would drop it (maxnum on NVIDIA, ``np.nanmax`` in the interpreter);
- the 1e-4 floor is a select that keeps NaN, like ``clamp_min``;
- ``sf = amax / 6`` and ``1 / sf`` use ``div_rn``: Triton's ``/`` on fp32 lowers to the
  approximate ``div.full.f32`` on NVIDIA, which is not correctly rounded;
- the scaled value is ``x * (1 / sf)`` (a multiply, as in the reference), and its E2M1 index is
  the count of thresholds it exceeds (strict ``>``), which is how the reference defines it.

So with NaN or Inf in the input the kernels produce what the reference produces, the arithmetic
being the same: a group holding a NaN has sf NaN, one holding an Inf (and no NaN) sf Inf; with
``use_ue8m0`` both round to 2^127. A NaN or Inf sf makes ``1 / sf`` NaN or 0, so every code of the
group is 0; with 2^127 the group is scaled by 2^-127 like any other (NaN gives code 0, +-Inf +-6).
Only the payload of a NaN sf may differ from the CPU reference's.

Launchers allocate their outputs, never read device values on the host (no sync) and launch one
kernel each, so they can be captured in a CUDA graph. Arguments are validated by the public
wrappers in ``dg_triton.utils.math``; the launchers assume valid input.
"""
import torch
import triton
import triton.language as tl

__all__ = [
    "cast_back_from_fp4_triton",
    "per_token_cast_to_fp4_triton",
    "transpose_packed_fp4_triton",
]

# Elements per program of the cast and the cast-back: 4096 fp32 values are 32 registers a thread
# over 4 warps.
_ELEMENTS_PER_PROGRAM = 4096
# The cast's column block spans at least this many columns and at least 4 K-groups, so that the
# packed UE8M0 words (4 groups each) never straddle two programs.
_CAST_MIN_BLOCK_N = 256
# Transpose tile: 128 input rows x 64 input bytes (128 codes) in, 128 output rows x 64 bytes out.
_TRANSPOSE_BLOCK_ROWS = 128
_TRANSPOSE_BLOCK_BYTES = 64
# Cast-back tile: 16 rows x 256 columns.
_CAST_BACK_BLOCK_M = 16
_CAST_BACK_BLOCK_N = 256


@triton.jit
def _e2m1_codes(scaled):
    """fp32 (already scaled) -> E2M1 codes 0..15 as int32: the index is the number of midpoints
    the magnitude exceeds (strict ``>``: ties round down; NaN exceeds none; above 5 it is 7), the
    sign bit is set only with a non-zero index.

    Counted with bit arithmetic instead of seven compares and selects (the cast was bound by
    instruction issue on the H200, not by memory). From 1 to 6 the E2M1 values 1, 1.5, 2, 3, 4, 6
    are the fp32 values with one mantissa bit, 2^22 apart as bit patterns, and the midpoints 1.25,
    1.75, 2.5, 3.5, 5 lie 2^21 above each: for a magnitude clamped to [1, 6], the count of those
    five midpoints it exceeds is ``(bits - bits(1.25) - 1 + 2^22) >> 22``, i.e. ``(bits -
    0x3F600001) >> 22`` (no int32 overflow, even for a NaN the interpreter's clamp keeps). The two
    midpoints below 1 (0.25, 0.75) are compares. A magnitude at most 0.25, or NaN, is code 0 whatever
    the clamp made of it, which also keeps a "-0" code out. Same result as the reference for every
    fp32 input (tests/interpret/test_fp4.py puts values on and next to every midpoint)."""
    magnitude = tl.abs(scaled)
    clamped = tl.minimum(tl.maximum(magnitude, 1.0), 6.0)
    upper_midpoints = (clamped.to(tl.int32, bitcast=True) - 0x3F600001) >> 22
    index = upper_midpoints + 1 + (magnitude > 0.75).to(tl.int32)
    sign = (scaled.to(tl.int32, bitcast=True) >> 28) & 0x8
    return tl.where(magnitude > 0.25, index | sign, 0)


@triton.jit
def _e2m1_values(codes):
    """E2M1 codes (int32, low 4 bits) -> fp32 {0, .5, 1, 1.5, 2, 3, 4, 6}, negated when bit 3 is
    set and the index is non-zero (code 8 is +0), as the reference does."""
    index = codes & 0x7
    magnitude = tl.where(index == 1, 0.5, 0.0)
    magnitude = tl.where(index == 2, 1.0, magnitude)
    magnitude = tl.where(index == 3, 1.5, magnitude)
    magnitude = tl.where(index == 4, 2.0, magnitude)
    magnitude = tl.where(index == 5, 3.0, magnitude)
    magnitude = tl.where(index == 6, 4.0, magnitude)
    magnitude = tl.where(index == 7, 6.0, magnitude)
    return tl.where(((codes & 0x8) != 0) & (index != 0), -magnitude, magnitude)


@triton.jit
def _per_token_cast_to_fp4_kernel(
    x_ptr, packed_ptr, sf_ptr,
    m, n, num_groups, num_sf_columns,
    stride_xm, stride_xn,
    stride_sfm, stride_sfk,
    GRAN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    USE_UE8M0: tl.constexpr, PACKED_UE8M0: tl.constexpr,
):
    """Program (i, j): rows [i*BLOCK_M, (i+1)*BLOCK_M), columns [j*BLOCK_N, (j+1)*BLOCK_N),
    BLOCK_N a multiple of 4 * GRAN_K. Columns past n read as 0 (the reference's zero padding).

    ``packed_ptr`` is the contiguous int8 output [m, n/2]. The SF element (row, c) goes to
    ``sf_ptr + row * stride_sfm + c * stride_sfk``, which covers both the row-major and the
    TMA-aligned MN-major layout; c is a K-group (fp32 sf) or a word of 4 groups (packed int32,
    ``num_sf_columns`` of them).
    """
    GROUPS: tl.constexpr = BLOCK_N // GRAN_K
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < m
    rows64 = rows.to(tl.int64)

    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols.to(tl.int64)[None, :] * stride_xn,
                mask=row_ok[:, None] & (cols < n)[None, :], other=0.0).to(tl.float32)
    x_groups = tl.reshape(x, (BLOCK_M, GROUPS, GRAN_K))
    magnitude_bits = x_groups.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    amax = tl.max(magnitude_bits, axis=2).to(tl.float32, bitcast=True)
    sf = tl.math.div_rn(tl.where(amax < 1e-4, 1e-4, amax), 6.0)
    if USE_UE8M0:
        sf_bits = sf.to(tl.int32, bitcast=True)
        exponent = ((sf_bits >> 23) & 0xFF) + ((sf_bits & 0x7FFFFF) != 0).to(tl.int32)
        exponent = tl.minimum(tl.maximum(exponent, 1), 254)
        sf = (exponent << 23).to(tl.float32, bitcast=True)
        # 1 / 2^(e - 127) is exact: 2^(127 - e), biased exponent 254 - e, or for e = 254 the
        # subnormal 2^-127. Same bits as div_rn(1, sf), without a division per group.
        inv_sf = tl.where(exponent < 254, (254 - exponent) << 23, 0x00400000).to(tl.float32,
                                                                                 bitcast=True)
    else:
        inv_sf = tl.math.div_rn(1.0, sf)

    codes = tl.reshape(_e2m1_codes(x_groups * inv_sf[:, :, None]), (BLOCK_M, BLOCK_N // 2, 2))
    low, high = tl.split(codes)
    packed = (low | (high << 4)).to(tl.int8)
    half_n = n // 2
    packed_cols = pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
    tl.store(packed_ptr + rows64[:, None] * half_n + packed_cols[None, :], packed,
             mask=row_ok[:, None] & (packed_cols < half_n)[None, :])

    groups = pid_n * GROUPS + tl.arange(0, GROUPS)
    if PACKED_UE8M0:
        # Groups past num_groups pad the last word with 1.0 (biased exponent 127), as the
        # reference pads the SF count to a multiple of 4.
        exponents = tl.where(groups[None, :] < num_groups, (sf.to(tl.int32, bitcast=True) >> 23),
                             127)
        byte_shift = (tl.arange(0, 4) * 8)[None, None, :]
        # The four bytes occupy disjoint bits, so their sum is their bitwise or (no carries; a
        # top byte >= 128 just makes the int32 negative, the intended bit pattern).
        words = tl.sum(tl.reshape(exponents, (BLOCK_M, GROUPS // 4, 4)) << byte_shift, axis=2)
        word_cols = pid_n * (GROUPS // 4) + tl.arange(0, GROUPS // 4)
        word_offsets = rows64[:, None] * stride_sfm + word_cols.to(tl.int64)[None, :] * stride_sfk
        tl.store(sf_ptr + word_offsets, words,
                 mask=row_ok[:, None] & (word_cols < num_sf_columns)[None, :])
    else:
        sf_offsets = rows64[:, None] * stride_sfm + groups.to(tl.int64)[None, :] * stride_sfk
        tl.store(sf_ptr + sf_offsets, sf, mask=row_ok[:, None] & (groups < num_groups)[None, :])


@triton.jit
def _transpose_packed_fp4_kernel(
    a_ptr, out_ptr,
    m, half_n,
    stride_am, stride_an,
    BLOCK_ROWS: tl.constexpr, BLOCK_BYTES: tl.constexpr,
):
    """Program (i, j): input rows [i*BLOCK_ROWS, ...) (BLOCK_ROWS even, m even), input bytes
    [j*BLOCK_BYTES, ...). Output row c byte r/2 holds input codes (r, c) low and (r + 1, c) high.
    ``out_ptr`` is the contiguous int8 output [2*half_n, m/2].

    The nibbles are regrouped before the transpose, on bytes: with E = row r and O = row r + 1
    (r even) of input byte j (codes 2j low, 2j + 1 high), output byte (2j, r/2) is
    ``E & 0xF | O << 4`` and (2j + 1, r/2) is ``E >> 4 | O & 0xF0``. So what crosses threads is a
    [BLOCK_ROWS/2, 2*BLOCK_BYTES] tile of bytes, as many as were loaded; transposing 4-bit codes
    held as int32 moved eight times that through shared memory, which bound the kernel on the
    H200 (0.52 of a copy's bandwidth)."""
    pid_rows = tl.program_id(0)
    pid_bytes = tl.program_id(1)
    pair_rows = pid_rows * (BLOCK_ROWS // 2) + tl.arange(0, BLOCK_ROWS // 2)
    byte_cols = pid_bytes * BLOCK_BYTES + tl.arange(0, BLOCK_BYTES)
    half_m = m // 2
    load_mask = (pair_rows < half_m)[:, None] & (byte_cols < half_n)[None, :]
    even_ptrs = a_ptr + (2 * pair_rows)[:, None] * stride_am + byte_cols[None, :] * stride_an
    even = tl.load(even_ptrs, mask=load_mask, other=0).to(tl.uint8, bitcast=True)
    odd = tl.load(even_ptrs + stride_am, mask=load_mask, other=0).to(tl.uint8, bitcast=True)

    low_codes = (even & 0xF) | (odd << 4)
    high_codes = (even >> 4) | (odd & 0xF0)
    # [pair row, byte, 2] -> [byte, 2, pair row] = [output row, output byte]
    pairs = tl.join(low_codes, high_codes)
    packed = tl.reshape(tl.permute(pairs, (1, 2, 0)), (2 * BLOCK_BYTES, BLOCK_ROWS // 2))

    out_rows = pid_bytes * (2 * BLOCK_BYTES) + tl.arange(0, 2 * BLOCK_BYTES)
    out_cols = pid_rows * (BLOCK_ROWS // 2) + tl.arange(0, BLOCK_ROWS // 2)
    tl.store(out_ptr + out_rows[:, None] * half_m + out_cols[None, :],
             packed.to(tl.int8, bitcast=True),
             mask=(out_rows < 2 * half_n)[:, None] & (out_cols < half_m)[None, :])


@triton.jit
def _cast_back_from_fp4_kernel(
    packed_ptr, sf_ptr, out_ptr,
    m, half_n,
    stride_pm, stride_pn,
    stride_sfm, stride_sfk,
    GRAN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    PACKED_UE8M0: tl.constexpr,
):
    """Program (i, j): rows [i*BLOCK_M, ...), logical columns [j*BLOCK_N, ...). Each value is
    multiplied by the SF of its group, read per element (the SF loads of a row hit the same few
    addresses, so they come from L1); GRAN_K need not be a power of two. ``out_ptr`` is the
    contiguous fp32 output [m, 2*half_n]."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows64 = rows.to(tl.int64)
    row_ok = rows < m
    byte_cols = pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
    byte_offsets = rows64[:, None] * stride_pm + byte_cols.to(tl.int64)[None, :] * stride_pn
    byte = tl.load(packed_ptr + byte_offsets, mask=row_ok[:, None] & (byte_cols < half_n)[None, :],
                   other=0).to(tl.int32)
    codes = tl.reshape(tl.join(byte & 0xF, (byte >> 4) & 0xF), (BLOCK_M, BLOCK_N))

    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = row_ok[:, None] & (cols < 2 * half_n)[None, :]
    groups = cols // GRAN_K
    if PACKED_UE8M0:
        word_cols = (groups // 4).to(tl.int64)
        words = tl.load(sf_ptr + rows64[:, None] * stride_sfm + word_cols[None, :] * stride_sfk,
                        mask=mask, other=0)
        exponents = (words >> ((groups % 4) * 8)[None, :]) & 0xFF
        sf = (exponents << 23).to(tl.float32, bitcast=True)
    else:
        sf_offsets = rows64[:, None] * stride_sfm + groups.to(tl.int64)[None, :] * stride_sfk
        sf = tl.load(sf_ptr + sf_offsets, mask=mask, other=0.0)
    out = _e2m1_values(codes) * sf
    tl.store(out_ptr + rows64[:, None] * (2 * half_n) + cols[None, :], out, mask=mask)


def _cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


def _cast_tile(gran_k: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of the cast on a GPU."""
    block_n = max(_CAST_MIN_BLOCK_N, 4 * gran_k)
    return max(1, _ELEMENTS_PER_PROGRAM // block_n), block_n


def per_token_cast_to_fp4_triton(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                                 use_packed_ue8m0: bool = False, tma_aligned_sf: bool = False, *,
                                 block_m: int | None = None, block_n: int | None = None):
    """Per-token 1 x gran_k FP4 cast. ``x`` 2-D bf16/fp32 [m, n], n even, any strides; gran_k a
    power of two; ``use_packed_ue8m0`` needs ``use_ue8m0``.

    Returns ``(int8 [m, n/2] contiguous, sf)``; sf is fp32 [m, ceil(n/gran_k)] or, packed, int32
    [m, ceil(ceil(n/gran_k)/4)] (missing groups of the last word are 1.0, byte 127). With
    ``tma_aligned_sf`` sf has strides ``(1, align(m, 4))`` (API.md 2.3); its padding rows
    m..align(m, 4)-1 are left unwritten.

    ``block_m`` / ``block_n`` override the tile (powers of two, ``block_n`` a multiple of
    ``4 * gran_k``): the interpreter tests use larger tiles, since its cost is per program.
    """
    m, n = x.shape
    num_groups = _cdiv(n, gran_k)
    packed = torch.empty((m, n // 2), dtype=torch.int8, device=x.device)
    sf_columns = _cdiv(num_groups, 4) if use_packed_ue8m0 else num_groups
    sf_dtype = torch.int32 if use_packed_ue8m0 else torch.float32
    sf_rows = _cdiv(m, 4) * 4 if tma_aligned_sf else m
    sf_strides = (1, sf_rows) if tma_aligned_sf else (sf_columns, 1)
    sf = torch.empty(sf_rows * sf_columns, dtype=sf_dtype, device=x.device).as_strided(
        (m, sf_columns), sf_strides)
    default_block_m, default_block_n = _cast_tile(gran_k)
    block_m, block_n = block_m or default_block_m, block_n or default_block_n
    if m > 0 and n > 0:
        _per_token_cast_to_fp4_kernel[(_cdiv(m, block_m), _cdiv(n, block_n))](
            x, packed, sf, m, n, num_groups, sf_columns, x.stride(0), x.stride(1),
            sf.stride(0), sf.stride(1),
            GRAN_K=gran_k, BLOCK_M=block_m, BLOCK_N=block_n, USE_UE8M0=bool(use_ue8m0),
            PACKED_UE8M0=bool(use_packed_ue8m0), num_warps=4)
    return packed, sf


def transpose_packed_fp4_triton(a: torch.Tensor, *, block_rows: int = _TRANSPOSE_BLOCK_ROWS,
                                block_bytes: int = _TRANSPOSE_BLOCK_BYTES) -> torch.Tensor:
    """int8 ``[m, n/2]`` (m even, any strides) -> contiguous int8 ``[n, m/2]``, the packed form of
    the transposed logical matrix. The tile (``block_rows`` even) is overridable for tests."""
    m, half_n = a.shape
    out = torch.empty((2 * half_n, m // 2), dtype=torch.int8, device=a.device)
    if m > 0 and half_n > 0:
        _transpose_packed_fp4_kernel[(_cdiv(m, block_rows), _cdiv(half_n, block_bytes))](
            a, out, m, half_n, a.stride(0), a.stride(1),
            BLOCK_ROWS=block_rows, BLOCK_BYTES=block_bytes, num_warps=4)
    return out


def cast_back_from_fp4_triton(packed: torch.Tensor, sf: torch.Tensor, gran_k: int = 128,
                              use_packed_ue8m0: bool = False, *,
                              block_m: int = _CAST_BACK_BLOCK_M,
                              block_n: int = _CAST_BACK_BLOCK_N) -> torch.Tensor:
    """int8 ``[m, n/2]`` FP4 data and its SF (fp32 ``[m, >= ceil(n/gran_k)]`` or packed int32
    ``[m, >= ceil(ceil(n/gran_k)/4)]``, any strides) -> contiguous fp32 ``[m, n]``. The tile is
    overridable for tests."""
    m, half_n = packed.shape
    out = torch.empty((m, 2 * half_n), dtype=torch.float32, device=packed.device)
    if m > 0 and half_n > 0:
        _cast_back_from_fp4_kernel[(_cdiv(m, block_m), _cdiv(2 * half_n, block_n))](
            packed, sf, out, m, half_n, packed.stride(0), packed.stride(1),
            sf.stride(0), sf.stride(1),
            GRAN_K=gran_k, BLOCK_M=block_m, BLOCK_N=block_n,
            PACKED_UE8M0=bool(use_packed_ue8m0), num_warps=4)
    return out
