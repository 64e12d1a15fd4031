"""dg_triton.fp8_gemm_* on an SM90 GPU through the public API: the FP8 shapes of API.md 8 and
issue 4 (forward at M in {1, 64, 128, 4096} x the 7 DeepSeek (N, K), dgrad, wgrad with the 1D1D
recipe and accumulation, M tails, skip-head-mid), CUDA-graph capture.

Inputs are randn BF16 with a magnitude of 2^e (e in [-3, 3]) per scale group, so that a scale
applied to the wrong group shows (plain randn gives nearly equal scales everywhere), quantized with
our casts the way DeepGEMM's tests do (per-token 1x128 for A,
per-block 128x128 for B in 1D2D, per-token for B in 1D1D), scales passed as plain row-major FP32 so
the public layer's scale-layout transform is exercised too. The reference is API.md 8's: the
unquantized inputs multiplied in FP32 (so the FP8 error is included), threshold calc_diff < 1e-3.
Outputs are poisoned with NaN before each call (accumulating calls start from c instead).
"""
import pytest
import torch
from cupti import needs_cupti
from shapes import (FP8_DENSE_DGRAD_MNK, FP8_DENSE_FORWARD_M, FP8_DENSE_NK, FP8_DENSE_TAIL_M,
                    FP8_DENSE_WGRAD_MNK, FP8_SKIP_HEAD_MID_MNK, FP8_SKIP_HEAD_MID_SPLITS)

pytestmark = pytest.mark.gpu

THRESHOLD = 1e-3


@pytest.fixture(autouse=True)
def _sm90_only():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an SM90 GPU")


def _quantized(m, n, k, per_token_b=False):
    import dg_triton

    from test_fp8_gemm_kernel_gpu import scale_groups_apart

    a = scale_groups_apart(m, k, 1)
    b = scale_groups_apart(n, k, 1 if per_token_b else 128)
    a_fp8 = dg_triton.per_token_cast_to_fp8(a, False)
    b_fp8 = dg_triton.per_token_cast_to_fp8(b, False) if per_token_b else dg_triton.per_block_cast_to_fp8(b, False)
    return a, b, a_fp8, b_fp8


def _check(d, expected):
    from dg_triton.testing import calc_diff

    assert torch.isfinite(d).all(), "unwritten (NaN) or non-finite output elements"
    diff = calc_diff(d.float(), expected)
    assert diff < THRESHOLD, f"calc_diff {diff:.3g} >= {THRESHOLD}"


@pytest.mark.parametrize("m", FP8_DENSE_FORWARD_M)
@pytest.mark.parametrize("n,k", FP8_DENSE_NK)
def test_fp8_gemm_nt_1d2d_matches_reference_on_deepseek_shapes(m, n, k):
    import dg_triton

    a, b, a_fp8, b_fp8 = _quantized(m, n, k)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)
    _check(d, a.float() @ b.float().T)


@pytest.mark.parametrize("m,n,k", FP8_DENSE_DGRAD_MNK)
def test_fp8_gemm_nt_dgrad_shapes(m, n, k):
    import dg_triton

    a, b, a_fp8, b_fp8 = _quantized(m, n, k)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)
    _check(d, a.float() @ b.float().T)


@pytest.mark.parametrize("m,n,k", FP8_DENSE_WGRAD_MNK)
def test_fp8_gemm_nt_1d1d_wgrad_accumulates_into_d(m, n, k):
    import dg_triton

    a, b, a_fp8, b_fp8 = _quantized(m, n, k, per_token_b=True)
    c = torch.randn(m, n, device="cuda").mul_(32)
    d = c.clone()
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d, c=d, recipe=(1, 1, 128))
    _check(d, c + a.float() @ b.float().T)


def test_fp8_gemm_nt_1d1d_with_a_separate_c():
    import dg_triton

    m, n, k = 256, 576, 7168
    a, b, a_fp8, b_fp8 = _quantized(m, n, k, per_token_b=True)
    c = torch.randn(m, n, device="cuda").mul_(32)
    d = torch.full((m, n), float("nan"), device="cuda")
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d, c=c, recipe=(1, 1, 128))
    _check(d, c + a.float() @ b.float().T)


@pytest.mark.parametrize("m", FP8_DENSE_TAIL_M)
def test_fp8_gemm_nt_m_tails(m):
    import dg_triton

    n, k = 576, 7168
    a, b, a_fp8, b_fp8 = _quantized(m, n, k)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)
    _check(d, a.float() @ b.float().T)


@pytest.mark.parametrize("m,n,k", FP8_SKIP_HEAD_MID_MNK)
def test_fp8_gemm_nt_skip_head_mid_leaves_mid_columns(m, n, k):
    import dg_triton

    left, mid, right = FP8_SKIP_HEAD_MID_SPLITS
    heads = n // (left + right)
    a, b, a_fp8, b_fp8 = _quantized(m, n, k)
    d = torch.full((m, heads * (left + mid + right)), float("nan"), device="cuda", dtype=torch.bfloat16)
    sentinel = 4096.0
    d.view(m, heads, -1)[:, :, left:left + mid] = sentinel
    dg_triton.fp8_gemm_nt_skip_head_mid(a_fp8, b_fp8, d, (left, mid, right))
    out = d.view(m, heads, -1)
    assert (out[:, :, left:left + mid] == sentinel).all(), "mid columns were written"
    written = torch.cat([out[:, :, :left], out[:, :, left + mid:]], dim=2).reshape(m, n)
    _check(written, a.float() @ b.float().T)


def test_fp8_gemm_nt_captures_in_a_cuda_graph():
    import dg_triton

    m, n, k = 256, 2112, 7168
    a, b, a_fp8, b_fp8 = _quantized(m, n, k)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)  # plan and compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)
    # New inputs in the same buffers: the replay must compute with them.
    a.copy_(torch.randn_like(a))
    a_new = dg_triton.per_token_cast_to_fp8(a, False)
    a_fp8[0].copy_(a_new[0])
    a_fp8[1].copy_(a_new[1])
    d.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check(d, a.float() @ b.float().T)


@needs_cupti
@pytest.mark.parametrize("m,n,k", [(128, 576, 7168), (64, 2112, 7168)])
def test_a_captured_split_k_fp8_gemm_replays_as_its_kernel_alone(m, n, k):
    """A split-K call (the heuristics split these shapes) with scales already in the kernel's
    layout, captured in a CUDA graph, replays as the GEMM kernel alone (its counters come zeroed
    from the reserve an eager launch made, not from a fill captured with it), and rightly."""
    import dg_triton
    from dg_triton.heuristics.sm90 import choose_fp8_gemm_config
    from dg_triton.testing import replay_kernel_names

    assert choose_fp8_gemm_config(m, n, k, 2, 132).num_splits > 1
    a, b, _, b_fp8 = _quantized(m, n, k)
    a_fp8 = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)   # compile and plan, eagerly: the reserve is made here
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)
    assert replay_kernel_names(graph) == ["sm90_fp8_gemm"]
    for _ in range(2):
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(d, a.float() @ b.float().T)
