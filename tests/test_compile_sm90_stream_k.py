"""Compile-only checks of the stream-K binaries of the SM90 BF16 and FP8 dense kernels (no GPU
needed): the configs the heuristics give the M=4096 shapes of API.md 8 where they take stream-K
(with heuristics.STREAM_K patched on: it is off by default),
and forced ones with an FP32 D, accumulation and MN-major operands. Checked as the other variants
are (no spills, no stack frame, wgmma not serialized, the tensor-core MMA and TMA loads in the
SASS), and for both epilogues: TMA stores for whole tiles, and the split store's counter atomics."""
import re
from dataclasses import replace

import pytest
import torch
from shapes import FP8_DENSE_NK
from test_compile_sm90 import _check_ptxas_report, jit_cache_dir  # noqa: F401 (fixture)

from dg_triton.heuristics import sm90 as heuristics
from dg_triton.jit import compiler
from dg_triton.kernels import sm90_bf16_gemm, sm90_fp8_gemm
from dg_triton.kernels.sm90_bf16_gemm import Bf16GemmKernelSpec
from dg_triton.kernels.sm90_fp8_gemm import Fp8GemmKernelSpec

pytestmark = pytest.mark.compile

_NUM_SMS = 132


def _variants():
    specs = {}
    saved, heuristics.STREAM_K = heuristics.STREAM_K, True   # (off by default: measured slower)
    try:
        for n, k in FP8_DENSE_NK:
            config = heuristics.choose_bf16_gemm_config(4096, n, k, 2, _NUM_SMS)
            if config.stream_k:
                spec = Bf16GemmKernelSpec(config, True, True, torch.bfloat16, False)
                specs[spec.name] = spec
            config = heuristics.choose_fp8_gemm_config(4096, n, k, 2, _NUM_SMS)
            if config.stream_k:
                spec = Fp8GemmKernelSpec(config, False, torch.bfloat16, False)
                specs[spec.name] = spec
    finally:
        heuristics.STREAM_K = saved
    for block_m, block_n, a_k_major, b_k_major in ((64, 64, False, False), (128, 128, True, False)):
        config = replace(heuristics.make_config(4096, 4096, block_m, block_n, 1, 7168, 4, _NUM_SMS),
                         stream_k=True)
        spec = Bf16GemmKernelSpec(config, a_k_major, b_k_major, torch.float32, True)
        specs[spec.name] = spec
    for block_n in (112, 144):   # the wgrad tiles, with and without overlapped promotion
        config = replace(heuristics.make_fp8_config("1d1d", 4096, 4096, 128, block_n, 1, 7168, 4,
                                                    _NUM_SMS), stream_k=True)
        spec = Fp8GemmKernelSpec(config, True, torch.float32, True)
        specs[spec.name] = spec
    return sorted(specs.values(), key=lambda spec: spec.name)


_VARIANTS = _variants()


def test_the_heuristics_can_give_stream_k_to_both_kernels():
    names = [spec.name for spec in _VARIANTS]
    assert any(name.startswith("sm90_bf16_gemm_") and name.endswith("_sk") for name in names)
    assert any(name.startswith("sm90_fp8_gemm_1d2d") and name.endswith("_sk") for name in names)


@pytest.mark.parametrize("spec", _VARIANTS, ids=[spec.name for spec in _VARIANTS])
def test_stream_k_variant_compiles_without_spills_with_both_epilogues(spec):
    fp8 = isinstance(spec, Fp8GemmKernelSpec)
    compiled = (sm90_fp8_gemm if fp8 else sm90_bf16_gemm).compile_spec(spec)
    assert "_sk" in compiled.name
    _check_ptxas_report(compiled)
    if compiler.cuobjdump_path() is None:
        return
    sass = compiler.disassemble(compiled.entry_dir / "kernel.cubin")
    block_n = spec.config.block_n
    mma = f"QGMMA.64x{block_n}x32.F32.E4M3.E4M3" if fp8 else f"HGMMA.64x{block_n}x16.F32.BF16"
    assert mma in sass, sorted(set(re.findall(r"[HQ]GMMA\.\S+", sass)))
    assert "UTMALDG" in sass and "UTMASTG" in sass, f"{compiled.name}: TMA load or store missing"
    assert re.search(r"\bATOMG\.E\.ADD", sass), f"{compiled.name}: no split-tile counter atomic"
    assert "CALL.ABS" not in sass, f"{compiled.name}: calls a fallback (wrong architecture?)"
