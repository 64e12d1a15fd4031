"""The FP8 and BF16 GEMV (dg_triton/triton/gemv.py) on a CUDA GPU: the decode shapes of API.md 8
(M = 1 against the 7 (N, K) pairs) and M up to MAX_ROWS, both FP8 recipes, against the unquantized
reference (FP8 calc_diff < 1e-3, BF16 < 1e-5) with poisoned outputs, and a CUDA-graph capture and
replay with new inputs (no host sync, one kernel per replay with split-K). The interpreter tests (tests/interpret/test_gemv.py)
cover the tails and forced configs; these run the compiled kernel.
"""
import pytest
import torch

from cupti import needs_cupti

pytestmark = pytest.mark.gpu

THRESHOLD = 1e-3
NK_PAIRS = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
            (7168, 2048)]


def _require_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def _operands(m, n, k, kind):
    import dg_triton
    from dg_triton.utils.layout import get_mn_major_tma_aligned_tensor

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
    if kind == "1d2d":
        b_q, sfb = dg_triton.per_block_cast_to_fp8(b, False)
    else:
        b_q, sfb = dg_triton.per_token_cast_to_fp8(b, False)
        sfb = get_mn_major_tma_aligned_tensor(sfb)
    return a, b, a_q, sfa, b_q, sfb


@pytest.mark.parametrize("n,k", NK_PAIRS)
def test_gemv_decode_shapes_match_reference(n, k):
    _require_cuda()
    from dg_triton.testing import calc_diff
    from dg_triton.triton import gemv

    a, b, a_q, sfa, b_q, sfb = _operands(1, n, k, "1d2d")
    d = torch.full((1, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemv.fp8_gemv("test", a_q, sfa, b_q, sfb, d, "1d2d", False)
    torch.cuda.synchronize()
    assert torch.isfinite(d).all()
    assert calc_diff(d.float(), a.float() @ b.float().T) < THRESHOLD


@pytest.mark.parametrize("m", [2, 3, 8])
@pytest.mark.parametrize("kind", ["1d2d", "1d1d"])
def test_gemv_several_rows_and_both_recipes(m, kind):
    _require_cuda()
    from dg_triton.testing import calc_diff
    from dg_triton.triton import gemv

    n, k = 4096, 7168
    a, b, a_q, sfa, b_q, sfb = _operands(m, n, k, kind)
    if kind == "1d2d":
        c, d = None, torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    else:
        c = torch.randn(m, n, device="cuda") * 32
        d = c.clone()
    gemv.fp8_gemv("test", a_q, sfa, b_q, sfb, d, kind, c is not None)
    torch.cuda.synchronize()
    assert torch.isfinite(d).all()
    expected = a.float() @ b.float().T + (c if c is not None else 0)
    assert calc_diff(d.float(), expected) < THRESHOLD


@needs_cupti
def test_gemv_in_a_cuda_graph_replays_with_new_inputs():
    _require_cuda()
    from dg_triton.testing import calc_diff, replay_kernel_names
    from dg_triton.triton import gemv

    # split-K: the workspace and counters are the graph's; the slab's last slice sums the
    # partials in the same kernel, and the counters come zeroed without a fill in the graph
    n, k = 2112, 7168
    a, b, a_q, sfa, b_q, sfb = _operands(1, n, k, "1d2d")
    assert gemv.choose_config(1, n, k, torch.cuda.get_device_properties(0).multi_processor_count).split_k > 1
    d = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
    gemv.fp8_gemv("test", a_q, sfa, b_q, sfb, d, "1d2d", False)   # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemv.fp8_gemv("test", a_q, sfa, b_q, sfb, d, "1d2d", False)
    assert replay_kernel_names(graph) == ["_gemv_kernel"]
    for _ in range(2):
        a2, _, a2_q, sfa2, _, _ = _operands(1, n, k, "1d2d")
        a_q.copy_(a2_q)
        sfa.copy_(sfa2)
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.isfinite(d).all()
        assert calc_diff(d.float(), a2.float() @ b.float().T) < THRESHOLD


@pytest.mark.parametrize("n,k", NK_PAIRS)
def test_bf16_gemv_decode_shapes_match_reference(n, k):
    _require_cuda()
    from dg_triton.testing import calc_diff
    from dg_triton.triton import gemv

    a = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    d = torch.full((1, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemv.bf16_gemv("test", a, b, d, False)
    torch.cuda.synchronize()
    assert torch.isfinite(d).all()
    assert calc_diff(d.float(), a.float() @ b.float().T) < 1e-5


@pytest.mark.parametrize("m", [2, 5, 8])
def test_bf16_gemv_several_rows_accumulating_into_fp32(m):
    _require_cuda()
    from dg_triton.testing import calc_diff
    from dg_triton.triton import gemv

    n, k = 4096, 7168
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(m, n, device="cuda") * 32
    d = c.clone()
    gemv.bf16_gemv("test", a, b, d, True)
    torch.cuda.synchronize()
    assert calc_diff(d, a.float() @ b.float().T + c) < 1e-5


@needs_cupti
def test_a_gemv_captured_after_other_split_k_captures_gets_aligned_counters():
    """A split-K BF16 GEMM captured first takes 66 counters from the zeroed reserve; a GEMV
    captured after it must still get 16-byte aligned ones (Triton specializes pointers on it: a
    misaligned slice would need a kernel the eager warm-up did not build, compiled mid-capture),
    replay as one kernel and be right."""
    _require_cuda()
    import dg_triton
    from dg_triton.testing import calc_diff, replay_kernel_names
    from dg_triton.triton import gemv

    a16 = torch.randn(128, 7168, device="cuda", dtype=torch.bfloat16)
    b16 = torch.randn(2112, 7168, device="cuda", dtype=torch.bfloat16)
    d16 = torch.empty(128, 2112, device="cuda", dtype=torch.bfloat16)
    a, b, a_q, sfa, b_q, sfb = _operands(1, 2112, 7168, "1d2d")
    d = torch.empty(1, 2112, device="cuda", dtype=torch.bfloat16)
    dg_triton.bf16_gemm_nt(a16, b16, d16)                           # eager warm-ups
    gemv.fp8_gemv("test", a_q, sfa, b_q, sfb, d, "1d2d", False)
    torch.cuda.synchronize()
    first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(first):
        dg_triton.bf16_gemm_nt(a16, b16, d16)
    with torch.cuda.graph(second):
        gemv.fp8_gemv("test", a_q, sfa, b_q, sfb, d, "1d2d", False)
    from dg_triton.kernels import split_scratch
    captured = [s for v in split_scratch._capture_scratch.values() for s in (v if isinstance(v, list) else [v])]
    assert captured and all(s.counters.data_ptr() % 16 == 0 for s in captured)
    assert replay_kernel_names(second) == ["_gemv_kernel"]
    d.fill_(float("nan"))
    second.replay()
    first.replay()
    torch.cuda.synchronize()
    assert torch.isfinite(d).all() and calc_diff(d.float(), a.float() @ b.float().T) < THRESHOLD
    assert calc_diff(d16.float(), a16.float() @ b16.float().T) < 1e-5
