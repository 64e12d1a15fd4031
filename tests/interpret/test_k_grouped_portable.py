"""The K-grouped GEMMs (dg_triton/k_grouped.py) on the portable path: one launch of the portable
dense Triton GEMM per non-empty group, under the interpreter on CPU tensors, through the public
calls, against dg_triton.reference_k_grouped per group with API.md 8's thresholds (BF16 1e-5; FP8
1e-3 against the unquantized inputs, and 1e-5 against the reference on the dequantized operands,
where only the summation order differs).

calc_diff is taken on d[g] as upstream does, and, against the references that compute the same
math (BF16; FP8 dequantized), also on each group's product d[g] - c[g]: c = randn * 32 (API.md 8)
dominates d, and a wrong product must not hide under it (FP8 against the unquantized inputs is
compared on d[g] only: its product carries the FP8 rounding, ~1e-3 in calc_diff on its own).
Empty groups must equal c exactly.
d is poisoned with NaN where c is a separate tensor, so an element left unwritten shows. Sizes are
small (M 48 and N 40: partial 32 x 64 interpreter tiles; K per group 0 to 256) to stay fast.
"""
import random

import pytest
import torch

import dg_triton
from dg_triton import reference_k_grouped
from dg_triton.testing import calc_diff

BF16_THRESHOLD = 1e-5
FP8_THRESHOLD = 1e-3
FP8_DEQUANTIZED_THRESHOLD = 1e-5
M, N = 48, 40
KS = [[128], [256, 0, 128], [0, 128, 256, 128]]


@pytest.fixture(autouse=True)
def _automatic_backend(monkeypatch):
    monkeypatch.delenv("DG_BACKEND", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _generator():
    seed = random.randrange(2 ** 31)
    return torch.Generator().manual_seed(seed), f"seed={seed}"


def _check_groups(d, c, expected, ks, threshold, what, products=True):
    assert torch.isfinite(d).all(), f"{what}: unwritten (NaN) or non-finite elements"
    for g, k in enumerate(ks):
        if k == 0:
            assert torch.equal(d[g], c[g]), f"{what}: empty group {g} is not c"
            continue
        pairs = [("d", d[g], expected[g])]
        if products:
            pairs.append(("d - c", d[g] - c[g], expected[g] - c[g]))
        for label, out, ref in pairs:
            diff = float(calc_diff(out.double(), ref.double()))
            assert diff < threshold, f"{what} group {g} ({label}): calc_diff {diff:.3g} >= {threshold}"


def _inputs(ks, generator, c_is_d, d_dtype=torch.float32):
    sum_k = sum(ks)
    a = torch.randn(sum_k, M, generator=generator).to(torch.bfloat16)
    b = torch.randn(sum_k, N, generator=generator).to(torch.bfloat16)
    c = (torch.randn(len(ks), M, N, generator=generator) * 32).to(d_dtype)
    d = c if c_is_d else torch.full_like(c, float("nan"))
    return a, b, c, d, torch.tensor(ks, dtype=torch.int32)


@pytest.mark.parametrize("ks", KS)
@pytest.mark.parametrize("c_is_d", [False, True])
def test_bf16_tn_matches_reference_per_group(ks, c_is_d):
    generator, what = _generator()
    a, b, c, d, grouped_layout = _inputs(ks, generator, c_is_d)
    c_before = c.clone()
    expected = reference_k_grouped.k_grouped_bf16_tn_reference(a, b, c_before, ks)
    dg_triton.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, grouped_layout, c=c)
    _check_groups(d, c_before, expected, ks, BF16_THRESHOLD, f"{what} ks={ks} c_is_d={c_is_d}")
    if not c_is_d:
        assert torch.equal(c, c_before), "c was written"


def test_bf16_tn_with_a_bf16_d():
    """API.md 1.3: k-grouped BF16 checks only bf16/fp32 for d; a bf16 d accumulates in FP32 and is
    rounded once per group."""
    generator, what = _generator()
    ks = [128, 0, 256]
    a, b, c, d, grouped_layout = _inputs(ks, generator, False, torch.bfloat16)
    expected = reference_k_grouped.k_grouped_bf16_tn_reference(a, b, c, ks)
    dg_triton.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, grouped_layout, c=c)
    assert torch.isfinite(d.float()).all() and torch.equal(d[1], c[1]), what
    for g in (0, 2):
        diff = float(calc_diff(d[g].double(), expected[g].double()))
        assert diff < BF16_THRESHOLD, f"{what} group {g}: calc_diff {diff:.3g}"


@pytest.mark.parametrize("ks", KS)
@pytest.mark.parametrize("c_is_d", [False, True])
@pytest.mark.parametrize("sf_layout", ["mn_major", "row_major"])
def test_fp8_nt_matches_reference_per_group(ks, c_is_d, sf_layout):
    """Operands as upstream builds them: per-channel casts of [sum(ks), MN] tensors, each group's
    rows transposed into a K-major block; the SFs are the casts' transposes, already in the
    TMA-aligned MN-major layout (M and N are multiples of 4), or ("row_major") contiguous
    [MN, sum(ks)/128] copies that the call must bring into it."""
    generator, what = _generator()
    a, b, c, d, grouped_layout = _inputs(ks, generator, c_is_d)
    a_fp8 = reference_k_grouped.k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(a, False), ks)
    b_fp8 = reference_k_grouped.k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(b, False), ks)
    if sf_layout == "row_major":
        a_fp8, b_fp8 = (a_fp8[0], a_fp8[1].contiguous()), (b_fp8[0], b_fp8[1].contiguous())
    c_before = c.clone()
    dequantized = reference_k_grouped.k_grouped_fp8_nt_reference(a_fp8, b_fp8, c_before, ks)
    unquantized = reference_k_grouped.k_grouped_bf16_tn_reference(a, b, c_before, ks)
    dg_triton.k_grouped_fp8_gemm_nt_contiguous(a_fp8, b_fp8, d, ks, grouped_layout, c=c)
    what = f"{what} ks={ks} c_is_d={c_is_d} sf={sf_layout}"
    _check_groups(d, c_before, dequantized, ks, FP8_DEQUANTIZED_THRESHOLD, f"{what} vs dequantized")
    _check_groups(d, c_before, unquantized, ks, FP8_THRESHOLD, f"{what} vs unquantized", products=False)
    if not c_is_d:
        assert torch.equal(c, c_before), "c was written"
