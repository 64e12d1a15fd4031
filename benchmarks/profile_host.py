"""Where the host time of one warm bf16_gemm_nt call goes (CPU microseconds per step, medians of
bursts, as ANCHORS.md measures host overhead). Run on the GPU machine:

    python benchmarks/profile_host.py
"""
import ctypes
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dg_triton  # noqa: E402
from dg_triton import dispatch, settings, testing, validation  # noqa: E402
from dg_triton.jit import tma  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm  # noqa: E402


def main():
    for m, n, k in ((1, 256, 256), (64, 2112, 7168)):
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        dg_triton.bf16_gemm_nt(a, b, d)
        plan = next(p for key, p in sm90_bf16_gemm._plans.items() if key[0][:3] == (m, n, k))
        problem = validation.bf16_gemm("bf16_gemm_nt", a, b, d, None)
        key_parts = (problem[:7], False, "nk", settings._plan_settings, None, ())
        a_ptr, b_ptr, d_ptr = problem[7]
        # a split-K plan's scalars carry the workspace of the stream it runs on (here stream 0)
        scalars = plan.scalars if plan.split is None else plan.split.scalars(plan.scalars, 0)
        steps = {
            "whole call": lambda: dg_triton.bf16_gemm_nt(a, b, d),
            "validation": lambda: validation.bf16_gemm("bf16_gemm_nt", a, b, d, None),
            "dispatch": lambda: dispatch.backend_of("bf16_gemm_nt", d, 0, (dispatch.SM90,)),
            "plan lookup": lambda: sm90_bf16_gemm._plans.get(key_parts),
            "3 descriptors": lambda: (plan.tma_a(a_ptr), plan.tma_b(b_ptr), plan.tma_d(d_ptr)),
            "current stream": lambda: sm90_bf16_gemm._current_stream(0),
            "launcher call": lambda: plan.launcher(0, (plan.tma_a(a_ptr), plan.tma_b(b_ptr),
                                                       plan.tma_d(d_ptr)), *scalars, d_ptr),
            "torch.matmul": lambda: torch.matmul(a, b.T, out=d),
        }
        print(f"m={m} n={n} k={k} ({plan.spec.name}):")
        for name, fn in steps.items():
            print(f"  {name:<20} {testing.host_overhead_us(fn, calls=200, repeats=7):6.2f} us")
        if plan.split is None:
            primitives(plan, a, a_ptr, b_ptr, d_ptr, scalars)


def primitives(plan, a, a_ptr, b_ptr, d_ptr, scalars):
    """The pieces a call is made of, alone: ctypes itself, the legacy launch entry point, a
    descriptor-cache miss, tensor attribute reads, and torch's own small ops for scale."""
    libc = ctypes.CDLL(None)
    libcuda = ctypes.CDLL("libcuda.so.1")
    legacy = libcuda.cuLaunchKernel
    legacy.restype = ctypes.c_int
    launcher = plan.launcher
    descriptors = (plan.tma_a(a_ptr), plan.tma_b(b_ptr), plan.tma_d(d_ptr))
    launcher(0, descriptors, *scalars, d_ptr)   # fills the parameter block
    config = launcher._config
    function = ctypes.c_void_p(launcher._function)
    params = ctypes.c_void_p(launcher._pointers_address)
    grid, block, smem = ctypes.c_uint(config.gridDimX), ctypes.c_uint(config.blockDimX), \
        ctypes.c_uint(config.sharedMemBytes)
    one, null = ctypes.c_uint(1), ctypes.c_void_p(0)
    ex = launcher._launch
    config_pointer, function_arg, params_arg = launcher._config_pointer, launcher._function_arg, \
        launcher._pointers_arg
    cache = tma.DescriptorCache(plan.tma_a.params)
    addresses = iter(range(a_ptr, a_ptr + (1 << 40), 256))
    steps = {
        "ctypes getpid": lambda: libc.getpid(),
        "cuLaunchKernelEx, ours": lambda: launcher(0, descriptors, *scalars, d_ptr),
        "cuLaunchKernelEx only": lambda: ex(config_pointer, function_arg, params_arg, None),
        "cuLaunchKernel legacy": lambda: legacy(function, grid, one, one, block, one, one, smem,
                                               null, params, null),
        "descriptor miss": lambda: cache(next(addresses)),
        "a.shape": lambda: a.shape,
        "a.stride()": lambda: a.stride(),
        "a.data_ptr()": lambda: a.data_ptr(),
        "a.get_device()": lambda: a.get_device(),
        "torch.empty(1)": lambda: torch.empty(1, device="cuda"),
        "torch.add tiny": lambda: torch.add(a[:1, :1], 1),
    }
    print("  primitives:")
    for name, fn in steps.items():
        print(f"    {name:<24} {testing.host_overhead_us(fn, calls=200, repeats=7):6.2f} us")


if __name__ == "__main__":
    main()
