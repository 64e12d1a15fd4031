"""Host side of the SM90 k-grouped FP8 GEMM (API.md 3.6; cuda_kernels/sm90/scheduler_k_grouped.cuh):
the FP8 1D1D kernel (fp32 D += A @ B^T) over the tiles of up to MAX_GROUPS_PER_LAUNCH groups in one
persistent launch.

Each group's A, B and D descriptors travel in the kernel's parameters, as one KGroupedOperands
struct (a by-value parameter the launcher points at, like a single TMA descriptor); the scale
factors are one descriptor each over all groups' K blocks. A plan per problem (M, N, the group
sizes, layouts) holds the config, the kernel and the descriptor caches; per call, the packed
parameter structs are looked up by the operands' addresses (benchmark loops and graph replays hit)
and built on a miss. Nothing is read from the device, so a call can be captured in a CUDA graph
(after a warm call has compiled the kernel): the graph keeps the parameters it was captured with.
"""
import ctypes
import dataclasses
import struct
from dataclasses import dataclass

import torch

from dg_triton import settings
from dg_triton.dispatch import print_config_once
from dg_triton.heuristics.sm90 import (DEFAULT_L2_GROUP, Bf16GemmConfig, choose_fp8_gemm_config,
                                      epilogue_chunk_cols, fp8_gemm_shared_memory, fp8_scale_stage_bytes,
                                      make_fp8_config)
from dg_triton.jit import compiler, tma
from dg_triton.jit.module import TMA, U32, Launcher
from dg_triton.kernels.sm90_bf16_gemm import _current_stream, _load_source, _output_params
from dg_triton.kernels.sm90_fp8_gemm import (SCALE_GROUP, Fp8GemmKernelSpec, _operand_params,
                                             _scale_params)

KERNEL_SYMBOL = "sm90_k_grouped_fp8_gemm"
# Groups per launch: the parameter struct holds three 128-byte descriptors a group (6.2 KB at 16,
# within the 32 KB CUDA allows kernel parameters since 12.1); more groups take several launches.
MAX_GROUPS_PER_LAUNCH = 16
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


def k_block_starts(chunk, max_groups: int) -> list[int]:
    """KGroupedOperands::k_block_start of one launch: group j's K blocks among all groups' are
    [starts[j], starts[j + 1]); unused slots repeat the end."""
    starts = [start // SCALE_GROUP for _, _, start in chunk]
    end = (chunk[-1][2] + chunk[-1][1]) // SCALE_GROUP
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
                + "".join(f"_{d.lower()}" for d in self.probe_defines))

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
        defines = "".join(f"#define {d} 1\n" for d in self.probe_defines)
        return f'''// {self.name}
{defines}#include "sm90/fp8_gemm.cuh"
#include "sm90/scheduler_k_grouped.cuh"

using Traits = dg::sm90::Fp8GemmTraits<
    {c.block_m}, {c.block_n}, {c.num_stages}, true, float, true, false, {c.group_m}, 1, 1, 0, 0, 0>;
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


def compile_spec(spec: KGroupedFp8GemmKernelSpec, arch: str = "sm_90a") -> compiler.CompiledKernel:
    return compiler.compile_kernel(spec.name, spec.source(), arch, spec.ffma_yield)


def choose_config(m: int, n: int, ks: list[int], num_groups: int, num_sms: int) -> Bf16GemmConfig:
    """The dense 1D1D heuristics' tile for [M, N, the mean non-empty k], without split-K, stream-K
    or clusters (the k-grouped scheduler has none), the grid over all launched groups' tiles; one
    stage fewer where that lets the epilogue stage whole rows, so that every tile's c comes in
    under its K loop (128x128: 4 stages and whole rows ran 6-8 % faster than 5 stages and half
    rows on an H100 at 16 groups of K ~ 2048, NOTES.md session 25)."""
    nonempty = [k for k in ks if k > 0]
    k = -(-sum(nonempty) // len(nonempty) // SCALE_GROUP) * SCALE_GROUP
    config = choose_fp8_gemm_config(m, n, k, 4, num_sms, "1d1d")
    if config.num_splits > 1 or config.stream_k or config.cluster_size > 1:
        config = make_fp8_config("1d1d", m, n, config.block_m, config.block_n, 1, k, 4, num_sms)
    extra = fp8_scale_stage_bytes("1d1d", config.block_m, config.block_n)
    staged = lambda stages: epilogue_chunk_cols(config.block_m, config.block_n, stages, 4, extra,  # noqa: E731
                                                accumulate=True)
    if staged(config.num_stages) < config.block_n and config.num_stages > 3 \
            and staged(config.num_stages - 1) == config.block_n:
        config = dataclasses.replace(config, num_stages=config.num_stages - 1)
    tiles = -(-m // config.block_m) * -(-n // config.block_n)
    return dataclasses.replace(config, num_sms=min(num_sms, tiles * min(num_groups, MAX_GROUPS_PER_LAUNCH)))


# groups (the KGroupedOperands struct), tma_sfa, tma_sfb, num_groups, shape_m, shape_n
_PARAM_KINDS = (TMA, TMA, TMA, U32, U32, U32)


class _Plan:
    __slots__ = ("spec", "launcher", "m", "n", "chunks", "tma_sfa", "tma_sfb", "a_caches",
                 "b_caches", "tma_d", "packed")

    def __init__(self, spec, launcher, m, n, chunks, tma_sfa, tma_sfb, a_caches, b_caches, tma_d):
        self.spec, self.launcher, self.m, self.n, self.chunks = spec, launcher, m, n, chunks
        self.tma_sfa, self.tma_sfb = tma_sfa, tma_sfb
        self.a_caches, self.b_caches, self.tma_d = a_caches, b_caches, tma_d  # by k (A, B)
        self.packed: dict = {}   # (a, b, d addresses) -> the launches' parameter structs


_plans: dict = {}
_MAX_PACKED = 64


def _make_plan(function: str, m: int, n: int, ks: list[int], starts: list[int], sfa, sfb,
               device_index: int, config: Bf16GemmConfig | None, probe_defines: tuple) -> _Plan:
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
                 tma.DescriptorCache(_scale_params(m, sum_k, sfa.stride(1), config.block_m)),
                 tma.DescriptorCache(_scale_params(n, sum_k, sfb.stride(1), config.block_n)),
                 {k: tma.DescriptorCache(_operand_params(m, k, k, config.block_m)) for k in distinct_k},
                 {k: tma.DescriptorCache(_operand_params(n, k, k, config.block_n)) for k in distinct_k},
                 tma.DescriptorCache(_output_params(m, n, n, 4, config.block_n)))


def _pack(plan: _Plan, a_address: int, b_address: int, d_address: int) -> list:
    """One KGroupedOperands struct per launch, in 64-byte aligned host buffers: (buffer, its
    aligned address, the launch's group count)."""
    max_groups = plan.spec.max_groups
    size = operands_bytes(max_groups)
    m, n = plan.m, plan.n
    launches = []
    for chunk in plan.chunks:
        buffer = ctypes.create_string_buffer(size + 64)
        base = -(-ctypes.addressof(buffer) // 64) * 64
        for j, (g, k, start) in enumerate(chunk):
            # Group g's [M, k] / [N, k] blocks start at element M * start / N * start; d[g] at g * M * N.
            for array, descriptor in enumerate((plan.a_caches[k](a_address + m * start),
                                                plan.b_caches[k](b_address + n * start),
                                                plan.tma_d(d_address + g * m * n * 4))):
                ctypes.memmove(base + (array * max_groups + j) * _DESCRIPTOR_BYTES, descriptor,
                               _DESCRIPTOR_BYTES)
        struct.pack_into(f"<{max_groups + 1}I", (ctypes.c_char * size).from_address(base),
                         3 * max_groups * _DESCRIPTOR_BYTES, *k_block_starts(chunk, max_groups))
        launches.append((buffer, base, len(chunk)))
    return launches


def run(function: str, a_flat: torch.Tensor, sfa: torch.Tensor, b_flat: torch.Tensor,
        sfb: torch.Tensor, d: torch.Tensor, m: int, n: int, ks: list[int], starts: list[int],
        key: tuple, config: Bf16GemmConfig | None = None, probe_defines: tuple = ()) -> None:
    """d[g] += A_g @ B_g^T for every group with K blocks, d already holding c.

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
    addresses = (a_flat.data_ptr(), b_flat.data_ptr(), d.data_ptr())
    launches = plan.packed.get(addresses)
    if launches is None:
        if len(plan.packed) >= _MAX_PACKED:
            plan.packed.clear()
        launches = plan.packed[addresses] = _pack(plan, *addresses)
    stream = _current_stream(d.device.index)
    sfa_descriptor, sfb_descriptor = plan.tma_sfa(sfa.data_ptr()), plan.tma_sfb(sfb.data_ptr())
    for _, operands, num_groups in launches:
        plan.launcher(stream, (operands, sfa_descriptor, sfb_descriptor), num_groups, m, n)
