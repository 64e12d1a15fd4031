"""Host side of the SM90 k-grouped GEMMs (API.md 3.6; cuda_kernels/sm90/scheduler_k_grouped.cuh):
the FP8 1D1D kernel (fp32 D += A @ B^T) and the BF16 kernel (A and B MN-major, fp32 or bf16 D += A @
B^T) over the tiles of up to MAX_GROUPS_PER_LAUNCH groups in one persistent launch.

Each group's A, B and D descriptors travel in the kernel's parameters, as one KGroupedOperands
struct (a by-value parameter the launcher points at, like a single TMA descriptor); FP8's scale
factors are one descriptor each over all groups' K blocks. A plan per problem (M, N, the group
sizes, layouts) holds the config, the kernel and the descriptor caches; per call, the packed
parameter structs are looked up by the operands' addresses (benchmark loops and graph replays hit)
and built on a miss. Nothing is read from the device, so a call can be captured in a CUDA graph
(after a warm call has compiled the kernel): the graph keeps the parameters it was captured with.
"""
import ctypes
import dataclasses
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dg_triton import settings
from dg_triton.dispatch import print_config_once
from dg_triton.heuristics.sm90 import (BLOCK_K_BF16, DEFAULT_L2_GROUP, Bf16GemmConfig,
                                       bf16_gemm_candidates, bf16_gemm_shared_memory,
                                       choose_fp8_gemm_config, epilogue_chunk_cols, estimate_cycles,
                                       fp8_gemm_shared_memory, fp8_scale_stage_bytes, make_config,
                                       make_fp8_config, with_l2_group, with_pipeline_depth)
from dg_triton.jit import compiler, tma
from dg_triton.jit.module import TMA, U32, Launcher
from dg_triton.kernels.sm90_bf16_gemm import (_OUT_TYPES, _build_suffix, _current_stream, _define_lines,
                                             _load_source, _output_params, layout_tag)
from dg_triton.kernels.sm90_bf16_gemm import _operand_params as _bf16_operand_params
from dg_triton.kernels.sm90_fp8_gemm import (SCALE_GROUP, Fp8GemmKernelSpec, _operand_params,
                                             _scale_params)

KERNEL_SYMBOL = "sm90_k_grouped_fp8_gemm"
BF16_KERNEL_SYMBOL = "sm90_k_grouped_bf16_gemm"
# Groups per launch: the parameter struct holds three 128-byte descriptors a group (6.2 KB at 16,
# within the 32 KB CUDA allows kernel parameters since 12.1); more groups take several launches.
MAX_GROUPS_PER_LAUNCH = 16
# fp8_gemm.cuh's staggered warpgroups: warpgroup 1 starts its first tile this many K blocks after
# warpgroup 0, so that their epilogues (an FP32 c load and store after a short K loop) overlap the
# other's wgmmas rather than each other. 2 ran 0 to +4.9 % against 0 on the six bench_grouped shapes
# (an H100, NOTES.md session 33).
K_GROUPED_FP8_STAGGER_BLOCKS = 2
_DESCRIPTOR_BYTES = 128


def operands_bytes(max_groups: int) -> int:
    """sizeof(KGroupedOperands<max_groups>): three descriptor arrays, then max_groups + 1 uint32
    K-block starts, padded to the descriptors' 64-byte alignment."""
    return -(-(3 * max_groups * _DESCRIPTOR_BYTES + 4 * (max_groups + 1)) // 64) * 64


def launch_chunks(ks: list[int], starts: list[int], max_groups: int = MAX_GROUPS_PER_LAUNCH):
    """The launches of a call: lists of (group, k, start) of the groups with K blocks, at most
    max_groups each, in group order (empty groups keep d[g] = c[g] and are not launched)."""
    groups = [(g, k, start) for g, (k, start) in enumerate(zip(ks, starts)) if k > 0]
    return [groups[i:i + max_groups] for i in range(0, len(groups), max_groups)]


def k_block_starts(chunk, max_groups: int, block_k: int = SCALE_GROUP) -> list[int]:
    """KGroupedOperands::k_block_start of one launch: group j's K blocks (of block_k: FP8 128,
    BF16 64) among all groups' are [starts[j], starts[j + 1]); unused slots repeat the end."""
    starts = [start // block_k for _, _, start in chunk]
    end = (chunk[-1][2] + chunk[-1][1]) // block_k
    return starts + [end] * (max_groups + 1 - len(starts))


@dataclass(frozen=True)
class KGroupedFp8GemmKernelSpec:
    """Everything compiled into one k-grouped FP8 kernel binary (1D1D, fp32 D accumulated)."""
    config: Bf16GemmConfig
    max_groups: int = MAX_GROUPS_PER_LAUNCH
    probe_defines: tuple = ()   # macros of probe builds (benchmarks/probe_k_grouped.py); never set by the API

    @property
    def name(self) -> str:
        c = self.config
        return (f"sm90_k_grouped_fp8_gemm_{c.block_m}x{c.block_n}_s{c.num_stages}_x{self.max_groups}"
                f"{f'_g{c.group_m}' if c.group_m != DEFAULT_L2_GROUP else ''}"
                f"{_build_suffix(self.probe_defines)}")

    @property
    def ffma_yield(self) -> str | None:
        """The dense 1D1D kernel's policy for the same tile (Fp8GemmKernelSpec.ffma_yield)."""
        return Fp8GemmKernelSpec(self.config, True, torch.float32, True).ffma_yield

    @property
    def shared_memory(self) -> int:
        c = self.config
        return fp8_gemm_shared_memory("1d1d", c.block_m, c.block_n, c.num_stages, 4, accumulate=True)

    def source(self) -> str:
        c = self.config
        return f'''// {self.name}
{_define_lines(self.probe_defines)}#include "sm90/fp8_gemm.cuh"
#include "sm90/scheduler_k_grouped.cuh"

using Traits = dg::sm90::Fp8GemmTraits<
    {c.block_m}, {c.block_n}, {c.num_stages}, true, float, true, false, {c.group_m}, 1, 1, 0, 0, 0,
    false, false, {K_GROUPED_FP8_STAGGER_BLOCKS}>;
using Operands = dg::sm90::KGroupedOperands<{self.max_groups}>;
using Scheduler = dg::sm90::KGroupedTileScheduler<{c.block_m}, {c.block_n}, {c.group_m}, {self.max_groups}>;
static_assert(Traits::kSmemBytes == {self.shared_memory}, "host and kernel disagree on shared memory");
static_assert(sizeof(Operands) == {operands_bytes(self.max_groups)}, "host and kernel disagree on the operands struct");

// groups: the launch's groups (their descriptors and K blocks); tma_sfa / tma_sfb: sfa [M] and
// sfb [N] per K block over all groups' K; D is clipped to shape_m x shape_n per group.
extern "C" __global__ void __launch_bounds__(Traits::kNumThreads, 1)
{KERNEL_SYMBOL}(const __grid_constant__ Operands groups,
               const __grid_constant__ dg::TmaDescriptor tma_sfa,
               const __grid_constant__ dg::TmaDescriptor tma_sfb,
               uint32_t num_groups, uint32_t shape_m, uint32_t shape_n) {{
    const dg::sm90::Fp8ScaleArguments scales{{nullptr, 0, 0, 0, 0, 0}};
    const dg::sm90::Fp8SplitArguments split{{1, nullptr, nullptr, nullptr, 0}};
    dg::sm90::fp8_gemm_run<Traits, Scheduler>(groups.a[0], groups.b[0], groups.d[0], tma_sfa, tma_sfb,
                                              scales, split, shape_m, shape_n, 0,
                                              &groups, num_groups, shape_m, shape_n);
}}
'''


@dataclass(frozen=True)
class KGroupedBf16GemmKernelSpec:
    """Everything compiled into one k-grouped BF16 kernel binary (D += c). A group's [M, k_g] A
    and [N, k_g] B are MN-major, but K-major where M (N) is 1: a single row, as the dense GEMM
    reads it (validation._operand_major)."""
    config: Bf16GemmConfig
    out_dtype: torch.dtype
    a_k_major: bool = False
    b_k_major: bool = False
    max_groups: int = MAX_GROUPS_PER_LAUNCH
    probe_defines: tuple = ()   # macros of probe builds (bf16_gemm.cuh's DG_PROBE_*); never set by the API
    ffma_yield = None           # (compile_spec: the BF16 kernel has no FFMA chains to rewrite)

    @property
    def name(self) -> str:
        c = self.config
        return (f"sm90_k_grouped_bf16_gemm_{c.block_m}x{c.block_n}_s{c.num_stages}_"
                f"{layout_tag(self.a_k_major, self.b_k_major, self.out_dtype)}"
                f"_x{self.max_groups}"
                f"{f'_g{c.group_m}' if c.group_m != DEFAULT_L2_GROUP else ''}"
                f"{_build_suffix(self.probe_defines)}")

    @property
    def shared_memory(self) -> int:
        c = self.config
        return bf16_gemm_shared_memory(c.block_m, c.block_n, c.num_stages,
                                       torch.finfo(self.out_dtype).bits // 8, False)

    def source(self) -> str:
        c = self.config
        flag = lambda value: "true" if value else "false"  # noqa: E731
        return f'''// {self.name}
{_define_lines(self.probe_defines)}#include "sm90/bf16_gemm.cuh"
#include "sm90/scheduler_k_grouped.cuh"

// D accumulated (d holds c), no split-K, clusters or stream-K.
using Traits = dg::sm90::Bf16GemmTraits<
    {c.block_m}, {c.block_n}, {c.num_stages}, {flag(self.a_k_major)}, {flag(self.b_k_major)}, {_OUT_TYPES[self.out_dtype]}, true,
    false, {c.group_m}, 1, 1, 0, 0, 0>;
using Operands = dg::sm90::KGroupedOperands<{self.max_groups}>;
using Scheduler = dg::sm90::KGroupedTileScheduler<{c.block_m}, {c.block_n}, {c.group_m}, {self.max_groups}>;
static_assert(Traits::kSmemBytes == {self.shared_memory}, "host and kernel disagree on shared memory");
static_assert(sizeof(Operands) == {operands_bytes(self.max_groups)}, "host and kernel disagree on the operands struct");

// groups: the launch's groups (their descriptors and K blocks of 64); D is clipped to
// shape_m x shape_n per group.
extern "C" __global__ void __launch_bounds__(Traits::kNumThreads, 1)
{BF16_KERNEL_SYMBOL}(const __grid_constant__ Operands groups, uint32_t num_groups, uint32_t shape_m,
                         uint32_t shape_n) {{
    const dg::sm90::SplitKArguments split{{1, nullptr, nullptr, nullptr, 0}};
    dg::sm90::bf16_gemm_run<Traits, Scheduler>(groups.a[0], groups.b[0], groups.d[0], shape_m, shape_n, 1,
                                               split, &groups, num_groups, shape_m, shape_n);
}}
'''


def compile_spec(spec, arch: str = "sm_90a") -> compiler.CompiledKernel:
    """The binary of a KGroupedFp8GemmKernelSpec or KGroupedBf16GemmKernelSpec."""
    return compiler.compile_kernel(spec.name, spec.source(), arch, spec.ffma_yield)


def _mean_k(ks: list[int], block_k: int) -> int:
    """The mean non-empty k, rounded up to whole K blocks: the dense problem the tile is chosen for."""
    nonempty = [k for k in ks if k > 0]
    return -(-sum(nonempty) // len(nonempty) // block_k) * block_k


def _with_grid(config: Bf16GemmConfig, m: int, n: int, num_groups: int, num_sms: int) -> Bf16GemmConfig:
    """The persistent grid over the tiles of all groups one launch runs."""
    tiles = -(-m // config.block_m) * -(-n // config.block_n)
    return dataclasses.replace(config, num_sms=min(num_sms, tiles * min(num_groups, MAX_GROUPS_PER_LAUNCH)))


def choose_config(m: int, n: int, ks: list[int], num_groups: int, num_sms: int) -> Bf16GemmConfig:
    """The FP8 kernel's: the dense 1D1D heuristics' tile for [M, N, the mean non-empty k], without
    split-K, stream-K or clusters (the k-grouped scheduler has none), the grid over all launched
    groups' tiles; one stage fewer where that lets the epilogue stage whole rows, so that every
    tile's c comes in under its K loop (128x128: 4 stages and whole rows ran 6-8 % faster than 5
    stages and half rows on an H100 at 16 groups of K ~ 2048, NOTES.md session 25)."""
    k = _mean_k(ks, SCALE_GROUP)
    config = choose_fp8_gemm_config(m, n, k, 4, num_sms, "1d1d")
    if config.num_splits > 1 or config.stream_k or config.cluster_size > 1:
        config = make_fp8_config("1d1d", m, n, config.block_m, config.block_n, 1, k, 4, num_sms)
    extra = fp8_scale_stage_bytes("1d1d", config.block_m, config.block_n)
    staged = lambda stages: epilogue_chunk_cols(config.block_m, config.block_n, stages, 4, extra,  # noqa: E731
                                                accumulate=True)
    if staged(config.num_stages) < config.block_n and config.num_stages > 3 \
            and staged(config.num_stages - 1) == config.block_n:
        config = dataclasses.replace(config, num_stages=config.num_stages - 1)
    return _with_grid(config, m, n, num_groups, num_sms)


# Where the cost model rates a smaller BF16 tile at most this much faster than a larger one, the
# larger is taken: the model rates 128x192 and 128x256 alike per FLOP, but at 4 groups of
# 4096x7168 (k ~ 8600) 128x256 ran 5.6 % faster where the model put 128x192 0.9 % ahead (H100,
# NOTES.md session 26).
LARGER_TILE_MARGIN = 0.03


def choose_bf16_config(m: int, n: int, ks: list[int], num_groups: int, out_bytes: int, num_sms: int,
                       block_n_multiple: int = 1, b_k_major: bool = False) -> Bf16GemmConfig:
    """The BF16 kernel's: the dense BF16 candidates and cost model for [M, N, the mean non-empty k],
    with the waves counted over the tiles of all the launch's groups (one group's waves are what
    the dense heuristics minimise: at 7168x2048 they pick 128x128, 896 tiles a group, where
    128x256's 448 leave a partial wave; over 4-16 groups the waves even out, and 128x256 ran
    1.19-1.27x faster than 128x128 in one launch on an H100, NOTES.md session 26); no split-K,
    stream-K or clusters; the L2 group and pipeline depth as the dense GEMM's; the grid over all
    launched groups' tiles."""
    k = _mean_k(ks, BLOCK_K_BF16)
    groups = min(num_groups, MAX_GROUPS_PER_LAUNCH)
    scored = []
    for block_m, block_n in bf16_gemm_candidates(m, n, b_k_major, block_n_multiple):
        config = make_config(m, n, block_m, block_n, 1, k, out_bytes, num_sms)
        if config is not None:
            # The groups' rows stacked, each group padded to whole tiles: the launch's tile count.
            stacked_m = groups * -(-m // block_m) * block_m
            scored.append((estimate_cycles(stacked_m, n, k, block_m, block_n, 1, num_sms), config))
    if not scored:
        raise RuntimeError(f"no SM90 BF16 k-grouped config fits shared memory for m={m} n={n} k={k}")
    fastest = min(cycles for cycles, _ in scored)
    _, config = max(((cycles, config) for cycles, config in scored
                     if cycles <= fastest * (1 + LARGER_TILE_MARGIN)),
                    key=lambda item: (item[1].block_m * item[1].block_n, -item[0]))
    config = with_pipeline_depth(with_l2_group(config, m, n, k, 2), n, k, 2, out_bytes)
    return _with_grid(config, m, n, num_groups, num_sms)


# FP8: groups (the KGroupedOperands struct), tma_sfa, tma_sfb, num_groups, shape_m, shape_n
_PARAM_KINDS = (TMA, TMA, TMA, U32, U32, U32)
# BF16: groups, num_groups, shape_m, shape_n
_BF16_PARAM_KINDS = (TMA, U32, U32, U32)


class _Plan:
    """One problem's kernel and descriptor caches. Group g's A, B and D start at a_step * start_g,
    b_step * start_g and d_step * g bytes from their buffers' starts; its K blocks are of block_k."""
    __slots__ = ("spec", "launcher", "m", "n", "chunks", "tma_sfa", "tma_sfb", "a_caches",
                 "b_caches", "tma_d", "a_step", "b_step", "d_step", "block_k", "packed")

    def __init__(self, spec, launcher, m, n, chunks, a_caches, b_caches, tma_d, steps, block_k,
                 tma_sfa=None, tma_sfb=None):
        self.spec, self.launcher, self.m, self.n, self.chunks = spec, launcher, m, n, chunks
        self.a_caches, self.b_caches, self.tma_d = a_caches, b_caches, tma_d  # by k (A, B)
        self.a_step, self.b_step, self.d_step = steps
        self.block_k = block_k
        self.tma_sfa, self.tma_sfb = tma_sfa, tma_sfb   # FP8 only
        self.packed: dict = {}   # (a, b, d addresses) -> the launches' parameter structs


_plans: dict = {}        # FP8
_bf16_plans: dict = {}   # BF16
_MAX_PACKED = 64


def _make_plan(function: str, m: int, n: int, ks: list[int], starts: list[int], sfa, sfb,
               device_index: int, config: Bf16GemmConfig | None, probe_defines: tuple) -> _Plan:
    if any(k % SCALE_GROUP for k in ks):   # as validation asks; a partial block would be dropped
        raise ValueError(f"{function}: every k_g must be a multiple of {SCALE_GROUP} here, got {ks}")
    num_sms = settings._num_sms or settings.device_sm_count(device_index)
    chunks = launch_chunks(ks, starts)
    if config is None:
        config = choose_config(m, n, ks, len(chunks[0]), num_sms)
    spec = KGroupedFp8GemmKernelSpec(config, probe_defines=probe_defines)
    print_config_once(function, (len(ks), m, n, sum(ks)), torch.device("cuda", device_index), spec)
    kernel = _load_source(spec.name, spec.source(), device_index, KERNEL_SYMBOL, spec.ffma_yield)
    launcher = Launcher(kernel, grid=config.num_sms, block=config.num_threads,
                        shared_memory=spec.shared_memory, param_kinds=_PARAM_KINDS, pdl=settings._pdl)
    sum_k = sum(ks)
    distinct_k = sorted({k for k in ks if k > 0})
    return _Plan(spec, launcher, m, n, chunks,
                 {k: tma.DescriptorCache(_operand_params(m, k, k, config.block_m)) for k in distinct_k},
                 {k: tma.DescriptorCache(_operand_params(n, k, k, config.block_n)) for k in distinct_k},
                 tma.DescriptorCache(_output_params(m, n, n, 4, config.block_n)),
                 (m, n, m * n * 4), SCALE_GROUP,
                 tma.DescriptorCache(_scale_params(m, sum_k, sfa.stride(1), config.block_m)),
                 tma.DescriptorCache(_scale_params(n, sum_k, sfb.stride(1), config.block_n)))


def _make_bf16_plan(function: str, m: int, n: int, ks: list[int], starts: list[int], out_dtype,
                    device_index: int, config: Bf16GemmConfig | None, probe_defines: tuple) -> _Plan:
    num_sms = settings._num_sms or settings.device_sm_count(device_index)
    if any(k % BLOCK_K_BF16 for k in ks):   # validation asks for 128; a partial block would be dropped
        raise ValueError(f"{function}: every k_g must be a multiple of {BLOCK_K_BF16} here, got {ks}")
    out_bytes = torch.finfo(out_dtype).bits // 8
    chunks = launch_chunks(ks, starts)
    a_k_major, b_k_major = m == 1, n == 1
    if config is None:
        config = choose_bf16_config(m, n, ks, len(chunks[0]), out_bytes, num_sms,
                                    settings._block_size_multiple_of[1], b_k_major)
    spec = KGroupedBf16GemmKernelSpec(config, out_dtype, a_k_major, b_k_major, probe_defines=probe_defines)
    print_config_once(function, (len(ks), m, n, sum(ks)), torch.device("cuda", device_index), spec)
    kernel = _load_source(spec.name, spec.source(), device_index, BF16_KERNEL_SYMBOL)
    launcher = Launcher(kernel, grid=config.num_sms, block=config.num_threads,
                        shared_memory=spec.shared_memory, param_kinds=_BF16_PARAM_KINDS, pdl=settings._pdl)
    distinct_k = sorted({k for k in ks if k > 0})
    # Group g's A_g = a[start_g : start_g + k_g].T: an [M, k_g] view of strides (1, M).
    return _Plan(spec, launcher, m, n, chunks,
                 {k: tma.DescriptorCache(_bf16_operand_params(m, k, (1, m), a_k_major, config.block_m))
                  for k in distinct_k},
                 {k: tma.DescriptorCache(_bf16_operand_params(n, k, (1, n), b_k_major, config.block_n))
                  for k in distinct_k},
                 tma.DescriptorCache(_output_params(m, n, n, out_bytes, config.block_n)),
                 (2 * m, 2 * n, m * n * out_bytes), BLOCK_K_BF16)


def _pack(plan: _Plan, a_address: int, b_address: int, d_address: int) -> list:
    """One KGroupedOperands struct per launch, in 64-byte aligned host buffers: (buffer, its
    aligned address, the launch's group count)."""
    max_groups = plan.spec.max_groups
    size = operands_bytes(max_groups)
    launches = []
    for chunk in plan.chunks:
        buffer = ctypes.create_string_buffer(size + 64)
        base = -(-ctypes.addressof(buffer) // 64) * 64
        for j, (g, k, start) in enumerate(chunk):
            for array, descriptor in enumerate((plan.a_caches[k](a_address + plan.a_step * start),
                                                plan.b_caches[k](b_address + plan.b_step * start),
                                                plan.tma_d(d_address + plan.d_step * g))):
                ctypes.memmove(base + (array * max_groups + j) * _DESCRIPTOR_BYTES, descriptor,
                               _DESCRIPTOR_BYTES)
        struct.pack_into(f"<{max_groups + 1}I", (ctypes.c_char * size).from_address(base),
                         3 * max_groups * _DESCRIPTOR_BYTES, *k_block_starts(chunk, max_groups, plan.block_k))
        launches.append((buffer, base, len(chunk)))
    return launches


def _launches(plan: _Plan, addresses: tuple) -> list:
    """The packed parameter structs of a call at these operand addresses (cached per plan)."""
    launches = plan.packed.get(addresses)
    if launches is None:
        if len(plan.packed) >= _MAX_PACKED:
            plan.packed.clear()
        launches = plan.packed[addresses] = _pack(plan, *addresses)
    return launches


def run(function: str, a_flat: torch.Tensor, sfa: torch.Tensor, b_flat: torch.Tensor,
        sfb: torch.Tensor, d: torch.Tensor, m: int, n: int, ks: Sequence[int], starts: Sequence[int],
        key: tuple, config: Bf16GemmConfig | None = None, probe_defines: tuple = ()) -> None:
    """FP8: d[g] += A_g @ B_g^T for every group with K blocks, d already holding c.

    a_flat / b_flat: the FP8 buffers (group g's row-major [M, k_g] / [N, k_g] block at element
    M * start_g / N * start_g); sfa fp32 [M, sum(ks)/128] and sfb fp32 [N, sum(ks)/128] in the
    TMA-aligned MN-major layout; d fp32 [G, M, N] contiguous; ks multiples of 128 with at least one
    non-zero. `key`: everything the plan depends on besides the settings (k_grouped.py).
    config: a forced tile config (probes; no split-K, stream-K or clusters); None lets choose_config
    pick. probe_defines: kernel macros of probe builds (benchmarks/probe_k_grouped.py)."""
    plan_key = (key, settings._plan_settings, config, probe_defines)
    plan = _plans.get(plan_key)
    if plan is None:
        plan = _plans[plan_key] = _make_plan(function, m, n, ks, starts, sfa, sfb, d.device.index,
                                             config, probe_defines)
    launches = _launches(plan, (a_flat.data_ptr(), b_flat.data_ptr(), d.data_ptr()))
    stream = _current_stream(d.device.index)
    sfa_descriptor, sfb_descriptor = plan.tma_sfa(sfa.data_ptr()), plan.tma_sfb(sfb.data_ptr())
    for _, operands, num_groups in launches:
        plan.launcher(stream, (operands, sfa_descriptor, sfb_descriptor), num_groups, m, n)


def run_bf16(function: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, m: int, n: int,
             ks: Sequence[int], starts: Sequence[int], key: tuple, config: Bf16GemmConfig | None = None,
             probe_defines: tuple = ()) -> None:
    """BF16: d[g] += a[rows_g].T @ b[rows_g] for every group with K blocks, d already holding c.

    a [sum(ks), M] and b [sum(ks), N] bf16 contiguous (group g's rows [start_g, start_g + k_g));
    d fp32 or bf16 [G, M, N] contiguous; ks multiples of 64 with at least one non-zero. `key`,
    config and probe_defines as for run (config: choose_bf16_config's when None)."""
    plan_key = (key, settings._plan_settings, config, probe_defines)
    plan = _bf16_plans.get(plan_key)
    if plan is None:
        plan = _bf16_plans[plan_key] = _make_bf16_plan(function, m, n, ks, starts, d.dtype,
                                                       d.device.index, config, probe_defines)
    launches = _launches(plan, (a.data_ptr(), b.data_ptr(), d.data_ptr()))
    stream = _current_stream(d.device.index)
    for _, operands, num_groups in launches:
        plan.launcher(stream, (operands,), num_groups, m, n)
