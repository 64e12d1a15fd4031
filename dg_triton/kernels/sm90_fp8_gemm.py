"""Host side of the SM90 FP8 GEMM with fine-grained scaling (cuda_kernels/sm90/fp8_gemm.cuh):
kernel source for a config, TMA descriptors, and the cached launch plan per problem.

The public layer (dg_triton/fp8_gemm.py) validates, resolves the recipe, brings the scale
factors into the layouts below, and calls `run` with an `Fp8GemmProblem`. The first call of a
problem builds a `_Plan` (config, JIT-compiled kernel, descriptors, launcher); later calls read
the data pointers, look up their descriptors and launch.
"""
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from dg_triton import dispatch, settings
from dg_triton.dispatch import print_config_once
from dg_triton.env import env_flag
from dg_triton.errors import reject
from dg_triton.heuristics.sm90 import (DEFAULT_L2_GROUP, Bf16GemmConfig, b_evict_first,
                                      choose_fp8_gemm_config, fp8_gemm_shared_memory,
                                      fp8_overlaps_promotion)
from dg_triton.jit import compiler, sass_yield, tma
from dg_triton.jit.module import TMA, U32, U64, Kernel, Launcher
from dg_triton.kernels.sm90_bf16_gemm import (_build_suffix, _compiled_dims, _current_stream,
                                              _define_lines, _load_source, _output_params,
                                              split_k_arguments)

KERNEL_SYMBOL = "sm90_fp8_gemm"
_OUT_TYPES = {torch.bfloat16: "__nv_bfloat16", torch.float32: "float"}
SCALE_GROUP = 128


class Fp8GemmProblem(NamedTuple):
    """A validated logical NT FP8 problem, ready for the SM90 kernel.

    kind: "1d2d" - sfa per 1x128 (per row, per 128 of K), sfb per 128x128 block; bf16 D, no c.
          "1d1d" - sfa and sfb both per 1x128; fp32 D; c accumulation allowed (wgrad).
    head_splits: None, or (left, mid, right) for fp8_gemm_nt_skip_head_mid (API.md 3.3): the
          logical D is [M, N] and column n lands at n + (n + right) // (left + right) * mid of the
          physical d; the mid columns are never written.
    layout: a hashable key of everything else a cached launch plan depends on
          (d.dtype, a.stride(), b.stride(), d.stride(), sfa.stride(), sfb.stride()).
    """
    m: int
    n: int
    k: int
    kind: str
    device_index: int
    head_splits: tuple | None
    layout: tuple


@dataclass(frozen=True)
class Fp8GemmKernelSpec:
    """Everything compiled into one kernel binary."""
    config: Bf16GemmConfig        # the tile/pipeline config type is shared with the BF16 kernel
    scale_b_per_column: bool      # "1d1d"
    out_dtype: torch.dtype
    accumulate: bool
    shape_m: int = 0              # 0: passed at run time (compiled_dims)
    shape_n: int = 0
    shape_k: int = 0
    probe_defines: tuple = ()     # macros of probe builds (benchmarks/probe_fp8.py); never set by the API
    b_evict_first: bool = False   # B's loads under L2 evict-first (heuristics.sm90.b_evict_first)

    @property
    def name(self) -> str:
        c = self.config
        kind = "1d1d" if self.scale_b_per_column else "1d2d"
        out = "bf16" if self.out_dtype == torch.bfloat16 else "fp32"
        return (f"sm90_fp8_gemm_{kind}_{c.block_m}x{c.block_n}_s{c.num_stages}_{out}"
                f"{'_acc' if self.accumulate else ''}{'_splitk' if self.split_k else ''}"
                f"{'_sk' if c.stream_k else ''}"
                f"{f'_c{c.cluster_n}' if c.cluster_n > 1 else ''}"
                f"{f'_cm{c.cluster_m}' if c.cluster_m > 1 else ''}"
                f"{f'_g{c.group_m}' if c.group_m != DEFAULT_L2_GROUP else ''}"
                f"{_build_suffix(self.probe_defines, self.b_evict_first)}")

    @property
    def ffma_yield(self) -> str | None:
        """The sass_yield policy applied to the compiled binary (None: ptxas's own hints).

        1D1D tiles too wide for two partial sets (block N > 112): "front". Their promotion (an
        FMUL and an FFMA an element after a full wgmma wait, the tensor core idle unless the other
        warpgroup has work) ran 1-13 % faster on the H200's four M=4096 probe shapes with the first
        half of each FFMA run yielding than with ptxas's every-other hints. Tiles that overlap the
        promotion with the next block's wgmmas (1D1D up to 112 columns, 1D2D up to 128) ran 0.5-3 %
        slower with it, so they and all 1D2D keep ptxas's (benchmarks/NOTES.md, session 16).
        DG_JIT_DISABLE_FFMA_INTERLEAVE=1 (DeepGEMM's switch of its own such pass) turns it off; a
        probe build names its policy (DG_PROBE_FFMA_YIELD_<POLICY>, _PTXAS for none)."""
        if "DG_PROBE_FFMA_YIELD_PTXAS" in self.probe_defines:
            return None
        for policy in sass_yield.POLICIES:
            if f"DG_PROBE_FFMA_YIELD_{policy.upper()}" in self.probe_defines:
                return policy
        if self.scale_b_per_column and not fp8_overlaps_promotion("1d1d", self.config.block_n) \
                and not env_flag("DG_JIT_DISABLE_FFMA_INTERLEAVE"):
            return "front"
        return None

    @property
    def split_k(self) -> bool:
        return self.config.num_splits > 1

    @property
    def shared_memory(self) -> int:
        c = self.config
        return fp8_gemm_shared_memory("1d1d" if self.scale_b_per_column else "1d2d", c.block_m,
                                      c.block_n, c.num_stages, torch.finfo(self.out_dtype).bits // 8,
                                      self.split_k, self.accumulate)

    def source(self) -> str:
        c = self.config
        flag = lambda value: "true" if value else "false"  # noqa: E731
        return f'''// {self.name}
{_define_lines(self.probe_defines, self.b_evict_first)}#include "sm90/fp8_gemm.cuh"

using Traits = dg::sm90::Fp8GemmTraits<
    {c.block_m}, {c.block_n}, {c.num_stages}, {flag(self.scale_b_per_column)},
    {_OUT_TYPES[self.out_dtype]}, {flag(self.accumulate)}, {flag(self.split_k)}, {c.group_m}, {c.cluster_m}, {c.cluster_n},
    {self.shape_m}, {self.shape_n}, {self.shape_k}, {flag(c.stream_k)}>;
// The host asks for exactly this much shared memory (heuristics.sm90.fp8_gemm_shared_memory).
static_assert(Traits::kSmemBytes == {self.shared_memory}, "host and kernel disagree on shared memory");

extern "C" __global__ void __launch_bounds__(Traits::kNumThreads, 1)
{KERNEL_SYMBOL}(const __grid_constant__ dg::TmaDescriptor tma_a,
               const __grid_constant__ dg::TmaDescriptor tma_b,
               const __grid_constant__ dg::TmaDescriptor tma_d,
               const __grid_constant__ dg::TmaDescriptor tma_sfa,
               const __grid_constant__ dg::TmaDescriptor tma_sfb,
               uint32_t shape_m, uint32_t shape_n, uint32_t shape_k,
               uint32_t ld_sfb, uint32_t head_left, uint32_t head_mid, uint32_t head_right,
               uint32_t num_splits, float* workspace, uint32_t* counters, uint32_t ld_d,
               const float* sfb, void* d) {{
    const dg::sm90::Fp8ScaleArguments scales{{sfb, ld_sfb, head_left, head_mid, head_right, 0}};
    const dg::sm90::Fp8SplitArguments split{{num_splits, workspace, counters, d, ld_d}};
    dg::sm90::fp8_gemm_body<Traits>(tma_a, tma_b, tma_d, tma_sfa, tma_sfb, shape_m, shape_n,
                                    shape_k, scales, split);
}}
'''


def compile_spec(spec: Fp8GemmKernelSpec, arch: str = "sm_90a") -> compiler.CompiledKernel:
    return compiler.compile_kernel(spec.name, spec.source(), arch, spec.ffma_yield)


def _operand_params(rows: int, k: int, row_stride: int, block_rows: int,
                    multicast: int = 1) -> tma.Tma2dParams:
    """A K-major [rows, K] E4M3 operand in boxes of [block_rows / multicast][128 of K]."""
    row_bytes = row_stride if rows > 1 else -(-k // 16) * 16
    return tma.Tma2dParams(1, k, rows, row_bytes, SCALE_GROUP, block_rows // multicast,
                           tma.SWIZZLE_128B)


def _scale_params(mn: int, k: int, ld: int, block: int) -> tma.Tma2dParams:
    """An MN-major FP32 scale tensor [ceil(K/128) rows][MN] (row stride ld floats) in boxes of one
    K block's `block` consecutive scales."""
    k_blocks = -(-k // SCALE_GROUP)
    row_bytes = ld * 4 if k_blocks > 1 else -(-mn // 4) * 16
    return tma.Tma2dParams(4, mn, k_blocks, row_bytes, block, 1, tma.SWIZZLE_NONE)


class _Plan:
    __slots__ = ("launcher", "scalars", "spec", "split", "tma_a", "tma_b", "tma_d", "tma_sfa", "tma_sfb")

    def __init__(self, spec, launcher, tma_a, tma_b, tma_d, tma_sfa, tma_sfb, scalars, split):
        self.spec, self.launcher = spec, launcher
        self.tma_a, self.tma_b, self.tma_d = tma_a, tma_b, tma_d
        self.tma_sfa, self.tma_sfb = tma_sfa, tma_sfb   # tma_sfb: 1D1D only
        self.scalars = scalars  # (m, n, k, ld_sfb, left, mid, right, split-K arguments, ld_d)
        self.split = split  # SplitKBuffers of a split-K plan (the stream's workspace), else None


_plans: dict = {}


def b_loads_evict_first(m: int, n: int, k: int, config: Bf16GemmConfig) -> bool:
    """Whether the kernel for this problem and config loads B under L2 evict-first
    (heuristics.sm90.b_evict_first; the kernel has the policy on B tiles one CTA loads)."""
    return config.cluster_m == 1 and b_evict_first(-(-m // config.block_m), n * k)


def _make_plan(function, a, sfa, b, sfb, d, problem: Fp8GemmProblem, accumulate, compiled_dims,
               config, probe_defines=()) -> _Plan:
    m, n, k = problem.m, problem.n, problem.k
    device_index = d.device.index
    num_sms = settings._num_sms or settings.device_sm_count(device_index)
    element = d.element_size()
    left, mid, right = problem.head_splits or (0, 0, 0)
    if problem.head_splits and math.gcd(left, right) % 16:
        # A tile may not straddle a skipped gap, and tiles are multiples of 16 columns wide.
        raise reject(function, "head_splits", "(left, mid, right) with left and right multiples of "
                     "16 (the SM90 kernel's block N granularity)", problem.head_splits)
    if config is None:
        # Skip-head-mid: a tile must lie inside one head's left or right columns.
        config = choose_fp8_gemm_config(m, n, k, element, num_sms, problem.kind,
                                        block_n_divides=math.gcd(left, right) or None,
                                        block_n_multiple=settings._block_size_multiple_of[1])
    if problem.head_splits and (config.num_splits > 1 or config.stream_k):
        raise reject(function, "config", "no split-K or stream-K with head_splits (their store has "
                     "no column remap)", config)
    spec = Fp8GemmKernelSpec(config, problem.kind == "1d1d", d.dtype, accumulate,
                             *_compiled_dims(m, n, k, compiled_dims), probe_defines,
                             b_loads_evict_first(m, n, k, config))
    print_config_once(function, (m, n, k), d.device, spec)
    kernel: Kernel = _load_source(spec.name, spec.source(), device_index, KERNEL_SYMBOL,
                                  spec.ffma_yield)
    launcher = Launcher(kernel, grid=config.num_sms, block=config.num_threads,
                        shared_memory=spec.shared_memory, param_kinds=_PARAM_KINDS,
                        cluster=config.cluster_size, pdl=settings._pdl)
    tma_sfa = tma.DescriptorCache(_scale_params(m, k, sfa.stride(1), config.block_m))
    per_column = problem.kind == "1d1d"
    # the workspace is scalar 8 (after m, n, k, ld_sfb, left, mid, right, num_splits)
    split_args, split = split_k_arguments(config, m, n, -(-k // SCALE_GROUP), d.device, slot=8)
    return _Plan(spec, launcher,
                 tma.DescriptorCache(_operand_params(m, k, a.stride(0), config.block_m, config.cluster_n)),
                 tma.DescriptorCache(_operand_params(n, k, b.stride(0), config.block_n,
                                                     1 if "DG_PROBE_MULTICAST_LEADER" in probe_defines
                                                     else config.cluster_m)),
                 tma.DescriptorCache(_output_params(m, d.size(1), d.stride(0), element, config.block_n)),
                 tma_sfa,
                 tma.DescriptorCache(_scale_params(n, k, sfb.stride(1), config.block_n)) if per_column
                 else tma_sfa,   # 1D2D: the kernel never reads tma_sfb
                 (m, n, k, sfb.stride(1) if per_column else sfb.stride(0), left, mid, right,
                  *split_args, d.stride(0)), split)


# tma_a, tma_b, tma_d, tma_sfa, tma_sfb, m, n, k, ld_sfb, left, mid, right,
# num_splits, workspace, counters, ld_d, sfb, d
_PARAM_KINDS = (TMA, TMA, TMA, TMA, TMA, U32, U32, U32, U32, U32, U32, U32, U32, U64, U64, U32,
                U64, U64)


def run(function: str, a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
        d: torch.Tensor, problem: Fp8GemmProblem, accumulate: bool, compiled_dims: str,
        config: Bf16GemmConfig | None = None, probe_defines: tuple = ()) -> None:
    """D (+)= dequant(A) @ dequant(B)^T on an SM90 GPU for a validated, non-empty problem.

    a: float8_e4m3fn [M, K], K-major (stride(1) == 1), TMA-aligned (16-byte rows and pointer).
    b: float8_e4m3fn [N, K], K-major, TMA-aligned.
    sfa: float32 [M, ceil(K/128)] in the TMA-aligned MN-major layout (strides (1, align(M, 4))).
    sfb: "1d2d": float32 [ceil(N/128), ceil(K/128)], row-major contiguous.
         "1d1d": float32 [N, ceil(K/128)], TMA-aligned MN-major (strides (1, align(N, 4))).
    d: [M, N'] N-major (N' = N, or wider with head_splits); bf16 for "1d2d", fp32 for "1d1d".
    accumulate: d already holds c (the caller copied it) and the kernel adds to it ("1d1d" only).
    config: a forced tile config (tests, sweeps); None lets the heuristics choose.
    probe_defines: kernel macros of probe builds (benchmarks/probe_fp8.py).
    """
    key = (problem, accumulate, compiled_dims, settings._plan_settings, config, probe_defines)
    plan = _plans.get(key)
    if plan is None:
        dispatch.backend(function, d.device, (dispatch.SM90,))
        plan = _plans[key] = _make_plan(function, a, sfa, b, sfb, d, problem, accumulate,
                                        compiled_dims, config, probe_defines)
    sfb_address = sfb.data_ptr()
    sfa_descriptor = plan.tma_sfa(sfa.data_ptr())
    stream = _current_stream(problem.device_index)
    scalars = plan.scalars if plan.split is None else plan.split.scalars(plan.scalars, stream)
    plan.launcher(stream,
                  (plan.tma_a(a.data_ptr()), plan.tma_b(b.data_ptr()), plan.tma_d(d.data_ptr()),
                   sfa_descriptor,
                   # 1D2D: the slot still needs a valid descriptor buffer; the kernel ignores it
                   sfa_descriptor if plan.tma_sfb is plan.tma_sfa else plan.tma_sfb(sfb_address)),
                  *scalars, sfb_address, d.data_ptr())
