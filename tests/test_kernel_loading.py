"""Configs that differ only in run-time values (grid size, split count) compile to one binary and
must share one loaded module: a plan per grid size must not load the same cubin again."""
import torch

from dg_triton.heuristics.sm90 import make_config
from dg_triton.kernels import sm90_bf16_gemm
from dg_triton.kernels.sm90_bf16_gemm import Bf16GemmKernelSpec


def test_specs_with_the_same_source_share_one_loaded_kernel(monkeypatch):
    compiled, loaded = [], []

    class FakeCompiled:
        cubin = b"\x7fELF"

    def fake_compile(name, source, arch, ffma_yield=None):
        compiled.append(source)
        return FakeCompiled()

    class FakeKernel:
        def __init__(self, cubin, symbol, device_index, name=""):
            loaded.append((name, device_index))

    monkeypatch.setattr(sm90_bf16_gemm.compiler, "compile_kernel", fake_compile)
    monkeypatch.setattr(sm90_bf16_gemm, "Kernel", FakeKernel)
    sm90_bf16_gemm._load_source.cache_clear()
    try:
        wide = make_config(4096, 4096, 128, 256, 1, 7168, 2, 132)
        narrow = make_config(4096, 4096, 128, 256, 1, 7168, 2, 66)
        split_a = make_config(64, 2048, 64, 64, 2, 7168, 2, 132)
        split_b = make_config(64, 2048, 64, 64, 4, 7168, 2, 132)
        assert wide.num_sms != narrow.num_sms and split_a.num_splits != split_b.num_splits
        specs = [Bf16GemmKernelSpec(c, True, True, torch.bfloat16, False)
                 for c in (wide, narrow, split_a, split_b)]
        kernels = [sm90_bf16_gemm._load(spec, 0) for spec in specs]
        assert kernels[0] is kernels[1] and kernels[2] is kernels[3]
        assert kernels[0] is not kernels[2]
        assert len(compiled) == 2 and len(loaded) == 2
        # Another device loads its own module.
        assert sm90_bf16_gemm._load(specs[0], 1) is not kernels[0]
    finally:
        sm90_bf16_gemm._load_source.cache_clear()
