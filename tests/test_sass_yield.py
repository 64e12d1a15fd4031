"""The FFMA yield pass (dg_triton/jit/sass_yield.py) on a real FP8 GEMM cubin, no GPU needed.

What must hold: the pass finds the promotion runs, changes only the scheduling control of their
FFMAs (the disassembly without control bits and reuse marks is identical), every FFMA it makes
yield has no reuse flag left, and the policy decides how many yield. A patched kernel's results
equal the original's bit for bit on the GPU (tests/test_fp8_gemm_kernel_gpu.py).
"""
import re

import pytest
import torch
from test_compile_sm90 import jit_cache_dir  # noqa: F401 (fixture)

from dg_triton.heuristics.sm90 import make_fp8_config
from dg_triton.jit import compiler, sass_yield
from dg_triton.kernels import sm90_fp8_gemm
from dg_triton.kernels.sm90_fp8_gemm import Fp8GemmKernelSpec

pytestmark = pytest.mark.compile

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,5})\*/\s+(.*?);")


def _spec(*defines):
    config = make_fp8_config("1d2d", 4096, 4096, 128, 128, 1, 7168, 2, 132)
    return Fp8GemmKernelSpec(config, False, torch.bfloat16, False, probe_defines=defines)


@pytest.fixture(scope="module")
def original(jit_cache_dir):  # noqa: F811
    return sm90_fp8_gemm.compile_spec(_spec())


def _instructions(compiled) -> list[str]:
    sass = compiler.disassemble(compiled.entry_dir / "kernel.cubin")
    return [text.replace(".reuse", "") for _, text in _INSTRUCTION.findall(sass)]


def _run_fmas(cubin):
    return [start + 16 * i for start, length in sass_yield.ffma_runs(cubin) for i in range(length)]


def test_the_fp8_kernel_has_promotion_runs_that_ptxas_half_yields(original):
    runs = sass_yield.ffma_runs(original.cubin)
    # 1D2D 128x128: each K block promotes 64 accumulators per thread, in runs of 30-64 FFMAs.
    assert len(runs) >= 8 and max(length for _, length in runs) >= 32, runs
    fmas = _run_fmas(original.cubin)
    yielding = sum(sass_yield.yields(original.cubin, p) for p in fmas)
    assert 0.3 < yielding / len(fmas) < 0.7, (yielding, len(fmas))


@pytest.mark.parametrize("policy", sass_yield.POLICIES)
def test_a_policy_changes_only_control_bits(original, policy):
    patched = sm90_fp8_gemm.compile_spec(_spec(f"DG_PROBE_FFMA_YIELD_{policy.upper()}"))
    assert patched.cubin != original.cubin
    assert len(patched.cubin) == len(original.cubin)
    if compiler.cuobjdump_path() is not None:
        assert _instructions(patched) == _instructions(original)
    fmas = _run_fmas(original.cubin)
    assert _run_fmas(patched.cubin) == fmas
    yielding = [sass_yield.yields(patched.cubin, p) for p in fmas]
    if policy == "none":
        assert not any(yielding)
    elif policy == "all":
        assert all(yielding)
    else:
        assert sum(yielding) > sum(sass_yield.yields(original.cubin, p) for p in fmas)
    for position, yields in zip(fmas, yielding):
        high = int.from_bytes(patched.cubin[position + 8:position + 16], "little")
        assert not (yields and high >> 58 & 0xF), f"a yielding FFMA at {position:#x} keeps a reuse flag"
    # Outside the runs, not a byte changed.
    changed = {p for p in range(0, len(patched.cubin), 16)
               if patched.cubin[p:p + 16] != original.cubin[p:p + 16]}
    assert changed <= set(fmas)


def test_the_pass_rejects_what_it_cannot_patch():
    with pytest.raises(ValueError, match="policy"):
        sass_yield.set_ffma_yield(b"\x7fELF" + bytes(60), "sometimes")
    with pytest.raises(ValueError, match="ELF"):
        sass_yield.text_sections(b"not a cubin")


def test_1d1d_binaries_take_the_front_policy_by_default_and_1d2d_keep_ptxas_hints(jit_cache_dir, monkeypatch):  # noqa: F811
    config = make_fp8_config("1d1d", 4096, 4096, 128, 128, 1, 7168, 4, 132)
    wgrad = Fp8GemmKernelSpec(config, True, torch.float32, True)
    assert wgrad.ffma_yield == "front" and _spec().ffma_yield is None
    assert Fp8GemmKernelSpec(config, True, torch.float32, True,
                             probe_defines=("DG_PROBE_FFMA_YIELD_PTXAS",)).ffma_yield is None
    patched = sm90_fp8_gemm.compile_spec(wgrad)
    fmas = _run_fmas(patched.cubin)
    # "front": the first half of every run yields, ptxas's every other FFMA in the second half.
    assert sum(sass_yield.yields(patched.cubin, p) for p in fmas) / len(fmas) > 0.7
    monkeypatch.setenv("DG_JIT_DISABLE_FFMA_INTERLEAVE", "1")
    assert wgrad.ffma_yield is None
