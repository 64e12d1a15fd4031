"""SwiGLU between MoE linear 1 and linear 2 as Triton kernels: the bare activation (bf16 out) and
the activation fused with the per-token 1 x gran_k FP8 E4M3 cast (one read of x, one write of q).

Both follow ``dg_triton.reference_swiglu`` step for step in fp32: bf16 loads upcast (exact), the
clamp with NaN propagation (as torch.clamp), ``silu = div_rn(gate, 1 + exp(-gate))``, ``* up``,
``* w[row]``; the cast then as ``dg_triton.triton.quant`` does it (``div_rn`` for the scale and its
reciprocal, ``q = act * (1/sf)``, RTNE saturating cvt to e4m3). No step feeds a multiply into an
add, so FMA contraction changes nothing.

``exp`` is the only step whose result depends on the implementation. On CUDA the kernels call
libdevice's ``expf``, the function torch's CUDA ``exp`` compiles to: on an H200 (torch 2.11, triton
3.6) the two agree bitwise on every bf16 input and on 4M random fp32 inputs, so the kernels equal
the reference evaluated by torch on the same GPU, bit for bit (the GPU tests assert it). ``tl.exp``
would be ``ex2.approx(x * log2 e)``: up to 53 ulps off, no faster here (the kernels are
memory-bound). The interpreter has no libdevice, so there ``tl.exp`` runs numpy's exp, which
differs from torch's CPU exp in the last bit on about 5% of bf16 inputs.

NaN and Inf follow the reference: the group amax is the integer max of the |act| bit patterns,
which orders NaN above Inf above every finite value as torch.amax does (``tl.max`` on floats drops
NaN), and the 1e-4 floor keeps NaN. One exception: with UE8M0 an infinite act in a group whose
scale clamps to 2^127 is stored as +-448 (the cvt saturates, as torch >= 2.13's cast does; older
torch gives NaN).

Launchers allocate their outputs, never read device values on the host and launch one kernel, so
they can be captured in a CUDA graph; arguments are validated by ``dg_triton.activation``.
"""
import contextlib

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from .quant import _scale_from_amax

__all__ = ["swiglu_per_token_cast_to_fp8_triton", "swiglu_triton"]

# Elements of one operand (gate or up) per program of the fused kernel: 16 x 128 for gran_k = 128
# over 4 warps, 16 per thread. It keeps GRAN_K columns (one group) and takes as many rows as fit, so
# consecutive SF stores stay coalesced in the MN-major layout. H200, CUDA-graph timed, M=8192
# I=2048: 16 rows x 4 warps 24.9 us (3.2 TB/s), 8 x 2 25.5, 32 x 8 25.6, 32 x 4 27.1; gran_k = 32
# with 64 rows x 4 warps within 0.1 us of the best; M=4096 I=18432 the same order (102 us).
_ELEMENTS_PER_PROGRAM = 2048
# The bare activation: 16 x 128 x 4 warps was within 0.5% of the best of 27 configurations.
_SWIGLU_BLOCK_M = 16
_SWIGLU_BLOCK_N = 128
# Largest gran_k the fused kernel takes: one group must fit a program's registers.
MAX_GRAN_K = 4096
# Groups run on grid axis 1, which CUDA limits to 65535 programs.
MAX_GROUPS = 65535


@triton.jit
def _swiglu_tile(x_ptr, weights_ptr, rows, cols, row_ok, col_ok, intermediate,
                 stride_xm, stride_xn, stride_w, clamp_value,
                 HAS_WEIGHTS: tl.constexpr, HAS_CLAMP: tl.constexpr, LIBDEVICE_EXP: tl.constexpr,
                 ZERO_MASKED_COLUMNS: tl.constexpr):
    """fp32 act of rows x cols (cols < intermediate). Elements of masked rows are 0 (x and the
    weight load as 0); those of masked columns only with ZERO_MASKED_COLUMNS (a select per element,
    which the caller asks for when they enter a reduction)."""
    mask = row_ok[:, None] & col_ok[None, :]
    # int64 offsets: a transposed x of over 2^31 elements must not wrap.
    row_ptrs = x_ptr + rows.to(tl.int64)[:, None] * stride_xm
    gate_cols = cols.to(tl.int64)[None, :]
    gate = tl.load(row_ptrs + gate_cols * stride_xn, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(row_ptrs + (gate_cols + intermediate) * stride_xn, mask=mask,
                 other=0.0).to(tl.float32)
    if HAS_CLAMP:
        gate = tl.minimum(gate, clamp_value, propagate_nan=tl.PropagateNan.ALL)
        up = tl.maximum(up, -clamp_value, propagate_nan=tl.PropagateNan.ALL)
        up = tl.minimum(up, clamp_value, propagate_nan=tl.PropagateNan.ALL)
    if LIBDEVICE_EXP:
        exp_minus_gate = libdevice.exp(-gate)
    else:
        exp_minus_gate = tl.exp(-gate)
    act = tl.math.div_rn(gate, 1.0 + exp_minus_gate) * up
    if HAS_WEIGHTS:
        weights = tl.load(weights_ptr + rows.to(tl.int64) * stride_w, mask=row_ok,
                          other=0.0).to(tl.float32)
        act = act * weights[:, None]
        if ZERO_MASKED_COLUMNS:
            # A masked column is 0 * w, which an infinite w would turn into NaN in the group amax.
            act = tl.where(col_ok[None, :], act, 0.0)
    return act


@triton.jit
def _swiglu_kernel(
    x_ptr, weights_ptr, out_ptr,
    m, intermediate,
    stride_xm, stride_xn, stride_w,
    clamp_value,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr, HAS_CLAMP: tl.constexpr, LIBDEVICE_EXP: tl.constexpr,
):
    """Program (i, j): rows [i*BLOCK_M, ...), output columns [j*BLOCK_N, ...) of bf16 out [m, I]."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < m
    col_ok = cols < intermediate
    # Masked elements are not stored, so their values do not matter.
    act = _swiglu_tile(x_ptr, weights_ptr, rows, cols, row_ok, col_ok, intermediate,
                       stride_xm, stride_xn, stride_w, clamp_value, HAS_WEIGHTS, HAS_CLAMP,
                       LIBDEVICE_EXP, ZERO_MASKED_COLUMNS=False)
    out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * intermediate + cols[None, :]
    tl.store(out_ptrs, act.to(tl.bfloat16), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _swiglu_per_token_cast_to_fp8_kernel(
    x_ptr, weights_ptr, q_ptr, sf_ptr,
    m, intermediate, num_groups, sf_rows,
    stride_xm, stride_xn, stride_w,
    stride_sfm, stride_sfk,
    clamp_value,
    GRAN_K: tl.constexpr, BLOCK_M: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr, HAS_CLAMP: tl.constexpr, LIBDEVICE_EXP: tl.constexpr,
    USE_UE8M0: tl.constexpr, PACKED_UE8M0: tl.constexpr, PARTIAL_LAST_GROUP: tl.constexpr,
):
    """Program (i, g): rows [i*BLOCK_M, ...), K-group g of the I output columns.

    Rows cover ``sf_rows`` (``align(m, 4)`` for the TMA-aligned layout) and groups cover the SF
    columns (rounded up to 4 when packed): SFs of padding rows and padding groups are written as 0
    (byte 0 when packed), so every element of the SF storage is defined. The SF goes to
    ``sf_ptr + row * stride_sfm + g * stride_sfk``; with PACKED_UE8M0 ``sf_ptr`` is the byte view
    of the int32 SF, strides in int32 elements, and group g is byte g % 4 of element (row, g // 4).
    """
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    group = tl.program_id(1)
    cols = group * GRAN_K + tl.arange(0, GRAN_K)
    row_ok = rows < m
    col_ok = cols < intermediate
    # Masked columns enter the amax only in a partial last group (padding groups get SF 0 below).
    act = _swiglu_tile(x_ptr, weights_ptr, rows, cols, row_ok, col_ok, intermediate,
                       stride_xm, stride_xn, stride_w, clamp_value, HAS_WEIGHTS, HAS_CLAMP,
                       LIBDEVICE_EXP, ZERO_MASKED_COLUMNS=PARTIAL_LAST_GROUP)

    # |act| is non-negative, so its bit patterns order as integers exactly as the values do, with
    # NaN above Inf: the integer max is torch.amax, NaN included.
    abs_bits = tl.abs(act).to(tl.int32, bitcast=True)
    amax = tl.max(abs_bits, axis=1).to(tl.float32, bitcast=True)
    sf, inv_sf = _scale_from_amax(amax, USE_UE8M0, KEEP_NAN=True)
    q = (act * inv_sf[:, None]).to(tl.float8e4nv)
    rows64 = rows.to(tl.int64)
    tl.store(q_ptr + rows64[:, None] * intermediate + cols[None, :], q,
             mask=row_ok[:, None] & col_ok[None, :])

    sf = tl.where(row_ok & (group < num_groups), sf, 0.0)
    sf_row_ok = rows < sf_rows
    if PACKED_UE8M0:
        sf_offsets = 4 * (rows64 * stride_sfm + (group // 4) * stride_sfk) + group % 4
        biased_exponent = (sf.to(tl.int32, bitcast=True) >> 23).to(tl.uint8)
        tl.store(sf_ptr + sf_offsets, biased_exponent, mask=sf_row_ok)
    else:
        tl.store(sf_ptr + rows64 * stride_sfm + group * stride_sfk, sf, mask=sf_row_ok)


def _cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


def _launch_arguments(x: torch.Tensor, routing_weights, clamp):
    """Kernel arguments for the optional inputs (a dummy pointer, x, never read, and 0.0 when
    absent, so the launch signature stays the same) and the exp to use (module docstring)."""
    weights = x if routing_weights is None else routing_weights
    stride_w = 0 if routing_weights is None else routing_weights.stride(0)
    clamp_value = 0.0 if clamp is None else float(clamp)
    options = {"HAS_WEIGHTS": routing_weights is not None, "HAS_CLAMP": clamp is not None,
               "LIBDEVICE_EXP": x.is_cuda}
    return weights, stride_w, clamp_value, options


def _on_device_of(x: torch.Tensor):
    # Triton launches on the current CUDA device, which need not be x's.
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def swiglu_triton(x: torch.Tensor, routing_weights=None, clamp=None) -> torch.Tensor:
    """bf16 ``[M, I]`` SwiGLU of bf16 ``x`` ``[M, 2*I]`` (any strides); ``routing_weights`` fp32 or
    bf16 ``[M]`` or None; ``clamp`` a float >= 0 or None."""
    m, intermediate = x.size(0), x.size(1) // 2
    out = torch.empty((m, intermediate), dtype=torch.bfloat16, device=x.device)
    weights, stride_w, clamp_value, options = _launch_arguments(x, routing_weights, clamp)
    if m > 0 and intermediate > 0:
        grid = (_cdiv(m, _SWIGLU_BLOCK_M), _cdiv(intermediate, _SWIGLU_BLOCK_N))
        with _on_device_of(x):
            _swiglu_kernel[grid](
                x, weights, out, m, intermediate, x.stride(0), x.stride(1), stride_w, clamp_value,
                BLOCK_M=_SWIGLU_BLOCK_M, BLOCK_N=_SWIGLU_BLOCK_N, **options, num_warps=4)
    return out


def fused_block_m(gran_k: int) -> int:
    """Rows per program of the fused kernel for a power-of-two gran_k <= MAX_GRAN_K."""
    return max(1, _ELEMENTS_PER_PROGRAM // gran_k)


def swiglu_per_token_cast_to_fp8_triton(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                                        routing_weights=None, clamp=None,
                                        tma_aligned_sf: bool = True,
                                        use_packed_ue8m0: bool = False):
    """Fused SwiGLU + per-token 1 x gran_k FP8 cast of bf16 ``x`` ``[M, 2*I]`` (any strides);
    gran_k a power of two <= MAX_GRAN_K; ``use_packed_ue8m0`` needs ``use_ue8m0``.

    Returns ``(q [M, I] float8_e4m3fn contiguous, sf)``: sf fp32 ``[M, ceil(I/gran_k)]`` or packed
    int32 ``[M, ceil(ceil(I/gran_k)/4)]`` (missing groups byte 0); with ``tma_aligned_sf`` strides
    ``(1, align(M, 4))`` (API.md 2.3) and padding rows written as 0, else row-major.
    """
    m, intermediate = x.size(0), x.size(1) // 2
    num_groups = _cdiv(intermediate, gran_k)
    sf_groups = _cdiv(num_groups, 4) * 4 if use_packed_ue8m0 else num_groups
    sf_cols = sf_groups // 4 if use_packed_ue8m0 else num_groups
    sf_rows = _cdiv(m, 4) * 4 if tma_aligned_sf else m
    sf_strides = (1, sf_rows) if tma_aligned_sf else (sf_cols, 1)
    q = torch.empty((m, intermediate), dtype=torch.float8_e4m3fn, device=x.device)
    if use_packed_ue8m0:
        # Written byte by byte through the uint8 buffer under the int32 SF.
        sf_target = torch.empty(4 * sf_rows * sf_cols, dtype=torch.uint8, device=x.device)
        sf = sf_target.view(torch.int32).as_strided((m, sf_cols), sf_strides)
    else:
        sf_target = torch.empty(sf_rows * sf_cols, dtype=torch.float32, device=x.device)
        sf = sf_target.as_strided((m, sf_cols), sf_strides)
    weights, stride_w, clamp_value, options = _launch_arguments(x, routing_weights, clamp)
    block_m = fused_block_m(gran_k)
    if sf_rows > 0 and sf_groups > 0:
        with _on_device_of(x):
            _swiglu_per_token_cast_to_fp8_kernel[(_cdiv(sf_rows, block_m), sf_groups)](
                x, weights, q, sf_target, m, intermediate, num_groups, sf_rows,
                x.stride(0), x.stride(1), stride_w, sf_strides[0], sf_strides[1], clamp_value,
                GRAN_K=gran_k, BLOCK_M=block_m, **options, USE_UE8M0=bool(use_ue8m0),
                PACKED_UE8M0=bool(use_packed_ue8m0), PARTIAL_LAST_GROUP=intermediate % gran_k != 0,
                num_warps=4)
    return q, sf
