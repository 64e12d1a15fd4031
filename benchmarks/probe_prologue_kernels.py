"""Variant kernels timed by probe_prologue.py against the library's launches (not used by the
library): the per-channel FP8 cast in two passes over its rows, and the exhaustive check of the
division helpers of dg_triton.triton.exact_math."""
import triton
import triton.language as tl

from dg_triton.triton.exact_math import div_rn_by_6, div_rn_by_448, reciprocal_rn


@triton.jit
def per_channel_two_pass_kernel(x_ptr, q_ptr, sf_ptr, n, stride_xm, stride_xn,
                                GRAN_K: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr):
    """Program (j, g): the column amax over the group's rows streamed in CHUNK-row slices (from
    HBM), then the rows read again (from L2) and cast, so a thread holds one slice, not the
    group."""
    pid_n = tl.program_id(0)
    group = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n
    mask = col_ok[None, :]
    chunk_rows = tl.arange(0, CHUNK)
    base = x_ptr + (group * GRAN_K).to(tl.int64) * stride_xm + cols[None, :] * stride_xn
    running = tl.zeros((CHUNK, BLOCK_N), dtype=tl.float32)
    for r in range(0, GRAN_K, CHUNK):
        x = tl.load(base + (r + chunk_rows)[:, None] * stride_xm, mask=mask, other=0.0)
        running = tl.maximum(running, tl.abs(x.to(tl.float32)))
    floored = tl.maximum(tl.max(running, axis=0), 1e-4)
    sf = div_rn_by_448(floored)
    inv_sf = reciprocal_rn(sf)
    q_base = q_ptr + (group * GRAN_K).to(tl.int64) * n + cols[None, :]
    for r in range(0, GRAN_K, CHUNK):
        x = tl.load(base + (r + chunk_rows)[:, None] * stride_xm, mask=mask, other=0.0)
        q = (x.to(tl.float32) * inv_sf[None, :]).to(tl.float8e4nv)
        tl.store(q_base + (r + chunk_rows)[:, None] * n, q, mask=mask)
    tl.store(sf_ptr + group * n + cols, sf, mask=col_ok)


@triton.jit
def _count_mismatches(counts_ptr, first_ptr, INDEX: tl.constexpr, got, want, ok, bits):
    bad = ok & (got.to(tl.int32, bitcast=True) != want.to(tl.int32, bitcast=True))
    tl.atomic_add(counts_ptr + INDEX, tl.sum(bad.to(tl.int32), 0))
    tl.atomic_min(first_ptr + INDEX, tl.min(tl.where(bad, bits, 2147483647), 0))


@triton.jit
def division_mismatch_kernel(counts_ptr, first_ptr, start_bits, num_values, BLOCK: tl.constexpr):
    """For the fp32 bit patterns [start_bits, start_bits + num_values): counts where
    div_rn_by_448(a) != div_rn(a, 448) (counts[0]), div_rn_by_6(a) !=
    div_rn(a, 6) (counts[1]) and reciprocal_rn(a) != div_rn(1, a) (counts[2]), bitwise, and keeps
    the smallest mismatching pattern of each (first[i])."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offsets < num_values
    bits = (start_bits + offsets).to(tl.int32)
    a = bits.to(tl.float32, bitcast=True)
    _count_mismatches(counts_ptr, first_ptr, 0, div_rn_by_448(a),
                      tl.math.div_rn(a, 448.0), ok, bits)
    _count_mismatches(counts_ptr, first_ptr, 1, div_rn_by_6(a),
                      tl.math.div_rn(a, 6.0), ok, bits)
    _count_mismatches(counts_ptr, first_ptr, 2, reciprocal_rn(a), tl.math.div_rn(1.0, a), ok, bits)
