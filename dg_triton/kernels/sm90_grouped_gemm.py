"""Host side of the SM90 M-grouped BF16 GEMMs: the dense BF16 kernel (cuda_kernels/sm90/bf16_gemm.cuh)
with a grouped tile scheduler (cuda_kernels/sm90/scheduler_grouped.cuh), API.md 3.4 and 3.5.

Operands go to the kernel as 2-D TMA descriptors: A and D as [M, K] / [M, N] (contiguous) or
[G * max_m, K] / [G * max_m, N] (masked), B as [G * N, K] (K-major) or [G * K, N] (MN-major, the
`nn` layout); the scheduler offsets B by the group it reads on the device (grouped_layout or
masked_m, never read here), so every call is capturable in a CUDA graph.

Like sm90_bf16_gemm, the first call of a problem builds a `_Plan` (config, kernel, descriptor
caches, launcher); a warm call looks its descriptors up by the data pointers grouped.py read and
launches. Plans are keyed by the call's signature, which grouped.py builds for its own checks.
`run_contiguous` and `run_masked` return False, before any work, for the problems the kernel does
not take (an mk alignment no block M divides, an MN-major B whose K is not a multiple of 64, groups
not densely packed); the caller then takes the portable path.

The M-grouped FP8 GEMMs (run_fp8_contiguous, run_fp8_masked, at the end) run the FP8 kernel
(fp8_gemm.cuh, 1D2D) with the same schedulers; they differ in the traits, the scale-factor
descriptor and the B scales' group stride.
"""
from dataclasses import dataclass

import torch

from dg_triton import settings
from dg_triton.dispatch import print_config_once
from dg_triton.errors import reject
from dg_triton.heuristics.sm90 import (GROUPED_CONTIGUOUS, GROUPED_MASKED, Bf16GemmConfig,
                                       b_evict_first, bf16_gemm_shared_memory, choose_m_grouped_bf16_config,
                                       choose_m_grouped_fp8_config, fp8_gemm_shared_memory,
                                       fp8_split_columns_shared_memory)
from dg_triton.jit import tma
from dg_triton.jit.module import TMA, U32, U64, Launcher
from dg_triton.kernels.sm90_bf16_gemm import (_build_suffix, _compiled_dims, _current_stream,
                                              _define_lines, _load_source, _operand_params,
                                              _output_params)
from dg_triton.kernels.sm90_fp8_gemm import SCALE_GROUP
from dg_triton.kernels.sm90_fp8_gemm import _operand_params as _fp8_operand_params
from dg_triton.kernels.sm90_fp8_gemm import _scale_params as _fp8_scale_params

KERNEL_SYMBOL = "sm90_m_grouped_bf16_gemm"
# The layouts: contiguous with per-row group ids, contiguous with per-group end rows, masked.
INDEX, PSUM, MASKED = "index", "psum", "masked"
_BLOCK_K = 64


def _scheduler_source(layout: str, c: Bf16GemmConfig, b_k_major: str, zero_gaps: str) -> tuple[str, str]:
    """The grouped scheduler's C++ type and constructor arguments (names of the kernel's
    parameters and locals) for a layout; `zero_gaps`: the expression for the psum gap rule."""
    if layout == MASKED:
        return (f"dg::sm90::MaskedGroupedScheduler<{c.block_m}, {c.block_n}, {c.group_m}, {b_k_major}>",
                "layout, num_groups, shape_m, n, k, num_k_blocks")
    psum = "true" if layout == PSUM else "false"
    return (f"dg::sm90::ContiguousGroupedScheduler<{c.block_m}, {c.block_n}, {c.group_m}, "
            f"{b_k_major}, {psum}>",
            f"layout, num_groups, shape_m, n, k, num_k_blocks, mk_alignment, {zero_gaps}")


@dataclass(frozen=True)
class GroupedGemmKernelSpec:
    """Everything compiled into one grouped kernel binary (D is bf16, A K-major)."""
    config: Bf16GemmConfig
    layout: str           # INDEX, PSUM or MASKED
    b_k_major: bool = True
    shape_n: int = 0      # 0: passed at run time (compiled_dims)
    shape_k: int = 0
    probe_defines: tuple = ()  # macros of probe builds (benchmarks/probe_grouped_tiles.py); never set by the API

    @property
    def name(self) -> str:
        c = self.config
        return (f"sm90_m_grouped_bf16_gemm_{self.layout}_{c.block_m}x{c.block_n}_s{c.num_stages}"
                f"_{'k' if self.b_k_major else 'n'}{_build_suffix(self.probe_defines)}")

    @property
    def shared_memory(self) -> int:
        c = self.config
        return bf16_gemm_shared_memory(c.block_m, c.block_n, c.num_stages, 2)

    def source(self) -> str:
        c = self.config
        assert not c.split_columns, "column-split tiles are an FP8 kernel's (GroupedFp8GemmKernelSpec)"
        b_k_major = "true" if self.b_k_major else "false"
        scheduler, scheduler_args = _scheduler_source(self.layout, c, b_k_major, "zero_gaps")
        return f'''// {self.name}
{_define_lines(self.probe_defines)}#include "sm90/bf16_gemm.cuh"
#include "sm90/scheduler_grouped.cuh"

using Traits = dg::sm90::Bf16GemmTraits<
    {c.block_m}, {c.block_n}, {c.num_stages}, true, {b_k_major}, __nv_bfloat16, false, false,
    {c.group_m}, 1, 1, 0, {self.shape_n}, {self.shape_k}>;
using Scheduler = {scheduler};
static_assert(Traits::kSmemBytes == {self.shared_memory}, "host and kernel disagree on shared memory");

// shape_m: M (contiguous) or max_m (masked); layout: grouped_layout or masked_m; d and ld_d: D for
// the rows a TMA box cannot store alone (RowLimitedStoreEpilogue).
extern "C" __global__ void __launch_bounds__(Traits::kNumThreads, 1)
{KERNEL_SYMBOL}(const __grid_constant__ dg::TmaDescriptor tma_a,
                const __grid_constant__ dg::TmaDescriptor tma_b,
                const __grid_constant__ dg::TmaDescriptor tma_d,
                uint32_t shape_m, uint32_t shape_n, uint32_t shape_k, uint32_t num_groups,
                uint32_t mk_alignment, uint32_t zero_gaps, uint32_t ld_d, const int32_t* layout,
                void* d) {{
    const uint32_t n = Traits::kShapeN ? Traits::kShapeN : shape_n;
    const uint32_t k = Traits::kShapeK ? Traits::kShapeK : shape_k;
    const uint32_t num_k_blocks = (k + Traits::kBlockK - 1) / Traits::kBlockK;
    const dg::sm90::SplitKArguments out{{1, nullptr, nullptr, d, ld_d}};
    dg::sm90::bf16_gemm_run<Traits, Scheduler>(tma_a, tma_b, tma_d, shape_m, n, 1, out,
                                               {scheduler_args});
}}
'''


def compile_spec(spec: GroupedGemmKernelSpec, arch: str = "sm_90a"):
    from dg_triton.jit import compiler
    return compiler.compile_kernel(spec.name, spec.source(), arch)


# tma_a, tma_b, tma_d, shape_m, n, k, num_groups, mk_alignment, zero_gaps, ld_d, layout, d
_PARAM_KINDS = (TMA, TMA, TMA, U32, U32, U32, U32, U32, U32, U32, U64, U64)


class _Plan:
    __slots__ = ("spec", "launcher", "tma_a", "tma_b", "tma_d", "scalars", "device_index")

    def __init__(self, spec, launcher, tma_a, tma_b, tma_d, scalars, device_index):
        self.spec, self.launcher = spec, launcher
        self.tma_a, self.tma_b, self.tma_d = tma_a, tma_b, tma_d
        self.scalars = scalars  # shape_m .. ld_d
        self.device_index = device_index  # part of the plan key: no device read per call


_plans: dict = {}
_UNSUPPORTED = object()  # a cached "the kernel does not take this problem"


def _b_view(b: torch.Tensor, num_groups: int, n: int, k: int):
    """B [G, N, K] (any major per group) as (rows, k, strides, k_major) of one 2-D operand over all
    groups, or None when the groups do not stack into one (not densely packed, or an MN-major B
    whose K blocks would cross into the next group)."""
    s_group, s_n, s_k = b.stride()
    if s_k == 1 or k == 1:
        if num_groups > 1 and s_group != n * s_n:
            return None
        return num_groups * n, k, (s_n, 1), True
    if s_n == 1 and k % _BLOCK_K == 0 and (num_groups == 1 or s_group == k * s_k):
        return n, num_groups * k, (1, s_k), False
    return None


def _make_plan(function, layout, a, b, d, num_groups, rows, n, k, b_view, mk_alignment, zero_gaps,
               rows_per_group, compiled_dims):
    """`rows`: M (contiguous) or max_m (masked); A's and D's descriptors cover `rows` x G (masked)."""
    device_index = d.device.index
    num_sms = settings._num_sms or settings.device_sm_count(device_index)
    b_rows, b_k, b_strides, b_k_major = b_view
    masked = layout == MASKED
    kind = GROUPED_MASKED if masked else GROUPED_CONTIGUOUS
    config = choose_m_grouped_bf16_config(kind, num_groups, rows_per_group, rows, n, k, num_sms,
                                          mk_alignment, b_k_major, settings._block_size_multiple_of[1])
    if config is None:
        return _UNSUPPORTED
    _, shape_n, shape_k = _compiled_dims(0, n, k, compiled_dims)
    spec = GroupedGemmKernelSpec(config, layout, b_k_major, shape_n, shape_k)
    print_config_once(function, (num_groups, rows, n, k), d.device, spec)
    kernel = _load_source(spec.name, spec.source(), device_index, KERNEL_SYMBOL)
    launcher = Launcher(kernel, grid=config.num_sms, block=config.num_threads,
                        shared_memory=spec.shared_memory, param_kinds=_PARAM_KINDS, pdl=settings._pdl)
    if masked:
        total_rows = num_groups * rows
        a_strides, ld_d = a.stride()[1:], d.stride(1)
    else:
        total_rows, a_strides, ld_d = rows, a.stride(), d.stride(0)
    return _Plan(spec, launcher,
                 tma.DescriptorCache(_operand_params(total_rows, k, a_strides, True, config.block_m)),
                 tma.DescriptorCache(_operand_params(b_rows, b_k, b_strides, b_k_major, config.block_n,
                                                     split_atoms_by_k=True)),
                 tma.DescriptorCache(_output_params(total_rows, n, ld_d, 2, config.block_n)),
                 (rows, n, k, num_groups, mk_alignment, int(zero_gaps), ld_d), device_index)


def _launch(plan: _Plan, addresses: tuple, layout_tensor: torch.Tensor) -> None:
    a_ptr, b_ptr, d_ptr = addresses
    plan.launcher(_current_stream(plan.device_index),
                  (plan.tma_a(a_ptr), plan.tma_b(b_ptr), plan.tma_d(d_ptr)),
                  *plan.scalars, layout_tensor.data_ptr(), d_ptr)


def run_contiguous(function: str, key: tuple, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                   grouped_layout: torch.Tensor, addresses: tuple, use_psum_layout: bool,
                   ensure_zero_padding: bool, mk_alignment: int, expected_m: int | None,
                   compiled_dims: str) -> bool:
    """The contiguous grouped GEMM of a validated, non-empty problem (grouped.py): a [M, K] K-major,
    b [G, N, K] (either major per group), d [M, N] N-major; `addresses` their data pointers. `key`,
    the call's signature (grouped.py: function first, then every shape, stride, dtype, device,
    argument and setting a plan depends on), keys the plan. False (nothing done) when the kernel
    does not take the problem."""
    plan = _plans.get(key)
    if plan is None:
        m, k = a.shape
        num_groups, n = b.shape[0], b.shape[1]
        b_view = _b_view(b, num_groups, n, k)
        if b_view is None:
            plan = _UNSUPPORTED
        else:
            rows_per_group = expected_m if use_psum_layout and expected_m else -(-m // num_groups)
            plan = _make_plan(function, PSUM if use_psum_layout else INDEX, a, b, d, num_groups, m, n,
                              k, b_view, mk_alignment, ensure_zero_padding, rows_per_group,
                              compiled_dims)
        _plans[key] = plan
    if plan is _UNSUPPORTED:
        return False
    _launch(plan, addresses, grouped_layout)
    return True


def run_masked(function: str, key: tuple, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
               masked_m: torch.Tensor, addresses: tuple, expected_m: int, compiled_dims: str) -> bool:
    """The masked grouped GEMM of a validated problem (grouped.py): a [G, max_m, K], b [G, N, K]
    K-major, d [G, max_m, N] N-major; `addresses` and `key` as for run_contiguous. False (nothing
    done) when the kernel does not take it."""
    plan = _plans.get(key)
    if plan is None:
        num_groups, max_m, k = a.shape
        n = b.shape[1]
        b_view = _b_view(b, num_groups, n, k)
        stacked = num_groups == 1 or (a.stride(0) == max_m * a.stride(1)
                                      and d.stride(0) == max_m * d.stride(1))
        if b_view is None or not b_view[3] or not stacked:
            plan = _UNSUPPORTED
        else:
            plan = _make_plan(function, MASKED, a, b, d, num_groups, max_m, n, k, b_view, 0, False,
                              min(expected_m, max_m), compiled_dims)
        _plans[key] = plan
    if plan is _UNSUPPORTED:
        return False
    _launch(plan, addresses, masked_m)
    return True


# ---- M-grouped FP8 (1D2D): fp8_gemm.cuh with the same schedulers ---------------------------------
# The FP8 kernel's stages carry each K block's A scales by TMA (ScaleTileLoads): sfa is seen as
# [rows: K blocks][columns: M] (contiguous) or [rows: G x K blocks][columns: align(max_m, 4)]
# (masked: each group's TMA-aligned block after the previous one), and the 1D2D B scales are read
# per group from sfb [G, ceil(N/128), ceil(K/128)].
FP8_KERNEL_SYMBOL = "sm90_m_grouped_fp8_gemm"


@dataclass(frozen=True)
class GroupedFp8GemmKernelSpec:
    """Everything compiled into one M-grouped FP8 kernel binary (1D2D, bf16 D, K-major A and B)."""
    config: Bf16GemmConfig
    layout: str           # INDEX, PSUM or MASKED
    shape_n: int = 0      # 0: passed at run time (compiled_dims)
    shape_k: int = 0
    probe_defines: tuple = ()  # macros of probe builds (benchmarks/probe_grouped_tiles.py); never set by the API
    b_evict_first: bool = False   # B's loads under L2 evict-first (heuristics.sm90.b_evict_first)

    @property
    def name(self) -> str:
        c = self.config
        split = "c" if c.split_columns else ""
        return (f"sm90_m_grouped_fp8_gemm_{self.layout}_{c.block_m}x{c.block_n}{split}_s{c.num_stages}"
                f"{_build_suffix(self.probe_defines, self.b_evict_first)}")

    @property
    def shared_memory(self) -> int:
        c = self.config
        if c.split_columns:
            return fp8_split_columns_shared_memory(c.block_n, c.num_stages)
        return fp8_gemm_shared_memory("1d2d", c.block_m, c.block_n, c.num_stages, 2)

    def source(self) -> str:
        c = self.config
        scheduler, scheduler_args = _scheduler_source(self.layout, c, "true", "0")
        return f'''// {self.name}
{_define_lines(self.probe_defines, self.b_evict_first)}#include "sm90/fp8_gemm.cuh"

using Traits = dg::sm90::Fp8GemmTraits<
    {c.block_m}, {c.block_n}, {c.num_stages}, false, __nv_bfloat16, false, false, {c.group_m}, 1, 1,
    0, {self.shape_n}, {self.shape_k}, false, {"true" if c.split_columns else "false"}>;
using Scheduler = {scheduler};
static_assert(Traits::kSmemBytes == {self.shared_memory}, "host and kernel disagree on shared memory");

// shape_m: M (contiguous) or max_m (masked); layout: grouped_layout or masked_m; ld_sfb and
// sfb_group_stride: sfb's row and group strides; d and ld_d: D for RowLimitedStoreEpilogue.
extern "C" __global__ void __launch_bounds__(Traits::kNumThreads, 1)
{FP8_KERNEL_SYMBOL}(const __grid_constant__ dg::TmaDescriptor tma_a,
                const __grid_constant__ dg::TmaDescriptor tma_b,
                const __grid_constant__ dg::TmaDescriptor tma_d,
                const __grid_constant__ dg::TmaDescriptor tma_sfa,
                uint32_t shape_m, uint32_t shape_n, uint32_t shape_k, uint32_t num_groups,
                uint32_t mk_alignment, uint32_t ld_sfb, uint32_t sfb_group_stride, uint32_t ld_d,
                const int32_t* layout, const float* sfb, void* d) {{
    const uint32_t n = Traits::kShapeN ? Traits::kShapeN : shape_n;
    const uint32_t k = Traits::kShapeK ? Traits::kShapeK : shape_k;
    const uint32_t num_k_blocks = (k + Traits::kBlockK - 1) / Traits::kBlockK;
    const dg::sm90::Fp8ScaleArguments scales{{sfb, ld_sfb, 0, 0, 0, sfb_group_stride}};
    const dg::sm90::Fp8SplitArguments out{{1, nullptr, nullptr, d, ld_d}};
    dg::sm90::fp8_gemm_run<Traits, Scheduler>(tma_a, tma_b, tma_d, tma_sfa, tma_sfa, scales, out,
                                              shape_m, n, {"num_k_blocks" if self.layout == MASKED else "0"},
                                              {scheduler_args});
}}
'''


def compile_fp8_spec(spec: GroupedFp8GemmKernelSpec, arch: str = "sm_90a"):
    from dg_triton.jit import compiler
    return compiler.compile_kernel(spec.name, spec.source(), arch)


# tma_a, tma_b, tma_d, tma_sfa, shape_m, n, k, num_groups, mk_alignment, ld_sfb, sfb_group_stride,
# ld_d, layout, sfb, d
_FP8_PARAM_KINDS = (TMA, TMA, TMA, TMA, U32, U32, U32, U32, U32, U32, U32, U32, U64, U64, U64)


class _Fp8Plan:
    __slots__ = ("spec", "launcher", "tma_a", "tma_b", "tma_d", "tma_sfa", "scalars", "device_index")

    def __init__(self, spec, launcher, tma_a, tma_b, tma_d, tma_sfa, scalars, device_index):
        self.spec, self.launcher = spec, launcher
        self.tma_a, self.tma_b, self.tma_d, self.tma_sfa = tma_a, tma_b, tma_d, tma_sfa
        self.scalars = scalars  # shape_m .. ld_d
        self.device_index = device_index


def fp8_b_loads_evict_first(layout: str, num_groups: int, rows_per_group: int, n: int, k: int,
                            config: Bf16GemmConfig) -> bool:
    """Whether the M-grouped FP8 kernel loads B under L2 evict-first (heuristics.sm90.b_evict_first):
    the masked layout's decode sizes, where each expert's weights are read by the CTAs of one or two
    block rows; not the contiguous layouts (not measured)."""
    return layout == MASKED and b_evict_first(-(-rows_per_group // config.block_m), num_groups * n * k)


def _fp8_plan(function, layout, a, sfa, b, sfb, d, num_groups, rows, n, k, mk_alignment,
              rows_per_group, compiled_dims):
    """`rows`: M (contiguous) or max_m (masked)."""
    device_index = d.device.index
    num_sms = settings._num_sms or settings.device_sm_count(device_index)
    masked = layout == MASKED
    config = choose_m_grouped_fp8_config(GROUPED_MASKED if masked else GROUPED_CONTIGUOUS, num_groups,
                                         rows_per_group, rows, n, k, num_sms, mk_alignment)
    if config is None:  # only contiguous layouts can fail here (block M from the mk alignment)
        raise reject(function, "grouped_layout", "an mk alignment divisible by 64 (the SM90 kernel's "
                     "block M)", mk_alignment)
    _, shape_n, shape_k = _compiled_dims(0, n, k, compiled_dims)
    spec = GroupedFp8GemmKernelSpec(
        config, layout, shape_n, shape_k,
        b_evict_first=fp8_b_loads_evict_first(layout, num_groups, rows_per_group, n, k, config))
    print_config_once(function, (num_groups, rows, n, k), d.device, spec)
    kernel = _load_source(spec.name, spec.source(), device_index, FP8_KERNEL_SYMBOL)
    launcher = Launcher(kernel, grid=config.num_sms, block=config.num_threads,
                        shared_memory=spec.shared_memory, param_kinds=_FP8_PARAM_KINDS,
                        pdl=settings._pdl)
    k_blocks = -(-k // SCALE_GROUP)
    if masked:
        # The groups stacked as one [G * max_m, .] view: row stride stride(0) / max_m, exact since
        # the groups are densely packed (validated). stride(1) would be wrong for max_m == 1,
        # where torch lets that dimension carry any stride (e.g. a transposed [1, G, K]).
        total_rows = num_groups * rows
        a_row_stride = a.stride(0) // rows if num_groups > 1 else a.stride(1)
        ld_d = d.stride(0) // rows if num_groups > 1 else d.stride(1)
        # [G, max_m, K/128] with strides (K/128 * ld, 1, ld): G x K/128 rows of ld floats.
        sfa_params = tma.Tma2dParams(4, rows, num_groups * k_blocks, sfa.stride(2) * 4,
                                     config.block_m, 1, tma.SWIZZLE_NONE)
    else:
        total_rows, a_row_stride, ld_d = rows, a.stride(0), d.stride(0)
        sfa_params = _fp8_scale_params(rows, k, sfa.stride(1), config.block_m)
    return _Fp8Plan(spec, launcher,
                    tma.DescriptorCache(_fp8_operand_params(total_rows, k, a_row_stride, config.block_m)),
                    tma.DescriptorCache(_fp8_operand_params(num_groups * n, k, b.stride(1), config.block_n)),
                    # (D's boxes: one warpgroup's columns, half the tile's for a column split)
                    tma.DescriptorCache(_output_params(total_rows, n, ld_d, 2, config.block_n //
                                                       (2 if config.split_columns else 1))),
                    tma.DescriptorCache(sfa_params),
                    (rows, n, k, num_groups, mk_alignment, sfb.stride(1), sfb.stride(0), ld_d),
                    device_index)


_fp8_plans: dict = {}


def _fp8_launch(plan: _Fp8Plan, a, sfa, b, sfb, d, layout_tensor) -> None:
    d_ptr = d.data_ptr()
    plan.launcher(_current_stream(plan.device_index),
                  (plan.tma_a(a.data_ptr()), plan.tma_b(b.data_ptr()), plan.tma_d(d_ptr),
                   plan.tma_sfa(sfa.data_ptr())),
                  *plan.scalars, layout_tensor.data_ptr(), sfb.data_ptr(), d_ptr)


def run_fp8_contiguous(function: str, key: tuple, a, sfa, b, sfb, d, grouped_layout, num_groups: int,
                       use_psum_layout: bool, mk_alignment: int, compiled_dims: str,
                       expected_m: int | None = None) -> None:
    """The contiguous M-grouped FP8 GEMM (1D2D) of a validated, non-empty problem: a fp8 [M, K]
    K-major; sfa fp32 [M, ceil(K/128)] TMA-aligned MN-major (strides (1, align(M, 4))); b fp8
    [G, N, K] contiguous; sfb fp32 [G, ceil(N/128), ceil(K/128)] contiguous; d bf16 [M, N] N-major;
    grouped_layout int32 [M] (per-row group, -1 padding) or [G] (psum end rows). expected_m (psum:
    expected_m_for_psum_layout) sizes the config instead of M / G when given. `key`: the call's
    signature (grouped_fp8.py; it holds everything the plan depends on, the caller's scale-factor
    layouts included, which fix the ones passed here), keys the plan, as for the BF16 kernels."""
    plan = _fp8_plans.get(key)
    if plan is None:
        layout = PSUM if use_psum_layout else INDEX
        m, k = a.shape
        n = b.shape[1]
        plan = _fp8_plans[key] = _fp8_plan(function, layout, a, sfa, b, sfb, d, num_groups, m, n, k,
                                           mk_alignment, expected_m or -(-m // num_groups), compiled_dims)
    _fp8_launch(plan, a, sfa, b, sfb, d, grouped_layout)


def run_fp8_masked(function: str, key: tuple, a, sfa, b, sfb, d, masked_m, expected_m: int,
                   compiled_dims: str) -> None:
    """The masked M-grouped FP8 GEMM (1D2D) of a validated problem: a fp8 [G, max_m, K] K-major
    with densely packed groups; sfa fp32 [G, max_m, ceil(K/128)] with strides
    (ceil(K/128) * align(max_m, 4), 1, align(max_m, 4)); b, sfb as run_fp8_contiguous; d bf16
    [G, max_m, N] N-major, densely packed groups; masked_m int32 [G] on the device; `key` as for
    run_fp8_contiguous."""
    plan = _fp8_plans.get(key)
    if plan is None:
        num_groups, max_m, k = a.shape
        n = b.shape[1]
        plan = _fp8_plans[key] = _fp8_plan(function, MASKED, a, sfa, b, sfb, d, num_groups, max_m, n,
                                           k, 0, min(expected_m, max_m), compiled_dims)
    _fp8_launch(plan, a, sfa, b, sfb, d, masked_m)
