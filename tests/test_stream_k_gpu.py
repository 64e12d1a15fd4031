"""Stream-K (scheduler.cuh StreamKTileScheduler) in the SM90 BF16 and FP8 dense kernels, on an SM90
GPU, with forced configs: small grids (7 to 13 CTAs) so that the tiles past the last whole wave are
cut into up to five pieces each, M, N and K tails, both out dtypes, accumulation into D, MN-major
operands; against the references, outputs poisoned with NaN, bitwise reproducible from run to run
(the pieces are summed in a fixed order), and in a CUDA graph."""
from dataclasses import replace

import pytest
import torch

pytestmark = pytest.mark.gpu


def _require_sm90():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an SM90 GPU")


def _bf16_case(alias, m, n, k, out_dtype, accumulate):
    """(operands in NT form, d poisoned (or holding c), expected, validated problem)."""
    from dg_triton import validation

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_nt = a if alias[0] == "n" else a.T.contiguous().T      # MN-major A: the same logical [M, K]
    b_nt = b if alias[1] == "t" else b.T.contiguous().T
    d = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    expected = a.float() @ b.float().T
    if accumulate:
        c = torch.randn(m, n, device="cuda").to(out_dtype)
        d.copy_(c)
        expected += c.float()
    problem = validation.bf16_gemm("test", a_nt, b_nt, d, d if accumulate else None)
    return a_nt, b_nt, d, expected, problem


@pytest.mark.parametrize("grid", (7, 10, 13))
@pytest.mark.parametrize("alias,out_dtype,accumulate,block_m,block_n", [
    ("nt", torch.bfloat16, False, 128, 256), ("nt", torch.bfloat16, False, 128, 128),
    ("nt", torch.float32, True, 64, 96), ("tn", torch.float32, False, 128, 64),
    ("tt", torch.bfloat16, True, 64, 128),
])
def test_bf16_stream_k_matches_reference_and_repeats_bitwise(grid, alias, out_dtype, accumulate,
                                                           block_m, block_n):
    _require_sm90()
    from dg_triton.heuristics.sm90 import make_config
    from dg_triton.kernels import sm90_bf16_gemm
    from dg_triton.testing import calc_diff

    # Tails along M, N and K (24 K blocks, the last partial); MN-major strides stay 16-byte multiples.
    m, n, k = 336, 1000, 1496
    a_nt, b_nt, d, expected, problem = _bf16_case(alias, m, n, k, out_dtype, accumulate)
    config = make_config(m, n, block_m, block_n, 1, k, d.element_size(), grid)
    if config is None:
        pytest.skip(f"{block_m}x{block_n} does not fit 3 stages with {out_dtype} output")
    config = replace(config, stream_k=True)
    start = d.clone()
    outputs = []
    for _ in range(2):
        d.copy_(start)
        sm90_bf16_gemm.run("test", a_nt, b_nt, d, problem[:7], problem[7], accumulate, "", config)
        torch.cuda.synchronize()
        assert torch.isfinite(d).all(), "unwritten (NaN) output elements"
        outputs.append(d.clone())
    assert calc_diff(d.float(), expected) < 1e-5
    assert torch.equal(outputs[0], outputs[1]), "stream-K output differs between two runs"


@pytest.mark.parametrize("grid", (7, 13))
@pytest.mark.parametrize("kind,block_m,block_n,accumulate", [
    ("1d2d", 128, 128, False), ("1d2d", 128, 192, False), ("1d2d", 64, 64, False),
    ("1d1d", 128, 112, True), ("1d1d", 128, 144, False),
])
def test_fp8_stream_k_matches_reference_and_repeats_bitwise(grid, kind, block_m, block_n, accumulate):
    _require_sm90()
    from dg_triton.heuristics.sm90 import make_fp8_config
    from dg_triton.kernels import sm90_fp8_gemm
    from dg_triton.testing import calc_diff

    from test_fp8_gemm_kernel_gpu import _operands   # scales that differ from group to group

    m, n, k = 333, 1000, 2576            # 21 K blocks of 128, the last partial
    _, _, a_q, sfa, b_q, sfb, expected = _operands(m, n, k, kind)
    out_dtype = torch.float32 if kind == "1d1d" else torch.bfloat16
    d = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
    if accumulate:
        c = torch.randn(m, n, device="cuda")
        d.copy_(c)
        expected += c
    config = make_fp8_config(kind, m, n, block_m, block_n, 1, k, d.element_size(), grid)
    assert config is not None
    config = replace(config, stream_k=True)
    layout = (d.dtype, a_q.stride(), b_q.stride(), d.stride(), sfa.stride(), sfb.stride())
    problem = sm90_fp8_gemm.Fp8GemmProblem(m, n, k, kind, d.device.index, None, layout)
    start = d.clone()
    outputs = []
    for _ in range(2):
        d.copy_(start)
        sm90_fp8_gemm.run("test", a_q, sfa, b_q, sfb, d, problem, accumulate, "", config)
        torch.cuda.synchronize()
        assert torch.isfinite(d).all(), "unwritten (NaN) output elements"
        outputs.append(d.clone())
    assert calc_diff(d.float(), expected) < 1e-3
    assert torch.equal(outputs[0], outputs[1]), "stream-K output differs between two runs"


def test_heuristic_stream_k_shapes_through_the_api_match_tile_by_tile_and_capture_in_a_graph(monkeypatch):
    """An M=4096 shape the heuristics give stream-K (with STREAM_K patched on: it is off by
    default), through the public API: the result is within FP32 reordering of the same tiles run
    one per CTA, and a captured call replays to the eager call's exact output."""
    _require_sm90()
    import dg_triton
    from dg_triton import gemm
    from dg_triton.heuristics import sm90 as heuristics
    from dg_triton.kernels import sm90_bf16_gemm
    from dg_triton.testing import calc_diff

    monkeypatch.setattr(heuristics, "STREAM_K", True)
    gemm._warm_plans.clear()
    sm90_bf16_gemm._plans.clear()
    m, n, k = 4096, 2112, 7168
    config = heuristics.choose_bf16_gemm_config(m, n, k, 2, torch.cuda.get_device_properties(0).multi_processor_count)
    if not config.stream_k:
        pytest.skip("the heuristics take no stream-K for this shape on this GPU's SM count")
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    dg_triton.bf16_gemm_nt(a, b, d)
    eager = d.clone()
    assert torch.isfinite(eager).all()
    assert calc_diff(eager.float(), a.float() @ b.float().T) < 1e-5
    assert list(sm90_bf16_gemm._plans.values())[-1].spec.config.stream_k

    heuristics.STREAM_K = False
    gemm._warm_plans.clear()
    sm90_bf16_gemm._plans.clear()
    whole = torch.full_like(d, float("nan"))
    dg_triton.bf16_gemm_nt(a, b, whole)
    assert calc_diff(whole.float(), eager.float()) < 1e-6
    heuristics.STREAM_K = True
    gemm._warm_plans.clear()
    sm90_bf16_gemm._plans.clear()

    d.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dg_triton.bf16_gemm_nt(a, b, d)          # warm the plan on this stream
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            dg_triton.bf16_gemm_nt(a, b, d)
    d.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(d, eager)
    assert list(sm90_bf16_gemm._plans.values())[-1].spec.config.stream_k
    gemm._warm_plans.clear()      # no stream-K plan outlives the patch
    sm90_bf16_gemm._plans.clear()
