"""Reference math of the dense GEMMs (API.md 1.1, 1.3, 3.2)."""
import random

import pytest
import torch

from dg_triton.errors import DGArgumentError
from dg_triton.reference import bf16_gemm_reference, gemm_reference

LAYOUTS = ("nt", "nn", "tn", "tt")


def _physical(a_logical, b_logical, layout):
    """The tensors a caller passes to the ``layout`` alias for logical A [M, K], B [N, K]."""
    a = a_logical.T.contiguous() if layout[0] == "t" else a_logical
    b = b_logical.T.contiguous() if layout[1] == "n" else b_logical
    return a, b


def _elementwise_product_sum(a_logical, b_logical):
    # Sum over k of A[m, k] * B[n, k] without a matmul, so the check does not share the
    # reference's code path.
    return (a_logical.double()[:, None, :] * b_logical.double()[None, :, :]).sum(-1)


def _random_problem():
    m, n, k = random.randint(1, 48), random.randint(1, 48), random.randint(1, 96)
    return (torch.randn(m, k).to(torch.bfloat16), torch.randn(n, k).to(torch.bfloat16))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_each_alias_reference_equals_the_logical_product(layout, out_dtype):
    a_logical, b_logical = _random_problem()
    a, b = _physical(a_logical, b_logical, layout)
    d = torch.full((a_logical.size(0), b_logical.size(0)), float("nan"), dtype=out_dtype)
    out = gemm_reference(a, b, d, None, layout)
    assert out.dtype == out_dtype and out.shape == d.shape
    expected = _elementwise_product_sum(a_logical, b_logical)
    tolerance = dict(rtol=1e-5, atol=1e-5) if out_dtype == torch.float32 else dict(rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(out.double(), expected.to(out_dtype).double(), **tolerance)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_alias_reference_equals_explicit_matmul_of_transposed_views(layout):
    a_logical, b_logical = _random_problem()
    a, b = _physical(a_logical, b_logical, layout)
    a_view = a.transpose(0, 1) if layout[0] == "t" else a
    b_view = b.transpose(0, 1) if layout[1] == "n" else b
    d = torch.empty(a_logical.size(0), b_logical.size(0), dtype=torch.float32)
    torch.testing.assert_close(gemm_reference(a, b, d, None, layout), a_view.float() @ b_view.float().T,
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reference_adds_c_to_the_product(layout):
    a_logical, b_logical = _random_problem()
    a, b = _physical(a_logical, b_logical, layout)
    c = torch.randn(a_logical.size(0), b_logical.size(0)) * 100
    d = torch.empty_like(c)
    expected = c.double() + _elementwise_product_sum(a_logical, b_logical)
    torch.testing.assert_close(gemm_reference(a, b, d, c, layout).double(), expected, rtol=1e-5, atol=1e-4)


def test_reference_with_c_is_d_accumulates_onto_d_values():
    a_logical, b_logical = _random_problem()
    d = torch.randn(a_logical.size(0), b_logical.size(0))
    before = d.clone()
    out = gemm_reference(a_logical, b_logical, d, d, "nt")
    torch.testing.assert_close(out, before + a_logical.float() @ b_logical.float().T)
    assert torch.equal(d, before), "the reference must not write into d"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("empty", ["m", "n"])
def test_reference_with_m_or_n_zero_leaves_d_unchanged(layout, empty):
    m, n, k = random.randint(1, 16), random.randint(1, 16), random.randint(1, 32)
    m, n = (0, n) if empty == "m" else (m, 0)
    a, b = _physical(torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16(), layout)
    d = torch.randn(m, n)
    c = torch.randn(m, n)
    out = gemm_reference(a, b, d, c, layout)
    assert out.shape == d.shape and torch.equal(out, d)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reference_with_k_zero_gives_c_or_zeros(layout):
    m, n = random.randint(1, 16), random.randint(1, 16)
    a, b = _physical(torch.randn(m, 0).bfloat16(), torch.randn(n, 0).bfloat16(), layout)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = torch.randn(m, n).bfloat16()
    assert torch.equal(gemm_reference(a, b, d, c, layout), c)
    zeros = gemm_reference(a, b, d, None, layout)
    assert zeros.dtype == torch.bfloat16 and torch.equal(zeros, torch.zeros(m, n, dtype=torch.bfloat16))


def test_bf16_reference_rounds_once_from_fp32_to_out_dtype():
    a_logical, b_logical = _random_problem()
    c = torch.randn(a_logical.size(0), b_logical.size(0))
    exact = c + a_logical.float() @ b_logical.float().T
    out = bf16_gemm_reference(a_logical, b_logical, c, torch.bfloat16)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, exact.bfloat16(), rtol=0, atol=0)


@pytest.mark.parametrize("bad", ["NT", "n", "ntt", None])
def test_unknown_layout_is_rejected(bad):
    a, b = _random_problem()
    with pytest.raises(DGArgumentError, match="layout"):
        gemm_reference(a, b, torch.empty(a.size(0), b.size(0)), None, bad)
