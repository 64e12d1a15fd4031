"""The portable Triton GEMMs on a GPU through the public API, forced with DG_BACKEND=triton (so on
the H200 they run instead of the SM90 CUDA kernels): the dense shapes of API.md 8 for BF16 (forward
with bf16 and fp32 D, dgrad, wgrad with accumulation, every alias) and FP8 (1D2D forward and
dgrad, 1D1D wgrad with accumulation), M tails, skip-head-mid, CUDA-graph capture, NaN inputs.

Runs on any CUDA GPU Triton supports (the portable path is the only one on non-SM90 GPUs).
Inputs are randn; FP8 operands quantized with our casts as in tests/test_fp8_gemm_gpu.py; references
as API.md 8 (unquantized inputs in FP32, so the FP8 error is included). Outputs poisoned with NaN.
"""
import pytest
import torch
from shapes import (
    BF16_DENSE_BF16_OUT_NK,
    BF16_DENSE_DGRAD_MNK,
    BF16_DENSE_EDGE_M,
    BF16_DENSE_EDGE_NK,
    BF16_DENSE_FORWARD_M,
    BF16_DENSE_FP32_OUT_NK,
    BF16_DENSE_LARGE_NK,
    BF16_DENSE_WGRAD_MNK,
    FP8_DENSE_DGRAD_MNK,
    FP8_DENSE_FORWARD_M,
    FP8_DENSE_NK,
    FP8_DENSE_TAIL_M,
    FP8_DENSE_WGRAD_MNK,
    FP8_SKIP_HEAD_MID_MNK,
    FP8_SKIP_HEAD_MID_SPLITS,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BF16_THRESHOLD = 1e-5
FP8_THRESHOLD = 1e-3


@pytest.fixture(autouse=True)
def _portable_backend(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "triton")
    from dg_triton import dispatch
    yield
    assert dispatch.backend("bf16_gemm_nt", torch.device("cuda"), (dispatch.SM90,)) == dispatch.PORTABLE


def _check(d, expected, threshold):
    from dg_triton.testing import calc_diff

    assert torch.isfinite(d).all(), "unwritten (NaN) or non-finite output elements"
    diff = float(calc_diff(d.float(), expected))
    assert diff < threshold, f"calc_diff {diff:.3g} >= {threshold}"


def _bf16_operands(alias, m, n, k):
    a = torch.randn((k, m) if alias[0] == "t" else (m, k), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((k, n) if alias[1] == "n" else (n, k), device="cuda", dtype=torch.bfloat16)
    a_nt = a.T if alias[0] == "t" else a
    b_nt = b.T if alias[1] == "n" else b
    return a, b, a_nt.float() @ b_nt.float().T


# --- BF16 -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("m", BF16_DENSE_FORWARD_M)
@pytest.mark.parametrize("n,k", BF16_DENSE_BF16_OUT_NK + BF16_DENSE_FP32_OUT_NK)
def test_portable_bf16_forward_matches_reference(m, n, k):
    import dg_triton

    if (n, k) in BF16_DENSE_LARGE_NK and m == 4096:
        pytest.skip("the LM head at M=4096 runs once, in the accumulate test")
    out = torch.float32 if (n, k) in BF16_DENSE_FP32_OUT_NK else torch.bfloat16
    a, b, expected = _bf16_operands("nt", m, n, k)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=out)
    dg_triton.bf16_gemm_nt(a, b, d)
    _check(d, expected, BF16_THRESHOLD)


@pytest.mark.parametrize("m", BF16_DENSE_FORWARD_M)
@pytest.mark.parametrize("n,k", BF16_DENSE_BF16_OUT_NK)
def test_portable_bf16_forward_accumulates_into_a_separate_c(m, n, k):
    import dg_triton

    a, b, expected = _bf16_operands("nt", m, n, k)
    c = torch.randn(m, n, device="cuda").mul_(32).bfloat16()
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg_triton.bf16_gemm_nt(a, b, d, c)
    _check(d, c.float() + expected, BF16_THRESHOLD)


@pytest.mark.parametrize("m,n,k", BF16_DENSE_DGRAD_MNK)
def test_portable_bf16_dgrad_with_b_mn_major(m, n, k):
    import dg_triton

    a, b, expected = _bf16_operands("nn", m, n, k)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg_triton.bf16_gemm_nn(a, b, d)
    _check(d, expected, BF16_THRESHOLD)


@pytest.mark.parametrize("m,n,k", BF16_DENSE_WGRAD_MNK)
def test_portable_bf16_wgrad_with_both_mn_major_accumulates_in_fp32(m, n, k):
    import dg_triton

    if (m, n, k)[0] in [nk[0] for nk in BF16_DENSE_LARGE_NK]:
        pytest.skip("an fp32 D of 129280 x 4096 plus its reference: covered by the forward tests")
    a, b, expected = _bf16_operands("tn", m, n, k)
    c = torch.randn(m, n, device="cuda").mul_(32)
    d = c.clone()
    dg_triton.bf16_gemm_tn(a, b, d, d)
    _check(d, c + expected, BF16_THRESHOLD)
    d_bf16 = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg_triton.bf16_gemm_tn(a, b, d_bf16)
    _check(d_bf16, expected, BF16_THRESHOLD)


@pytest.mark.parametrize("alias", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("m", BF16_DENSE_EDGE_M)
def test_portable_bf16_every_alias_at_edge_m(alias, m):
    import dg_triton

    n, k = BF16_DENSE_EDGE_NK
    if alias[0] == "t" and m % 8:
        m_padded = m + 8 - m % 8  # an MN-major A needs 16-byte rows: pad and view
        a_full = torch.randn(k, m_padded, device="cuda", dtype=torch.bfloat16)
        a = a_full[:, :m]
        b = torch.randn((k, n) if alias[1] == "n" else (n, k), device="cuda", dtype=torch.bfloat16)
        expected = a.T.float() @ (b.T if alias[1] == "n" else b).float().T
    else:
        a, b, expected = _bf16_operands(alias, m, n, k)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    getattr(dg_triton, f"bf16_gemm_{alias}")(a, b, d)
    _check(d, expected, BF16_THRESHOLD)


# --- FP8 --------------------------------------------------------------------------------------------

def _fp8_operands(m, n, k, per_token_b=False):
    import dg_triton

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_fp8 = dg_triton.per_token_cast_to_fp8(a, False)
    b_fp8 = dg_triton.per_token_cast_to_fp8(b, False) if per_token_b else dg_triton.per_block_cast_to_fp8(b, False)
    return a_fp8, b_fp8, a.float() @ b.float().T


@pytest.mark.parametrize("m", FP8_DENSE_FORWARD_M + FP8_DENSE_TAIL_M)
@pytest.mark.parametrize("n,k", FP8_DENSE_NK)
def test_portable_fp8_1d2d_forward_matches_reference(m, n, k):
    import dg_triton

    a_fp8, b_fp8, expected = _fp8_operands(m, n, k)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)
    _check(d, expected, FP8_THRESHOLD)


@pytest.mark.parametrize("m,n,k", FP8_DENSE_DGRAD_MNK)
def test_portable_fp8_dgrad(m, n, k):
    import dg_triton

    a_fp8, b_fp8, expected = _fp8_operands(m, n, k)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)
    _check(d, expected, FP8_THRESHOLD)


@pytest.mark.parametrize("m,n,k", FP8_DENSE_WGRAD_MNK)
def test_portable_fp8_1d1d_wgrad_accumulates_into_d(m, n, k):
    import dg_triton

    a_fp8, b_fp8, expected = _fp8_operands(m, n, k, per_token_b=True)
    c = torch.randn(m, n, device="cuda").mul_(32)
    d = c.clone()
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d, c=d, recipe=(1, 1, 128))
    _check(d, c + expected, FP8_THRESHOLD)


@pytest.mark.parametrize("m,n,k", FP8_SKIP_HEAD_MID_MNK)
def test_portable_fp8_skip_head_mid_leaves_mid_columns(m, n, k):
    import dg_triton

    left, mid, right = FP8_SKIP_HEAD_MID_SPLITS
    heads = n // (left + right)
    a_fp8, b_fp8, expected = _fp8_operands(m, n, k)
    d = torch.full((m, heads * (left + mid + right)), float("nan"), device="cuda", dtype=torch.bfloat16)
    d.view(m, heads, -1)[:, :, left:left + mid] = 4096.0
    dg_triton.fp8_gemm_nt_skip_head_mid(a_fp8, b_fp8, d, (left, mid, right))
    out = d.view(m, heads, -1)
    assert (out[:, :, left:left + mid] == 4096.0).all(), "mid columns were written"
    _check(torch.cat([out[:, :, :left], out[:, :, left + mid:]], dim=2).reshape(m, n), expected, FP8_THRESHOLD)


# --- graphs and non-finite inputs -------------------------------------------------------------------

def test_portable_gemms_capture_in_a_cuda_graph():
    import dg_triton

    m, n, k = 256, 2112, 7168
    a_fp8, b_fp8, expected = _fp8_operands(m, n, k)
    a, b, expected_bf16 = _bf16_operands("nt", m, n, k)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    d2 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)  # compile outside the capture
    dg_triton.bf16_gemm_nt(a, b, d2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)
        dg_triton.bf16_gemm_nt(a, b, d2)
    d.fill_(float("nan"))
    d2.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check(d, expected, FP8_THRESHOLD)
    _check(d2, expected_bf16, BF16_THRESHOLD)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_portable_non_finite_inputs_propagate_to_their_row_as_the_reference(value):
    """A NaN (or Inf) in row r of A makes row r of D non-finite, as the reference does (an Inf
    meets products of both signs, or zeros, and gives NaN or Inf); the other rows are unaffected.
    FP8 E4M3 has no Inf: a NaN code in the data does the same. Every call returns (no hang)."""
    import dg_triton

    m, n, k = 128, 576, 7168
    row = 5
    a, b, _ = _bf16_operands("nt", m, n, k)
    a[row, 100] = value
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg_triton.bf16_gemm_nt(a, b, d)
    reference = a.float() @ b.float().T
    assert torch.equal(torch.isfinite(d), torch.isfinite(reference))
    others = torch.arange(m, device="cuda") != row
    _check(d[others], reference[others], BF16_THRESHOLD)

    (a_data, sfa), b_fp8, expected = _fp8_operands(m, n, k)
    a_data = a_data.clone()
    a_data[row, 100] = float("nan")
    d = torch.full((m, n), 0.0, device="cuda", dtype=torch.bfloat16)
    dg_triton.fp8_gemm_nt((a_data, sfa), b_fp8, d)
    torch.cuda.synchronize()
    assert torch.isnan(d[row]).all()
    _check(d[others], expected[others], FP8_THRESHOLD)
