"""FP4 E2M1 helpers of API.md 3.15 as Triton kernels: the per-token cast
(``per_token_cast_to_fp4``), the transpose of packed FP4 data (``transpose_packed_fp4``) and the
dequantization (``cast_back_from_fp4``).

Every result is bitwise equal to ``dg_triton.reference_quant`` because each step is the same IEEE
fp32 operation, or pure bit movement:

- loads are upcast to fp32 (bf16 -> fp32 is exact);
- the group amax of the cast is a NaN-propagating float max of |x| (``max.NaN`` on NVIDIA,
  ``np.maximum`` in the interpreter), so a NaN in the group gives a NaN amax as ``torch.amax``
  does; ``tl.max`` on floats would drop it (maxnum on NVIDIA, ``np.nanmax`` in the interpreter);
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

from dg_triton.triton.exact_math import div_rn_by_6, fused_fma, max_keeping_nan

__all__ = [
    "cast_back_from_fp4_triton",
    "per_token_cast_to_fp4_triton",
    "transpose_packed_fp4_triton",
]

# Elements per program of the cast: 8192, two 32-column slots a thread over 4 warps (71 registers
# on sm_90a with exact_math's division; with div_rn's slow-path call 117, which is why 4096 used
# to win), as 16 rows x 512 columns. On the H200 (probe_prologue-h200.txt) 16 x 512 reached 0.80
# / 0.83 of a copy at 4096 / 16384 x 7168, 32 x 256 0.80 / 0.82, 64 x 256 0.78 / 0.83, and the
# former 16 x 256 with div_rn and rows as the grid's fast axis 0.78 / 0.76.
_ELEMENTS_PER_PROGRAM = 8192
# The cast's register cap on a GPU: 64 registers a thread let 8 programs share an SM instead of 7
# (72 registers uncapped), at the cost of one spilled register (one STL and one LDL a thread,
# outside any loop; ptxas, sm_90a). With the saturating-FMA index (SAT_COMPARES) that measured
# 1.4-2.5 % faster than the uncapped launch on the H200 (probe_prologue, session 20: 28.0-28.4
# against 28.6-29.1 us at 4096 x 7168, 87.0-87.2 against 88.8-88.9 at 16384 x 7168); with the
# compare-and-select index the cap was 1-3 % slower (sessions 19 and 20).
_CAST_MAXNREG = 64
# The cast's column block spans at least this many columns and at least 4 K-groups, so that the
# packed UE8M0 words (4 groups each) never straddle two programs.
_CAST_MIN_BLOCK_N = 512
# CUDA's limit on a grid's second axis.
_MAX_GRID_Y = 65535
# Transpose tile: 256 input rows x 64 input bytes (128 codes) in, 128 output rows x 128 bytes
# (whole 128-byte lines) out; 16 KiB over 4 warps, 56 registers (ptxas, sm_90a).
_TRANSPOSE_BLOCK_ROWS = 256
_TRANSPOSE_BLOCK_BYTES = 64
# Cast-back tile: 16 rows x 256 columns.
_CAST_BACK_BLOCK_M = 16
_CAST_BACK_BLOCK_N = 256


@triton.jit
def _saturated_fma(magnitude, ASM: tl.constexpr):
    """``ASM``, an ``fma.rn.sat.f32`` of ``magnitude`` with two immediates, elementwise."""
    return tl.inline_asm_elementwise(ASM, "=r,r", [magnitude], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def _lower_midpoints_exceeded(magnitude):
    """How many of the midpoints 0.25 and 0.75 ``magnitude`` exceeds (NaN: none), as 0.0, 1.0 or
    2.0, with one saturating FMA on the FMA pipe for each where a compare and a select would be
    two instructions on the half-rate ALU pipe (GPU only: the interpreter has no inline
    assembly). ``m * 2^100 - t * 2^100`` rounded once is 0 at m = t, negative below, and above t
    at least ``2^100 * ulp(t)`` (>= 2^75 here), so ``.sat`` makes it exactly 1 or 0; ``.sat``
    turns NaN into +0. The immediates: 0f71800000 = 2^100, 0fF0800000 = -0.25 * 2^100,
    0fF1400000 = -0.75 * 2^100."""
    return (_saturated_fma(magnitude, "fma.rn.sat.f32 $0, $1, 0f71800000, 0fF0800000;")
            + _saturated_fma(magnitude, "fma.rn.sat.f32 $0, $1, 0f71800000, 0fF1400000;"))


@triton.jit
def _e2m1_indices(magnitude, SAT_COMPARES: tl.constexpr):
    """fp32 magnitudes (>= 0 or NaN, already scaled) -> E2M1 indices 0..7 as int32: the number of
    midpoints the magnitude exceeds (strict ``>``: ties round down; NaN exceeds none; above 5 it
    is 7), as the reference defines it.

    Counted with bit arithmetic instead of seven compares and selects (the cast is bound by
    instruction issue and the ALU pipe on the H200, not by memory: NOTES.md, sessions 19-20). From 1 to 6 the E2M1 values
    1, 1.5, 2, 3, 4, 6 are the fp32 values with one mantissa bit, 2^22 apart as bit patterns, and
    the midpoints 1.25, 1.75, 2.5, 3.5, 5 lie 2^21 above each: for a magnitude clamped to [1, 6],
    the count of those five midpoints it exceeds is ``(bits - bits(1.25) - 1 + 2^22) >> 22``, i.e.
    ``(bits + 0x5FFFFF) >> 22`` minus 255; every magnitude up to 1 clamps to 1 and counts 0.
    The midpoints 0.25 and 0.75 are two more counts: with SAT_COMPARES two saturating FMAs
    (``_lower_midpoints_exceeded``), whose sum 0.0, 1.0 or 2.0 holds that count in its bits 29-31;
    without, a compare and a select. A NaN exceeds no midpoint: on the GPU the clamp's float
    min/max drop it (count 0) and the saturating FMAs give 0; in the interpreter (no
    SAT_COMPARES) min/max keep it, so the select on ``> 0.75`` (false for NaN) discards the
    clamped count. Same result as the reference for every fp32 input (tests/interpret/test_fp4.py
    and tests/test_fp4_gpu.py put values on and next to every midpoint, and NaN and inf)."""
    clamped = tl.minimum(tl.maximum(magnitude, 1.0), 6.0)
    upper_midpoints = ((clamped.to(tl.int32, bitcast=True) + 0x5FFFFF) >> 22) - 255
    if SAT_COMPARES:
        lower = _lower_midpoints_exceeded(magnitude)
        return upper_midpoints + (lower.to(tl.int32, bitcast=True) >> 29)
    return tl.where(magnitude > 0.75, upper_midpoints + 2, (magnitude > 0.25).to(tl.int32))


@triton.jit
def _e2m1_pairs(x, inv_sf, sign_words, SAT_COMPARES: tl.constexpr):
    """fp32 ``x`` [..., 2k] (``inv_sf`` broadcast to it) -> int32 bytes [..., k], each the E2M1
    codes of an (even, odd) pair of ``x * inv_sf``, even code in the low nibble. ``sign_words``
    [..., k] holds the pair's sign bits at bits 15 (even) and 31 (odd), as a bf16 pair does.

    The sign is applied to the packed byte rather than to each code: with ``s`` the byte's two
    sign bits at bits 3 and 7, and ``t = byte + 0x77`` (each nibble's index plus 7, no carry), bit 3
    of a nibble of t is set exactly when its index is non-zero, so ``byte | (s & t)`` sets the sign
    only on non-zero codes (no "-0", code 8), as the reference does: four integer instructions a
    pair besides the packing, where a sign per code took three per code. The magnitude is only
    read by compares, min/max and FMAs, which take the abs as an operand modifier."""
    magnitude = tl.abs(x * inv_sf)
    indices = tl.reshape(_e2m1_indices(magnitude, SAT_COMPARES), sign_words.shape + (2,))
    low, high = tl.split(indices)
    byte = low + (high << 4)
    # Bit 15 to bit 3 and bit 31 to bits 7 and 19 in one multiply-high: (m * (2^20 + 2^8)) >> 32
    # is (m >> 12) + (m >> 24) for m = the two sign bits (the low word of the product holds only
    # bit 23, so nothing carries). Bit 19 lies above the byte and t (below 0xEF), so ``s & t``
    # keeps bits 3 and 7 only.
    sign_bits = (sign_words & -2147450880).to(tl.uint32, bitcast=True)  # 0x80008000
    signs = tl.umulhi(sign_bits, tl.full(sign_bits.shape, 0x100100, tl.uint32))
    return byte | (signs.to(tl.int32, bitcast=True) & (byte + 0x77))


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
    m, n, half_n, num_groups, num_sf_columns,
    stride_xm, stride_xn,
    stride_sfm, stride_sfk,
    GRAN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    USE_UE8M0: tl.constexpr, PACKED_UE8M0: tl.constexpr, BF16_WORDS: tl.constexpr,
    FAST_DIV: tl.constexpr = False, FLAT_GRID: tl.constexpr = False,
    SAT_COMPARES: tl.constexpr = False,
):
    """Program (j, i), or with FLAT_GRID i * ceil(n / BLOCK_N) + j (for more than 65535 row
    blocks, a 2-D grid's limit on its second axis; measured 4 % slower at 16384 x 7168, so not the
    default): rows [i*BLOCK_M, (i+1)*BLOCK_M), columns [j*BLOCK_N, (j+1)*BLOCK_N), BLOCK_N a
    multiple of 4 * GRAN_K and of SLOT. Column blocks are the fast axis, so the programs in flight
    read neighbouring pieces of the same rows. FAST_DIV:
    the scale's division by exact_math.div_rn_by_6 (same bits; False under the interpreter).
    SAT_COMPARES: the E2M1 index's two lower midpoints by saturating FMAs (``_e2m1_indices``;
    inline assembly, so False under the interpreter).
    Columns past n read as 0 (the reference's zero padding). ``half_n`` is n / 2, an argument so that its divisibility by 16 is known to the
    compiler (``n // 2`` in the kernel only tells it 8): the masks then allow 16-byte accesses.

    The tile is [slot, SLOT / 2] words in and [slot, SLOT / 2] bytes out, a slot being SLOT =
    max(GRAN_K, 16) consecutive columns of one row. Triton's coalescing gives a load the widest
    per-thread vector of the memory accesses of its shape that depend on it, here the packed
    store's 16 bytes, so with BF16_WORDS a thread loads a whole 32-column slot (16 words, four
    16-byte loads) and stores its 16 bytes: a group's amax, scale and codes never cross threads.
    That removes the amax's shuffles and computes each group's scale (two correctly rounded
    divisions) once instead of in each of the 4 threads that held a part of it; the cast is bound
    by instruction issue on the H200 (sm_90a SASS: 25 instructions per element before, 16 now).
    With an fp32 or strided bf16 input the load has another shape and the group spans threads
    (Triton reduces across them): correct, not tuned.

    With BF16_WORDS, ``x_ptr`` is the int32 view of bf16 x (row stride in words): a word holds
    columns 2k (low half) and 2k + 1; upcasting takes one shift or one mask per value (Triton's
    bf16 -> fp32 on separate halves takes a byte permute and a shift for every high half), and
    the word is the sign source of ``_e2m1_pairs`` as it is.

    ``packed_ptr`` is the contiguous int8 output [m, n/2]. The SF element (row, c) goes to
    ``sf_ptr + row * stride_sfm + c * stride_sfk``, which covers both the row-major and the
    TMA-aligned MN-major layout; c is a K-group (fp32 sf) or, packed, ``sf_ptr`` is the byte view
    of the int32 words (``num_sf_columns`` of them a row, strides in words): group g's biased
    exponent is byte g % 4 of word (row, g // 4), written by the thread that owns the group.
    """
    SLOT: tl.constexpr = GRAN_K if GRAN_K > 16 else 16
    GROUPS_PER_SLOT: tl.constexpr = SLOT // GRAN_K
    SLOTS_PER_ROW: tl.constexpr = BLOCK_N // SLOT
    NUM_SLOTS: tl.constexpr = BLOCK_M * SLOTS_PER_ROW
    if FLAT_GRID:
        num_col_blocks = tl.cdiv(n, BLOCK_N)
        pid_n = tl.program_id(0) % num_col_blocks
        pid_m = tl.program_id(0) // num_col_blocks
    else:
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
    slot = tl.arange(0, NUM_SLOTS)
    rows = pid_m * BLOCK_M + slot // SLOTS_PER_ROW
    slot_cols = pid_n * BLOCK_N + (slot % SLOTS_PER_ROW) * SLOT
    row_ok = rows < m
    rows64 = rows.to(tl.int64)
    # Pair k of a slot: columns 2k, 2k + 1 (a bf16 word), byte k of the slot's packed output.
    pair_cols = slot_cols[:, None] // 2 + tl.arange(0, SLOT // 2)[None, :]
    pair_mask = row_ok[:, None] & (pair_cols < half_n)

    if BF16_WORDS:
        words = tl.load(x_ptr + rows64[:, None] * stride_xm + pair_cols, mask=pair_mask, other=0)
        x = tl.reshape(tl.join(words << 16, words & -65536), (NUM_SLOTS, SLOT))
        x = x.to(tl.float32, bitcast=True)
    else:
        cols = slot_cols[:, None] + tl.arange(0, SLOT)[None, :]
        x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols.to(tl.int64) * stride_xn,
                    mask=row_ok[:, None] & (cols < n), other=0.0).to(tl.float32)
        low_bits, high_bits = tl.split(tl.reshape(x.to(tl.int32, bitcast=True),
                                                  (NUM_SLOTS, SLOT // 2, 2)))
        words = (high_bits & -65536) | ((low_bits >> 16) & 0xFFFF)
    x_groups = tl.reshape(x, (NUM_SLOTS, GROUPS_PER_SLOT, GRAN_K))
    amax = tl.reduce(tl.abs(x_groups), 2, max_keeping_nan)
    if FAST_DIV:
        sf = div_rn_by_6(tl.where(amax < 1e-4, 1e-4, amax))
    else:
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

    inv_sf = tl.reshape(tl.broadcast_to(inv_sf[:, :, None], (NUM_SLOTS, GROUPS_PER_SLOT, GRAN_K)),
                        (NUM_SLOTS, SLOT))
    packed = _e2m1_pairs(x, inv_sf, words, SAT_COMPARES).to(tl.int8)
    tl.store(packed_ptr + rows64[:, None] * half_n + pair_cols, packed, mask=pair_mask)

    groups = slot_cols[:, None] // GRAN_K + tl.arange(0, GROUPS_PER_SLOT)[None, :]
    if PACKED_UE8M0:
        # Groups past num_groups pad the last word with 1.0 (biased exponent 127), as the
        # reference pads the SF count to a multiple of 4.
        exponents = tl.where(groups < num_groups, sf.to(tl.int32, bitcast=True) >> 23, 127)
        byte_offsets = 4 * (rows64[:, None] * stride_sfm + (groups // 4) * stride_sfk) + groups % 4
        tl.store(sf_ptr + byte_offsets, exponents.to(tl.uint8),
                 mask=row_ok[:, None] & (groups < 4 * num_sf_columns))
    else:
        sf_offsets = rows64[:, None] * stride_sfm + groups.to(tl.int64) * stride_sfk
        tl.store(sf_ptr + sf_offsets, sf, mask=row_ok[:, None] & (groups < num_groups))


@triton.jit
def _transpose_packed_fp4_kernel(
    a_ptr, out_ptr,
    m, half_n,
    stride_am, stride_an,
    BLOCK_ROWS: tl.constexpr, BLOCK_BYTES: tl.constexpr, BYTES_FAST: tl.constexpr = False,
):
    """Program (i, j): input rows [i*BLOCK_ROWS, ...) (BLOCK_ROWS even, m even), input bytes
    [j*BLOCK_BYTES, ...). Output row c byte r/2 holds input codes (r, c) low and (r + 1, c) high.
    ``out_ptr`` is the contiguous int8 output [2*half_n, m/2].

    The nibbles are regrouped before the transpose, on bytes: with E = row r and O = row r + 1
    (r even) of input byte j (codes 2j low, 2j + 1 high), output byte (2j, r/2) is
    ``E & 0xF | O << 4`` and (2j + 1, r/2) is ``E >> 4 | O & 0xF0``. So what crosses threads is a
    [BLOCK_ROWS/2, 2*BLOCK_BYTES] tile of bytes, as many as were loaded; transposing 4-bit codes
    held as int32 moved eight times that through shared memory, which bound the kernel on the
    H200 (0.52 of a copy's bandwidth). BYTES_FAST: the grid's first axis runs over byte blocks
    instead of row blocks."""
    if BYTES_FAST:
        pid_bytes = tl.program_id(0)
        pid_rows = tl.program_id(1)
    else:
        pid_rows = tl.program_id(0)
        pid_bytes = tl.program_id(1)
    pair_rows = pid_rows * (BLOCK_ROWS // 2) + tl.arange(0, BLOCK_ROWS // 2)
    byte_cols = pid_bytes * BLOCK_BYTES + tl.arange(0, BLOCK_BYTES)
    half_m = m // 2
    load_mask = (pair_rows < half_m)[:, None] & (byte_cols < half_n)[None, :]
    even_ptrs = (a_ptr + (2 * pair_rows).to(tl.int64)[:, None] * stride_am
                 + byte_cols.to(tl.int64)[None, :] * stride_an)
    even = tl.load(even_ptrs, mask=load_mask, other=0).to(tl.uint8, bitcast=True)
    odd = tl.load(even_ptrs + stride_am, mask=load_mask, other=0).to(tl.uint8, bitcast=True)

    low_codes = (even & 0xF) | (odd << 4)
    high_codes = (even >> 4) | (odd & 0xF0)
    # [pair row, byte, 2] -> [byte, 2, pair row] = [output row, output byte]
    pairs = tl.join(low_codes, high_codes)
    packed = tl.reshape(tl.permute(pairs, (1, 2, 0)), (2 * BLOCK_BYTES, BLOCK_ROWS // 2))

    out_rows = pid_bytes * (2 * BLOCK_BYTES) + tl.arange(0, 2 * BLOCK_BYTES)
    out_cols = pid_rows * (BLOCK_ROWS // 2) + tl.arange(0, BLOCK_ROWS // 2)
    tl.store(out_ptr + out_rows.to(tl.int64)[:, None] * half_m + out_cols[None, :],
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
    """(BLOCK_M, BLOCK_N) of the cast on a GPU: at least one slot (max(gran_k, 16) columns) per
    thread of the 4 warps, else threads would hold copies of the same slot."""
    block_n = max(_CAST_MIN_BLOCK_N, 4 * gran_k)
    elements = max(_ELEMENTS_PER_PROGRAM, 128 * max(gran_k, 16))
    return max(1, elements // block_n), block_n


def per_token_cast_to_fp4_triton(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                                 use_packed_ue8m0: bool = False, tma_aligned_sf: bool = False, *,
                                 block_m: int | None = None, block_n: int | None = None,
                                 num_warps: int = 4, maxnreg: int | None = None,
                                 sat_compares: bool | None = None):
    """Per-token 1 x gran_k FP4 cast. ``x`` 2-D bf16/fp32 [m, n], n even, any strides; gran_k a
    power of two; ``use_packed_ue8m0`` needs ``use_ue8m0``.

    Returns ``(int8 [m, n/2] contiguous, sf)``; sf is fp32 [m, ceil(n/gran_k)] or, packed, int32
    [m, ceil(ceil(n/gran_k)/4)] (missing groups of the last word are 1.0, byte 127). With
    ``tma_aligned_sf`` sf has strides ``(1, align(m, 4))`` (API.md 2.3); its padding rows
    m..align(m, 4)-1 are left unwritten.

    ``block_m`` / ``block_n`` override the tile (powers of two, ``block_n`` a multiple of
    ``4 * gran_k``): the interpreter tests use larger tiles, since its cost is per program.
    ``num_warps`` and ``maxnreg`` (a register cap for ptxas; default ``_CAST_MAXNREG`` with the
    saturating-FMA index) are launch overrides for probes, and so is ``sat_compares`` (default: on
    a GPU; the interpreter has no inline assembly).
    """
    m, n = x.shape
    num_groups = _cdiv(n, gran_k)
    packed = torch.empty((m, n // 2), dtype=torch.int8, device=x.device)
    sf_columns = _cdiv(num_groups, 4) if use_packed_ue8m0 else num_groups
    sf_rows = _cdiv(m, 4) * 4 if tma_aligned_sf else m
    sf_strides = (1, sf_rows) if tma_aligned_sf else (sf_columns, 1)
    if use_packed_ue8m0:
        # The kernel writes the packed SF byte by byte (each thread owns one group) through the
        # uint8 buffer under it.
        sf_target = torch.empty(4 * sf_rows * sf_columns, dtype=torch.uint8, device=x.device)
        sf = sf_target.view(torch.int32).as_strided((m, sf_columns), sf_strides)
    else:
        sf_target = torch.empty(sf_rows * sf_columns, dtype=torch.float32, device=x.device)
        sf = sf_target.as_strided((m, sf_columns), sf_strides)
    default_block_m, default_block_n = _cast_tile(gran_k)
    block_m, block_n = block_m or default_block_m, block_n or default_block_n
    # bf16 rows of whole 4-byte words are read as int32 (see the kernel); n is even already.
    bf16_words = (x.dtype == torch.bfloat16 and x.stride(1) == 1 and x.stride(0) % 2 == 0
                  and x.storage_offset() % 2 == 0)
    x_arg = x.view(torch.int32) if bf16_words else x
    on_gpu = fused_fma()  # not under the interpreter
    if sat_compares is None:
        sat_compares = on_gpu
    if maxnreg is None and sat_compares:
        maxnreg = _CAST_MAXNREG
    if m > 0 and n > 0:
        col_blocks, row_blocks = _cdiv(n, block_n), _cdiv(m, block_m)
        flat = row_blocks > _MAX_GRID_Y
        _per_token_cast_to_fp4_kernel[(col_blocks * row_blocks,) if flat else (col_blocks, row_blocks)](
            x_arg, packed, sf_target, m, n, n // 2, num_groups, sf_columns,
            x_arg.stride(0), x_arg.stride(1), sf.stride(0), sf.stride(1),
            GRAN_K=gran_k, BLOCK_M=block_m, BLOCK_N=block_n, USE_UE8M0=bool(use_ue8m0),
            PACKED_UE8M0=bool(use_packed_ue8m0), BF16_WORDS=bf16_words,
            FAST_DIV=on_gpu, FLAT_GRID=flat, SAT_COMPARES=sat_compares, num_warps=num_warps,
            **({} if maxnreg is None else {"maxnreg": maxnreg}))
    return packed, sf


def transpose_packed_fp4_triton(a: torch.Tensor, *, block_rows: int = _TRANSPOSE_BLOCK_ROWS,
                                block_bytes: int = _TRANSPOSE_BLOCK_BYTES, bytes_fast: bool | None = None,
                                num_warps: int = 4, maxnreg: int | None = None) -> torch.Tensor:
    """int8 ``[m, n/2]`` (m even, any strides) -> contiguous int8 ``[n, m/2]``, the packed form of
    the transposed logical matrix. The tile (``block_rows`` even) is overridable for tests; the
    grid order, ``num_warps`` and ``maxnreg`` (a register cap for ptxas) for probes.

    Byte blocks are the grid's fast axis by default: on the H200 (probe_prologue, session 19)
    16384 x 7168 codes took 39.6-39.7 us that way against 41.1 with row blocks first, the same at
    4096 rows. Row blocks go first only where they would pass the 65535 limit of axis 1."""
    m, half_n = a.shape
    out = torch.empty((2 * half_n, m // 2), dtype=torch.int8, device=a.device)
    if m > 0 and half_n > 0:
        row_blocks, byte_blocks = _cdiv(m, block_rows), _cdiv(half_n, block_bytes)
        if bytes_fast is None:
            bytes_fast = row_blocks <= _MAX_GRID_Y
        grid = (byte_blocks, row_blocks) if bytes_fast else (row_blocks, byte_blocks)
        _transpose_packed_fp4_kernel[grid](
            a, out, m, half_n, a.stride(0), a.stride(1),
            BLOCK_ROWS=block_rows, BLOCK_BYTES=block_bytes, BYTES_FAST=bytes_fast,
            num_warps=num_warps, **({} if maxnreg is None else {"maxnreg": maxnreg}))
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
