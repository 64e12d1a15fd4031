"""`python -m dg_triton` (or `dg-triton`): what this machine can run, then check and time it.

With an SM90 GPU: checks the BF16 and FP8 GEMMs against the reference on a few shapes and times
them beside cuBLAS (FP8: cuBLAS block-wise through torch._scaled_mm). Without one: says so, checks the reference math on the CPU and compile-checks the CUDA
kernels for sm_90a (NVRTC needs no GPU). Never a traceback for a missing GPU or compiler.
"""
import sys
import time


def _report(label: str, value) -> None:
    print(f"  {label:<18} {value}")


def _environment() -> tuple[bool, str]:
    import torch

    from dg_triton import dispatch
    from dg_triton.jit import cache, compiler

    print(f"dg_triton {__import__('dg_triton').__version__}")
    _report("torch", torch.__version__)
    has_gpu = torch.cuda.is_available()
    if has_gpu:
        device = torch.device("cuda", torch.cuda.current_device())
        major, minor = torch.cuda.get_device_capability(device)
        _report("device", f"{torch.cuda.get_device_name(device)} (sm_{major}{minor})")
        _report("backend", dispatch.backend_reason(device))
    else:
        _report("device", "no CUDA GPU found (torch.cuda.is_available() is False)")
        _report("backend", "CUDA kernels need an SM90 GPU; the portable Triton GEMMs run on CPU "
                           "tensors only under the Triton interpreter (TRITON_INTERPRET=1)")
    try:
        compiler_name = "nvcc " + compiler._nvcc_path() if compiler.use_nvcc() else "NVRTC %d.%d" % compiler.nvrtc_version()
    except Exception as error:  # report, don't crash: the rest can still run
        compiler_name = f"unavailable ({error})"
    _report("compiler", compiler_name)
    _report("JIT cache", ":".join(str(d) for d in cache.cache_dirs()))
    return has_gpu, compiler_name


def _check_reference_on_cpu() -> None:
    import torch

    from dg_triton import reference, testing
    a = torch.randn(64, 96, dtype=torch.bfloat16)
    b = torch.randn(80, 96, dtype=torch.bfloat16)
    c = torch.randn(64, 80) * 32
    d = torch.empty(64, 80)
    expected = c + a.double() @ b.double().T
    got = reference.gemm_reference(a, b, d, c, "nt")
    diff = float(testing.calc_diff(got.double(), expected))
    print(f"reference math (CPU): bf16 GEMM with accumulation, calc_diff {diff:.2e} "
          f"({'ok' if diff < 1e-10 else 'FAILED'})")


def _compile_check() -> None:
    import torch

    from dg_triton.heuristics.sm90 import choose_bf16_gemm_config, choose_fp8_gemm_config
    from dg_triton.kernels import sm90_bf16_gemm, sm90_fp8_gemm
    specs = (
        (sm90_bf16_gemm, sm90_bf16_gemm.Bf16GemmKernelSpec(
            choose_bf16_gemm_config(4096, 4096, 7168, 2, 132), True, True, torch.bfloat16, False)),
        (sm90_fp8_gemm, sm90_fp8_gemm.Fp8GemmKernelSpec(
            choose_fp8_gemm_config(4096, 4096, 7168, 2, 132), False, torch.bfloat16, False)),
    )
    for module, spec in specs:
        start = time.perf_counter()
        try:
            compiled = module.compile_spec(spec)
        except Exception as error:
            print(f"compile-only check (sm_90a): {spec.name} FAILED: {error}")
            continue
        usage = compiled.resources
        print(f"compile-only check (sm_90a): {spec.name} in {time.perf_counter() - start:.2f} s "
              f"(cached or compiled), {usage.registers} registers, {usage.spill_store_bytes} B spills, "
              f"{usage.stack_frame_bytes} B stack")


def _check_and_time_on_gpu() -> int:
    import torch

    import dg_triton
    from dg_triton import testing
    if torch.cuda.get_device_capability()[0] != 9:
        print("this GPU is not SM90: dg_triton has no kernels for it yet (nothing to time)")
        return 0
    failures = 0
    print(f"{'shape (M, N, K)':<22}{'layout':>7}{'out':>6}{'calc_diff':>11}{'ours us':>10}"
          f"{'cuBLAS us':>11}{'ratio':>7}")
    for (m, n, k), alias, out in (((4096, 4096, 7168), "nt", torch.bfloat16),
                                  ((4096, 7168, 2048), "nt", torch.bfloat16),
                                  ((128, 7168, 16384), "nt", torch.bfloat16),
                                  ((1, 2112, 7168), "nt", torch.bfloat16),
                                  ((4096, 2048, 7168), "tn", torch.float32)):
        a = torch.randn((m, k) if alias[0] == "n" else (k, m), dtype=torch.bfloat16, device="cuda")
        b = torch.randn((n, k) if alias[1] == "t" else (k, n), dtype=torch.bfloat16, device="cuda")
        d = torch.full((m, n), float("nan"), dtype=out, device="cuda")
        fn = getattr(dg_triton, f"bf16_gemm_{alias}")
        a_nt = a if alias[0] == "n" else a.T
        b_nt = b if alias[1] == "t" else b.T
        ref = a_nt.float() @ b_nt.float().T
        fn(a, b, d)
        diff = float(testing.calc_diff(d.float(), ref))
        ok = bool(torch.isfinite(d).all()) and diff < 1e-5
        failures += not ok
        ours = testing.bench_graph(lambda: fn(a, b, d), warmup_ms=10, rep_ms=50)
        cublas = testing.bench_graph(lambda: torch.matmul(a_nt, b_nt.T), warmup_ms=10, rep_ms=50)
        print(f"{str((m, n, k)):<22}{alias:>7}{str(out)[6:10]:>6}{diff:>11.2e}{ours:>10.1f}"
              f"{cublas:>11.1f}{cublas / ours:>7.2f}{'' if ok else '  FAILED'}")
    failures += _check_and_time_fp8()
    print("all checks passed" if not failures else f"{failures} check(s) FAILED")
    return 1 if failures else 0


def _check_and_time_fp8() -> int:
    """FP8 1D2D against the unquantized reference (API.md 8, threshold 1e-3), timed beside cuBLAS
    block-wise; returns the number of failed checks."""
    import torch

    import dg_triton
    from dg_triton import testing
    failures = 0
    for m, n, k in ((4096, 4096, 7168), (128, 7168, 16384)):
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        # A's scales in the kernel's layout, as the cast can write them (no transform per call)
        a_fp8 = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
        b_fp8 = dg_triton.per_block_cast_to_fp8(b, False)
        d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        try:
            dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)
            diff = float(testing.calc_diff(d.float(), a.float() @ b.float().T))
            ok = bool(torch.isfinite(d).all()) and diff < 1e-3
        except Exception as error:  # report and go on: the BF16 results above still stand
            print(f"{str((m, n, k)):<22}{'fp8':>7}  FAILED: {error}")
            failures += 1
            continue
        failures += not ok
        ours = testing.bench_graph(lambda: dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d), warmup_ms=10, rep_ms=50)
        scale_a, scale_b = a_fp8[1].t().contiguous().t(), b_fp8[1].t()
        try:
            cublas = testing.bench_graph(lambda: torch._scaled_mm(a_fp8[0], b_fp8[0].t(), scale_a, scale_b,
                                                                  out_dtype=torch.bfloat16),
                                         warmup_ms=10, rep_ms=50)
            ratio = f"{cublas / ours:>7.2f}"
            cublas = f"{cublas:>11.1f}"
        except RuntimeError:  # cuBLAS block-wise unsupported by this torch/cuBLAS
            cublas, ratio = f"{'-':>11}", f"{'-':>7}"
        print(f"{str((m, n, k)):<22}{'fp8':>7}{'bf16':>6}{diff:>11.2e}{ours:>10.1f}{cublas}{ratio}"
              f"{'' if ok else '  FAILED'}")
    return failures


def main() -> int:
    has_gpu, _ = _environment()
    if has_gpu:
        return _check_and_time_on_gpu()
    print("No GPU: running what can run here (reference math, compile-only check of the CUDA kernels).")
    _check_reference_on_cpu()
    _compile_check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
