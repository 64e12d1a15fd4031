"""GEMV: the dense FP8 and BF16 GEMMs (API.md 3.1, 3.2) for decode-sized M, on CUDA cores.

At M = 1 the SM90 tensor-core kernels ran 0.81-0.99x cuBLAS's per-tensor ``_scaled_mm`` (FP8) and
0.73-1.03x ``torch.matmul`` (BF16) (H200, 2026-12-02, the benches at 9a5578a / 60b1874), 12-48 us
(FP8) where reading B once at the copy bandwidth takes 1-28 us: a 64-row tile carries one
row, and the time goes to pipeline start-up, the K loop's latency and the split-K reduction.
Here each program streams BLOCK_N rows of B over a slice of K with wide vector loads and
multiplies them by the few rows of A in FP32 (E4M3 and BF16 products are exact in FP32). FP8 sums
each 128-wide K block before scaling it, so the result is the two-level accumulation of the
tensor-core kernel (per-block partial sums, scaled by sfa * sfb, added in FP32):

    FP8:  d[r, j] (+)= sum_kb sfa[r, kb] * sfb[j // 128 or j, kb] * sum_{k in kb} A[r, k] * B[j, k]
    BF16: d[r, j] (+)= sum_k A[r, k] * B[j, k]

- FP8 recipes: "1d2d" (sfb per 128 x 128 block of B, bf16 d) and "1d1d" (sfb per row of B, fp32
  d); scale factors through their strides (the TMA-aligned MN-major layouts need no copy);
- d may accumulate (it then already holds c: the public layers copy c in);
- operands K-major (stride(1) == 1);
- split-K (grid axis 1) when BLOCK_N-row slabs alone leave the SMs with too few loads in flight:
  each slice writes an FP32 partial into a workspace, and the last slice of a slab to arrive sums
  the slices in a fixed order (deterministic) into d, in the same kernel (the second kernel it
  replaces cost up to 1.7 us of a 10-30 us call on the H200, at 1x576x7168);
- no host sync, nothing read back: capturable in a CUDA graph.

Whether SM90's GEMMs take this path is heuristics.sm90.takes_gemv (M = 1, FP8 at K >= 2048 and
BF16 at K >= 4096, from benchmarks/probe_gemv.py on the H200).
"""
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from dg_triton import dispatch, settings
from dg_triton.kernels import split_scratch

__all__ = ["GemvConfig", "MAX_ROWS", "bf16_gemv", "choose_config", "fp8_gemv"]

# The most rows of A the kernel takes (the rows are a tensor dimension, padded to a power of two).
MAX_ROWS = 8
# K per block of the loop: FP8's scale granularity along K (API.md 1.5), so that the kernel sums and
# scales per block; BF16 uses the same blocks unscaled.
_GRAN_K = 128


class GemvConfig(NamedTuple):
    block_n: int      # rows of B (columns of d) per program
    groups: int       # 128-wide K blocks per loop iteration (a power of two)
    split_k: int      # K slices (grid axis 1); > 1: partials summed by the slab's last slice
    num_warps: int

    def __str__(self):
        return f"gemv {self.block_n}n x {self.groups * _GRAN_K}k w{self.num_warps} k{self.split_k}"


@triton.jit
def _gemv_kernel(a_ptr, sfa_ptr, b_ptr, sfb_ptr, d_ptr, ws_ptr, counter_ptr, m, n, k,
                 k_blocks_per_split, num_splits, stride_am, stride_bn, stride_sfa_m, stride_sfa_k,
                 stride_sfb_row, stride_sfb_k, stride_dm, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
                 GROUPS: tl.constexpr, SCALED: tl.constexpr, SFB_PER_ROW: tl.constexpr,
                 ACCUMULATE: tl.constexpr, SPLIT: tl.constexpr):
    """One program: columns [pid_n * BLOCK_N, + BLOCK_N) of d for all rows, over K slice pid_k.
    SCALED: FP8 operands with scale factors; otherwise BF16 (sfa_ptr and sfb_ptr unread).
    SPLIT: the slice's FP32 partial goes to ws ([num_splits, m, n] flat); the slab's last slice to arrive
    (counter_ptr[pid_n], zero before the launch and reset by that slice) sums the partials in
    slice order (deterministic) into d."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)          # rows of B, columns of d
    col_ok = cols < n
    rows = tl.arange(0, ROWS)
    # 1D2D: one B scale per 128 rows of B; 1D1D: one per row.
    if SFB_PER_ROW:
        sfb_rows = cols
    else:
        sfb_rows = cols // 128
    num_k_blocks = tl.cdiv(k, 128)
    kb_begin = pid_k * k_blocks_per_split
    kb_end = tl.minimum(kb_begin + k_blocks_per_split, num_k_blocks)
    group = tl.arange(0, GROUPS)
    within = tl.arange(0, 128)
    # No layout conversions in the loop (each would be a shared-memory round trip and two
    # barriers): A is loaded through pointers of the product's shape [rows, BLOCK_N, GROUPS, 128],
    # so it arrives in B's layout broadcast over the rows (the repeats hit L1), and the
    # accumulator keeps the layout of the per-block reduction, (rows, columns, K groups), summed
    # over the groups once after the loop.
    acc = tl.zeros((ROWS, BLOCK_N, GROUPS), tl.float32)
    b_rows = b_ptr + cols.to(tl.int64)[:, None, None] * stride_bn   # N * K may pass 2^31
    rows3 = rows[:, None, None]
    rows4 = rows[:, None, None, None]
    no_col = cols[None, :, None, None] * 0
    for kb0 in range(kb_begin, kb_end, GROUPS):
        k_blocks = kb0 + group                                   # [GROUPS]
        block_ok = k_blocks < kb_end
        ks = k_blocks[:, None] * 128 + within[None, :]           # [GROUPS, 128], contiguous
        k_ok = block_ok[:, None] & (ks < k)
        b = tl.load(b_rows + ks[None, :, :],
                    mask=col_ok[:, None, None] & k_ok[None, :, :], other=0.0).to(tl.float32)
        if SCALED:
            sfb = tl.load(sfb_ptr + sfb_rows[:, None] * stride_sfb_row + k_blocks[None, :] * stride_sfb_k,
                          mask=col_ok[:, None] & block_ok[None, :], other=0.0)   # [BLOCK_N, GROUPS]
        a = tl.load(a_ptr + rows4 * stride_am + no_col + ks[None, None, :, :],
                    mask=k_ok[None, None, :, :] & (rows4 < m), other=0.0).to(tl.float32)
        block_sums = tl.sum(b[None, :, :, :] * a, axis=3)             # [ROWS, BLOCK_N, GROUPS]
        if SCALED:
            sfa = tl.load(sfa_ptr + rows3 * stride_sfa_m + k_blocks[None, None, :] * stride_sfa_k,
                          mask=block_ok[None, None, :] & (rows3 < m), other=0.0)  # [ROWS, 1, GROUPS]
            acc += block_sums * (sfb[None, :, :] * sfa)
        else:
            acc += block_sums
    acc = tl.sum(acc, axis=2)                                    # [ROWS, BLOCK_N]
    mask = (rows < m)[:, None] & col_ok[None, :]
    store = True
    if SPLIT:
        partials = ws_ptr + rows[:, None] * n + cols[None, :]      # ws: [num_splits, m, n]
        tl.store(partials + pid_k * m * n, acc, mask=mask)
        # Every thread's partial is stored before the release (the threadfence-reduction
        # protocol); the acquire orders the last slice's reads of the others' partials after it.
        tl.debug_barrier()
        arrived = tl.atomic_add(counter_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        store = arrived == num_splits - 1
        if store:
            acc = tl.zeros((ROWS, BLOCK_N), tl.float32)
            for s in range(0, num_splits):       # in slice order, whichever slice came last
                acc += tl.load(partials + s * m * n, mask=mask, other=0.0, cache_modifier=".cg")
            tl.atomic_xchg(counter_ptr + pid_n, 0)    # zero again for the next launch
    if store:
        pointers = d_ptr + rows[:, None] * stride_dm + cols[None, :]
        if ACCUMULATE:
            acc += tl.load(pointers, mask=mask, other=0.0).to(tl.float32)
        tl.store(pointers, acc.to(d_ptr.dtype.element_ty), mask=mask)


def choose_config(m: int, n: int, k: int, num_sms: int, scaled: bool = True) -> GemvConfig:
    """16-row slabs, 512 of K per iteration (8 KB of FP8 B, 16 KB of BF16, per program and
    iteration; 256 above 2 rows; FP8 at M = 1 8-row slabs, 4 KB); split K until there are ~4
    programs per SM, the loads in flight that HBM's latency asks for (~32 KB per SM at ~4 TB/s
    and ~1 us). At M = 1, 8 warps a program,
    and FP8 (`scaled`) in 8-row slabs: the fastest of probe_gemv's variants on most of API.md 8's
    shapes on the H200 (2026-12-02, benchmarks/results/probe_gemv-h200.txt); more rows lost with
    either."""
    k_blocks = triton.cdiv(k, _GRAN_K)
    # More than 2 rows: 256 of K per iteration, so that the rows' products stay in registers
    # (4 rows, 1D1D, 512 of K: 128 registers and a stack frame).
    groups = min(4 if m <= 2 else 2, triton.next_power_of_2(k_blocks))
    block_n = 8 if scaled and m == 1 else 16
    programs = triton.cdiv(n, block_n)
    split_k = max(1, min(triton.cdiv(4 * num_sms, programs), triton.cdiv(k_blocks, groups)))
    return GemvConfig(block_n, groups, split_k, num_warps=8 if m == 1 else 4)


def fp8_gemv(function: str, a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
             d: torch.Tensor, kind: str, accumulate: bool, config: GemvConfig | None = None,
             num_sms: int | None = None) -> None:
    """d (+)= dequant(a) @ dequant(b).T for a validated, non-empty problem with M <= MAX_ROWS.

    a [M, K], b [N, K]: float8_e4m3fn, K-major. sfa: fp32 [M, ceil(K/128)]; sfb: fp32
    [ceil(N/128), ceil(K/128)] ("1d2d") or [N, ceil(K/128)] ("1d1d"); any strides. d [M, N],
    stride(1) == 1. `accumulate`: d already holds c. `config`: forced (tests, probes).
    """
    _launch(function, "FP8", a, sfa, b, sfb, d, True, kind == "1d1d", accumulate, config, num_sms)


def bf16_gemv(function: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, accumulate: bool,
              config: GemvConfig | None = None, num_sms: int | None = None) -> None:
    """d (+)= a @ b.T for a validated, non-empty problem with M <= MAX_ROWS: a [M, K], b [N, K]
    bf16, K-major; d [M, N] bf16 or fp32, stride(1) == 1; `accumulate`: d already holds c."""
    _launch(function, "BF16", a, a, b, b, d, False, False, accumulate, config, num_sms)


def _launch(function, what, a, sfa, b, sfb, d, scaled, sfb_per_row, accumulate, config, num_sms):
    m, k = a.shape
    n = b.shape[0]
    if not 1 <= m <= MAX_ROWS:
        raise ValueError(f"{function}: the {what} GEMV takes 1 to {MAX_ROWS} rows of A, got {m}")
    if any(t.stride(1) != 1 and t.size(1) > 1 for t in (a, b, d)):
        raise ValueError(f"{function}: the {what} GEMV needs K-major a and b and an N-major d, got "
                         f"strides a {tuple(a.stride())}, b {tuple(b.stride())}, d {tuple(d.stride())}")
    if config is None:
        if num_sms is None:   # set_num_sms's limit, as the tensor-core kernels take it
            num_sms = (settings._num_sms or settings.device_sm_count(d.device.index)
                       if d.device.type == "cuda" else 1)
        config = choose_config(m, n, k, num_sms, scaled)
        dispatch.print_config_once(function, (m, n, k), d.device, config)
    k_blocks = triton.cdiv(k, _GRAN_K)
    k_blocks_per_split = triton.cdiv(k_blocks, config.split_k)
    splits = triton.cdiv(k_blocks, k_blocks_per_split)   # no empty slice
    programs = triton.cdiv(n, config.block_n)
    if splits > 1:
        # The split-K scratch the SM90 kernels use (split_scratch): no fill kernel when captured.
        stream = torch.cuda.current_stream(d.device).cuda_stream if d.device.type == "cuda" else None
        scratch = split_scratch.scratch_for(d.device, stream)
        scratch.pointers(splits * m * n, programs)
        workspace, counters = scratch.workspace, scratch.counters
    else:
        workspace = counters = d   # unread
    _gemv_kernel[(programs, splits)](
        a, sfa, b, sfb, d, workspace, counters, m, n, k, k_blocks_per_split, splits,
        a.stride(0), b.stride(0), sfa.stride(0), sfa.stride(1), sfb.stride(0), sfb.stride(1),
        d.stride(0), ROWS=triton.next_power_of_2(m), BLOCK_N=config.block_n, GROUPS=config.groups,
        SCALED=scaled, SFB_PER_ROW=sfb_per_row, ACCUMULATE=accumulate, SPLIT=splits > 1,
        num_warps=config.num_warps)

