"""Host side of the SM90 BF16 GEMM (cuda_kernels/sm90/bf16_gemm.cuh): kernel source for a config,
TMA descriptors for the operands, and the cached launch plan per problem.

The first call of a problem (shape, layouts, dtypes, strides, settings) builds a `_Plan`: config
from heuristics/sm90.py, the JIT-compiled kernel, TMA parameters and a Launcher. Later calls of the
same problem only read three data pointers, look up their descriptors and launch.
"""
import functools
from dataclasses import dataclass

import torch

from dg_triton import settings
from dg_triton import dispatch
from dg_triton.dispatch import print_config_once
from dg_triton.heuristics.sm90 import (BLOCK_K_BF16, DEFAULT_L2_GROUP, Bf16GemmConfig, b_evict_first,
                                       bf16_gemm_shared_memory, choose_bf16_gemm_config,
                                       epilogue_swizzle_bytes, stream_k_plan)
from dg_triton.jit import compiler, tma
from dg_triton.jit.module import TMA, U32, U64, Kernel, Launcher
from dg_triton.kernels.split_scratch import scratch_for

KERNEL_SYMBOL = "sm90_bf16_gemm"
_OUT_TYPES = {torch.bfloat16: "__nv_bfloat16", torch.float32: "float"}


def layout_tag(a_k_major: bool, b_k_major: bool, out_dtype: torch.dtype) -> str:
    """The operand majors and D type in a BF16 kernel's name: "kk_bf16", "mn_fp32", ..."""
    return (("k" if a_k_major else "m") + ("k" if b_k_major else "n")
            + ("_bf16" if out_dtype == torch.bfloat16 else "_fp32"))


@dataclass(frozen=True)
class Bf16GemmKernelSpec:
    """Everything compiled into one kernel binary."""
    config: Bf16GemmConfig
    a_k_major: bool
    b_k_major: bool
    out_dtype: torch.dtype
    accumulate: bool
    shape_m: int = 0      # 0: passed at run time (compiled_dims)
    shape_n: int = 0
    shape_k: int = 0
    probe_defines: tuple = ()  # macros of probe builds (benchmarks/probe_bf16.py); never set by the API
    b_evict_first: bool = False   # B's loads under L2 evict-first (heuristics.sm90.b_evict_first)

    @property
    def name(self) -> str:
        c = self.config
        return (f"sm90_bf16_gemm_{c.block_m}x{c.block_n}_s{c.num_stages}_"
                f"{layout_tag(self.a_k_major, self.b_k_major, self.out_dtype)}"
                f"{'_acc' if self.accumulate else ''}{'_splitk' if self.split_k else ''}"
                f"{'_sk' if c.stream_k else ''}"
                f"{f'_c{c.cluster_n}' if c.cluster_n > 1 else ''}"
                f"{f'_cm{c.cluster_m}' if c.cluster_m > 1 else ''}"
                f"{f'_g{c.group_m}' if c.group_m != DEFAULT_L2_GROUP else ''}"
                f"{_build_suffix(self.probe_defines, self.b_evict_first)}")

    @property
    def split_k(self) -> bool:
        return self.config.num_splits > 1

    def source(self) -> str:
        c = self.config
        flag = lambda value: "true" if value else "false"  # noqa: E731
        return f'''// {self.name}
{_define_lines(self.probe_defines, self.b_evict_first)}#include "sm90/bf16_gemm.cuh"

using Traits = dg::sm90::Bf16GemmTraits<
    {c.block_m}, {c.block_n}, {c.num_stages}, {flag(self.a_k_major)}, {flag(self.b_k_major)},
    {_OUT_TYPES[self.out_dtype]}, {flag(self.accumulate)}, {flag(self.split_k)}, {c.group_m}, {c.cluster_m}, {c.cluster_n},
    {self.shape_m}, {self.shape_n}, {self.shape_k}, {flag(c.stream_k)}>;
// The host asks for exactly this much shared memory (heuristics.sm90.bf16_gemm_shared_memory).
static_assert(Traits::kSmemBytes == {self.shared_memory}, "host and kernel disagree on shared memory");

extern "C" __global__ void __launch_bounds__(Traits::kNumThreads, 1)
{KERNEL_SYMBOL}(const __grid_constant__ dg::TmaDescriptor tma_a,
               const __grid_constant__ dg::TmaDescriptor tma_b,
               const __grid_constant__ dg::TmaDescriptor tma_d,
               uint32_t shape_m, uint32_t shape_n, uint32_t shape_k,
               uint32_t num_splits, float* workspace, uint32_t* counters, uint32_t ld_d, void* d) {{
    const dg::sm90::SplitKArguments split{{num_splits, workspace, counters, d, ld_d}};
    dg::sm90::bf16_gemm_body<Traits>(tma_a, tma_b, tma_d, shape_m, shape_n, shape_k, split);
}}
'''

    @property
    def shared_memory(self) -> int:
        c = self.config
        return bf16_gemm_shared_memory(c.block_m, c.block_n, c.num_stages,
                                       torch.finfo(self.out_dtype).bits // 8, self.split_k)


def compile_spec(spec: Bf16GemmKernelSpec, arch: str = "sm_90a") -> compiler.CompiledKernel:
    return compiler.compile_kernel(spec.name, spec.source(), arch)


def _load(spec: Bf16GemmKernelSpec, device_index: int) -> Kernel:
    # Keyed by the source, not the spec: configs that differ only in run-time values (grid size,
    # split count) share one binary, so they share one loaded module too.
    return _load_source(spec.name, spec.source(), device_index)


@functools.lru_cache(maxsize=None)
def _load_source(name: str, source: str, device_index: int, symbol: str = KERNEL_SYMBOL,
                 ffma_yield: str | None = None) -> Kernel:
    """The compiled and loaded kernel `symbol` of `source`, once per process and device (the FP8
    GEMM's host side loads through here too; ffma_yield: compiler.compile_kernel's)."""
    compiled = compiler.compile_kernel(name, source, "sm_90a", ffma_yield)
    return Kernel(compiled.cubin, symbol, device_index, name=name)


def _operand_params(rows: int, k: int, strides: tuple[int, int], k_major: bool, block_rows: int,
                    multicast: int = 1, split_atoms_by_k: bool = False) -> tma.Tma2dParams:
    """A logical [rows, K] BF16 operand. K-major: boxes of [block_rows][64 of K]. MN-major:
    boxes of [64 of K][64 of rows] (the kernel loads block_rows / 64 of them per stage).
    Shared by a cluster of `multicast` CTAs, each loads a 1/multicast share (load_a_tile,
    load_b_tile): fewer rows (K-major); MN-major, fewer K rows of each atom when
    `split_atoms_by_k` (B) or when there is a single atom (A), else whole atoms (A)."""
    if k_major:
        inner, outer, stride = k, rows, strides[0]
        box_inner, box_outer = 64, block_rows // multicast
    else:
        inner, outer, stride = rows, k, strides[1]
        by_k = split_atoms_by_k or block_rows == 64
        box_inner, box_outer = 64, (64 // multicast if by_k else 64)
    row_bytes = stride * 2 if outer > 1 else -(-inner * 2 // 16) * 16
    return tma.Tma2dParams(2, inner, outer, row_bytes, box_inner, box_outer, tma.SWIZZLE_128B)


def _output_params(m: int, n: int, row_stride: int, element: int, block_n: int) -> tma.Tma2dParams:
    """D, stored by the epilogue in slabs of one swizzle span (SwizzledTmaStoreEpilogue)."""
    row_bytes = row_stride * element if m > 1 else -(-n * element // 16) * 16
    swizzle = epilogue_swizzle_bytes(block_n, element)
    return tma.Tma2dParams(element, n, m, row_bytes, swizzle // element, 64, swizzle)


class _Plan:
    """What a call of one problem needs. `split` (split-K plans only) hands out the FP32 workspace
    and per-tile counters of the stream the call runs on (SplitKBuffers)."""
    __slots__ = ("launcher", "tma_a", "tma_b", "tma_d", "spec", "scalars", "split")

    def __init__(self, spec, launcher, tma_a, tma_b, tma_d, scalars, split=None):
        self.spec, self.launcher = spec, launcher
        self.tma_a, self.tma_b, self.tma_d = tma_a, tma_b, tma_d
        self.scalars = scalars  # the kernel's scalar parameters but the last (the D pointer)
        self.split = split

    def launch(self, a_ptr: int, b_ptr: int, d_ptr: int, device_index: int) -> None:
        """One launch on the device's current stream, operands at these (validated) addresses."""
        stream = _current_stream(device_index)
        scalars = self.scalars if self.split is None else self.split.scalars(self.scalars, stream)
        self.launcher(stream, (self.tma_a(a_ptr), self.tma_b(b_ptr), self.tma_d(d_ptr)), *scalars,
                      d_ptr)


_plans: dict = {}


class SplitKBuffers:
    """Where one split-K plan's FP32 partials (one per K slice and tile) and per-tile counters live,
    for SplitKEpilogue (cuda_kernels/sm90/splitk_epilogue.cuh): the scratch of the stream or
    capture the launch runs in (split_scratch.scratch_for), its pointers cached per stream. A
    stream-K plan has them for its split tiles only: `pieces` per tile for `tiles` tiles.

    `scalars(template, stream)` is the plan's scalar tuple with the set's two pointers in
    template[slot], template[slot + 1]."""

    def __init__(self, config: Bf16GemmConfig, m: int, n: int, device: torch.device, slot: int,
                 tiles: int | None = None, pieces: int | None = None):
        if tiles is None:
            tiles = -(-m // config.block_m) * -(-n // config.block_n)
        pieces = config.num_splits if pieces is None else pieces
        self.workspace_elements = pieces * tiles * config.block_m * config.block_n
        self.counter_elements = tiles * (config.block_m // 64)
        self.device, self.slot = device, slot
        self._by_stream: dict = {}   # stream -> (scratch generation, scalars)

    def _with(self, template: tuple, pointers: tuple[int, int]) -> tuple:
        return template[:self.slot] + pointers + template[self.slot + 2:]

    def scalars(self, template: tuple, stream: int) -> tuple:
        scratch = scratch_for(self.device, stream)
        if scratch.captured:
            return self._with(template, scratch.pointers(self.workspace_elements, self.counter_elements))
        cached = self._by_stream.get(stream)
        if cached is None or cached[0] != scratch.generation:
            pointers = scratch.pointers(self.workspace_elements, self.counter_elements)
            cached = self._by_stream[stream] = (scratch.generation, self._with(template, pointers))
        return cached[1]


def _build_suffix(probe_defines: tuple, b_evict_first: bool = False) -> str:
    """The end of a kernel's name that tells its build apart: `_ef` where B's loads are evict-first,
    then a probe build's macros, lower-cased (neither for most API builds)."""
    return ("_ef" if b_evict_first else "") + "".join(f"_{d.lower()}" for d in probe_defines)


def _define_lines(probe_defines: tuple, b_evict_first: bool = False) -> str:
    """The `#define`s put before a kernel's headers: a probe build's macros, then the evict-first
    switch of gemm_pipeline.cuh where chosen."""
    macros = probe_defines + (("DG_B_EVICT_FIRST",) if b_evict_first else ())
    return "".join(f"#define {d} 1\n" for d in macros)


def _compiled_dims(m: int, n: int, k: int, compiled_dims: str) -> tuple[int, int, int]:
    if settings._ignore_compile_dims:
        return 0, 0, 0
    return (m if "m" in compiled_dims else 0, n if "n" in compiled_dims else 0,
            k if "k" in compiled_dims else 0)


def split_k_arguments(config: Bf16GemmConfig, m: int, n: int, k_blocks: int, device,
                      slot: int) -> tuple[tuple[int, int, int], SplitKBuffers | None]:
    """((num_splits, workspace, counters) for the plan's scalars, buffers): without split-K or
    stream-K (1, 0, 0) and None; with either, null pointers that the call replaces by its
    stream's (SplitKBuffers, whose `slot` is the workspace's position in the plan's scalars).
    With stream-K the first scalar is the number of tiles that run whole (StreamKTileScheduler)."""
    if config.stream_k:
        tiles = -(-m // config.block_m) * -(-n // config.block_n)
        plan = stream_k_plan(tiles, k_blocks, config.num_sms)
        if plan.sk_tiles and plan.sk_tiles * k_blocks < config.num_sms:
            # (A CTA without a K block would be counted as a piece and its tile never stored.)
            raise ValueError(f"stream-K needs at least one K block per CTA: {plan.sk_tiles} tiles of "
                             f"{k_blocks} K blocks on {config.num_sms} CTAs")
        return (plan.whole_tiles, 0, 0), SplitKBuffers(config, m, n, device, slot,
                                                       tiles=plan.sk_tiles, pieces=plan.max_pieces)
    if config.num_splits == 1:
        return (1, 0, 0), None
    return (config.num_splits, 0, 0), SplitKBuffers(config, m, n, device, slot)


def b_loads_evict_first(m: int, n: int, k: int, b_k_major: bool, config: Bf16GemmConfig) -> bool:
    """Whether the kernel for this problem and config loads B under L2 evict-first
    (heuristics.sm90.b_evict_first; the kernel has the policy on K-major B tiles one CTA loads)."""
    return b_k_major and config.cluster_m == 1 and b_evict_first(-(-m // config.block_m), n * k * 2, bf16=True)


def _make_plan(function: str, a, b, d, m, n, k, a_k_major, b_k_major, accumulate, compiled_dims,
               config: Bf16GemmConfig | None, probe_defines: tuple = ()) -> _Plan:
    device_index = d.device.index
    num_sms = settings._num_sms or settings.device_sm_count(device_index)
    element = d.element_size()
    if config is None:
        config = choose_bf16_gemm_config(m, n, k, element, num_sms,
                                         settings._block_size_multiple_of[1], b_k_major,
                                         accumulate=accumulate)
    spec = Bf16GemmKernelSpec(config, a_k_major, b_k_major, d.dtype, accumulate,
                              *_compiled_dims(m, n, k, compiled_dims), probe_defines,
                              b_loads_evict_first(m, n, k, b_k_major, config))
    print_config_once(function, (m, n, k), d.device, spec)
    kernel = _load(spec, device_index)
    launcher = Launcher(kernel, grid=config.num_sms, block=config.num_threads,
                        shared_memory=spec.shared_memory, param_kinds=_PARAM_KINDS,
                        cluster=config.cluster_size, pdl=settings._pdl)
    # scalars (m, n, k, num_splits, workspace, counters, ld_d): the workspace is scalar 4
    split_args, split = split_k_arguments(config, m, n, -(-k // BLOCK_K_BF16), d.device, slot=4)
    return _Plan(spec, launcher,
                 tma.DescriptorCache(_operand_params(m, k, a.stride(), a_k_major, config.block_m,
                                                     config.cluster_n)),
                 tma.DescriptorCache(_operand_params(n, k, b.stride(), b_k_major, config.block_n,
                                                     config.cluster_m, split_atoms_by_k=True)),
                 tma.DescriptorCache(_output_params(m, n, d.stride(0), element, config.block_n)),
                 (m, n, k, *split_args, d.stride(0)), split)


# tma_a, tma_b, tma_d, m, n, k, num_splits, workspace, counters, ld_d, d
_PARAM_KINDS = (TMA, TMA, TMA, U32, U32, U32, U32, U64, U64, U32, U64)


def _current_stream(device_index: int) -> int:
    return torch.cuda.current_stream(device_index).cuda_stream


try:  # the raw getter skips building a torch.cuda.Stream object per call (~2 us)
    from torch._C import _cuda_getCurrentRawStream as _raw_stream

    def _current_stream(device_index: int) -> int:  # noqa: F811
        return _raw_stream(device_index)
except ImportError:
    pass


def run(function: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, problem: tuple,
        addresses: tuple, accumulate: bool, compiled_dims: str,
        config: Bf16GemmConfig | None = None, probe_defines: tuple = ()) -> _Plan:
    """D (+)= A @ B^T for a validated, non-empty problem; `accumulate` reads D as C. Returns the
    plan, which later calls of the same problem may launch directly (gemm.py's warm path).

    `problem` = (m, n, k, a_k_major, b_k_major, device_index, (d.dtype, a/b/d strides)) and
    `addresses` = the three data pointers, as validation.bf16_gemm returns them. Together with the
    settings and the config override they key the cached plan.
    """
    key = (problem, accumulate, compiled_dims, settings._plan_settings, config, probe_defines)
    plan = _plans.get(key)
    if plan is None:
        # First call of this problem: the backend is decided once, with the plan.
        dispatch.backend(function, d.device, (dispatch.SM90,))
        m, n, k, a_k_major, b_k_major, _, _ = problem
        plan = _plans[key] = _make_plan(function, a, b, d, m, n, k, a_k_major, b_k_major,
                                        accumulate, compiled_dims, config, probe_defines)
    plan.launch(*addresses, problem[5])
    return plan
