"""MoE token layouts (dg_triton.moe_layout) on a GPU at DeepSeek-V3 sizes, against the plain-torch
reference (dg_triton.reference_moe_layout) run on CPU copies of the inputs: every output bitwise,
padding included. The reference runs on the CPU because torch's CUDA division by a scalar is a
multiplication by its reciprocal, so on CUDA the reference's ``amax / 448`` is not the IEEE
division the specification (and the kernels, through div_rn) use. Also: no host synchronization
(torch's sync debug mode turns one into an error), CUDA-graph capture and replay, NaN/Inf inputs.
Speed is measured by benchmarks/bench_prologue.py, not asserted here.
"""
import zlib

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HIDDEN = 7168  # DeepSeek-V3 hidden size
NUM_EXPERTS = 256
TOPK = 8


@pytest.fixture(autouse=True)
def seed_per_test(request):
    # Fresh inputs per test, reproducible from the test id alone.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


def moe():
    from dg_triton import moe_layout
    return moe_layout


class _ReferenceOnCpu:
    """dg_triton.reference_moe_layout with every tensor argument moved to the CPU."""

    def __getattr__(self, name):
        from dg_triton import reference_moe_layout
        function = getattr(reference_moe_layout, name)

        def on_cpu(*args):
            return function(*(a.cpu() if isinstance(a, torch.Tensor) else a for a in args))
        return on_cpu


def reference():
    return _ReferenceOnCpu()


def routing(num_tokens, num_experts, topk, unused_fraction=0.0, hot_expert=None):
    """topk distinct experts per token (as a router's top-k gives), some slots -1, optionally
    half the tokens sent to one hot expert (slot 0) to overflow a masked layout."""
    ids = torch.rand(num_tokens, num_experts, device="cuda").topk(topk, dim=1).indices
    if hot_expert is not None:
        hot = torch.rand(num_tokens, device="cuda") < 0.5
        ids[:, 0] = torch.where(hot & (ids != hot_expert).all(1), hot_expert, ids[:, 0])
    if unused_fraction:
        ids[torch.rand(ids.shape, device="cuda") < unused_fraction] = -1
    return ids.to(torch.int32)


def tokens(num_tokens, hidden=HIDDEN):
    scale = torch.rand(num_tokens, 1, device="cuda") * 10
    return (torch.randn(num_tokens, hidden, device="cuda") * scale).to(torch.bfloat16)


def assert_layouts_equal(result, expected):
    assert type(result) is type(expected)
    for name, value, want in zip(result._fields, result, expected):
        if want is None:
            assert value is None, name
            continue
        assert value.is_cuda and value.shape == want.shape and value.dtype == want.dtype, name
        if name == "sf":
            assert value.stride() == want.stride(), name
        value = value.cpu()
        if value.dtype in (torch.float8_e4m3fn, torch.bfloat16):
            value, want = value.view(torch.uint8), want.view(torch.uint8)
        assert torch.equal(value, want), f"{name}: {(value != want).sum().item()} elements differ"


@pytest.mark.parametrize("num_tokens", [1, 129, 4096])
@pytest.mark.parametrize("quantize,use_ue8m0", [(False, False), (True, False), (True, True)])
def test_contiguous_permute_matches_reference_bitwise(num_tokens, quantize, use_ue8m0):
    x = tokens(num_tokens)
    ids = routing(num_tokens, NUM_EXPERTS, TOPK, unused_fraction=0.05)
    for use_psum_layout in (False, True):
        result = moe().moe_permute_contiguous(x, ids, NUM_EXPERTS, use_psum_layout=use_psum_layout,
                                              quantize=quantize, use_ue8m0=use_ue8m0)
        expected = reference().moe_permute_contiguous(x, ids, NUM_EXPERTS, 128, use_psum_layout, quantize,
                                                      use_ue8m0, 128)
        assert_layouts_equal(result, expected)


@pytest.mark.parametrize("quantize", [False, True])
def test_contiguous_permute_with_int64_ids_and_strided_input(quantize):
    x = tokens(1000, 2 * HIDDEN)[:, ::2]  # column stride 2
    ids = routing(1000, 64, 6, unused_fraction=0.1).to(torch.int64).t().contiguous().t()
    result = moe().moe_permute_contiguous(x, ids, 64, alignment=64, quantize=quantize)
    assert_layouts_equal(result, reference().moe_permute_contiguous(x, ids, 64, 64, False, quantize, False, 128))


@pytest.mark.parametrize("quantize", [False, True])
def test_small_hidden_packs_several_tokens_per_program(quantize):
    """H = 256: each program of the permute moves several tokens (the other tests, at H = 7168,
    move one per program)."""
    x = tokens(1000, 256)
    ids = routing(1000, 32, 6, unused_fraction=0.1)
    result = moe().moe_permute_contiguous(x, ids, 32, quantize=quantize, use_ue8m0=quantize)
    assert_layouts_equal(result, reference().moe_permute_contiguous(x, ids, 32, 128, False, quantize, quantize, 128))
    result = moe().moe_permute_masked(x, ids, 32, 150, quantize=quantize)
    assert_layouts_equal(result, reference().moe_permute_masked(x, ids, 32, 150, quantize, False, 128))


@pytest.mark.parametrize("quantize,use_ue8m0", [(False, False), (True, False), (True, True)])
def test_masked_permute_matches_reference_and_drops_overflow(quantize, use_ue8m0):
    num_experts, max_m = 32, 200
    x = tokens(1024)
    ids = routing(1024, num_experts, TOPK, unused_fraction=0.02, hot_expert=3)
    result = moe().moe_permute_masked(x, ids, num_experts, max_m, quantize=quantize, use_ue8m0=use_ue8m0)
    assert_layouts_equal(result, reference().moe_permute_masked(x, ids, num_experts, max_m, quantize, use_ue8m0, 128))
    assert result.expert_counts[3].item() > max_m and result.masked_m[3].item() == max_m


def test_combine_matches_reference_bitwise_for_both_layouts():
    x = tokens(4096)
    ids = routing(4096, NUM_EXPERTS, TOPK, unused_fraction=0.05)
    weights = torch.rand(4096, TOPK, device="cuda")
    weights[ids < 0] = float("nan")  # never read
    layout = moe().moe_permute_contiguous(x, ids, NUM_EXPERTS)
    y = torch.randn(layout.permuted.size(0), 4096, device="cuda").to(torch.bfloat16)
    out = moe().moe_unpermute_combine(y, layout.row_of_slot, weights)
    expected = reference().moe_unpermute_combine(y, layout.row_of_slot, weights)
    assert torch.equal(out.cpu().view(torch.int16), expected.view(torch.int16))
    assert torch.isfinite(out).all()

    masked = moe().moe_permute_masked(x, ids, NUM_EXPERTS, 160)
    # fp32 expert outputs, contiguous (one row stride) and with unevenly spaced groups
    for y3 in (torch.randn(NUM_EXPERTS, 160, 2048, device="cuda"),
               torch.randn(NUM_EXPERTS, 2048, 170, device="cuda")[:, :, :160].transpose(1, 2)):
        out = moe().moe_unpermute_combine(y3, masked.row_of_slot, weights)
        expected = reference().moe_unpermute_combine(y3, masked.row_of_slot, weights)
        assert torch.equal(out.cpu().view(torch.int16), expected.view(torch.int16))


def test_permute_then_combine_round_trip():
    x = tokens(4096)
    ids = routing(4096, NUM_EXPERTS, TOPK, unused_fraction=0.05)
    weights = torch.rand(4096, TOPK, device="cuda")
    layout = moe().moe_permute_contiguous(x, ids, NUM_EXPERTS)
    out = moe().moe_unpermute_combine(layout.permuted, layout.row_of_slot, weights)
    used = (ids >= 0).float()
    expected = torch.zeros(4096, HIDDEN, device="cuda")
    for k in range(TOPK):
        expected = torch.where(used[:, k:k + 1] > 0, expected + x.float() * weights[:, k:k + 1], expected)
    assert torch.equal(out.view(torch.int16), expected.to(torch.bfloat16).view(torch.int16))


def test_no_host_synchronization():
    x = tokens(512)
    ids = routing(512, NUM_EXPERTS, TOPK)
    weights = torch.rand(512, TOPK, device="cuda")
    y = torch.randn(512 * TOPK + NUM_EXPERTS * 127, 256, device="cuda").to(torch.bfloat16)
    moe().moe_permute_contiguous(x, ids, NUM_EXPERTS, quantize=True)  # compile outside the check
    moe().moe_permute_masked(x, ids, NUM_EXPERTS, 64)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        layout = moe().moe_permute_contiguous(x, ids, NUM_EXPERTS, quantize=True)
        masked = moe().moe_permute_masked(x, ids, NUM_EXPERTS, 64)
        moe().moe_unpermute_combine(masked.permuted, masked.row_of_slot, weights)
        moe().moe_unpermute_combine(y, layout.row_of_slot, weights)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_cuda_graph_replay_follows_new_inputs():
    num_tokens = 256
    x = tokens(num_tokens)
    ids = routing(num_tokens, NUM_EXPERTS, TOPK, unused_fraction=0.05)
    weights = torch.rand(num_tokens, TOPK, device="cuda")

    def step():
        layout = moe().moe_permute_contiguous(x, ids, NUM_EXPERTS, quantize=True)
        masked = moe().moe_permute_masked(x, ids, NUM_EXPERTS, 32)
        return layout, masked, moe().moe_unpermute_combine(masked.permuted, masked.row_of_slot, weights)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layout, masked, combined = step()

    for _ in range(2):
        x.copy_(tokens(num_tokens))
        ids.copy_(routing(num_tokens, NUM_EXPERTS, TOPK, unused_fraction=0.05))
        weights.copy_(torch.rand(num_tokens, TOPK, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert_layouts_equal(layout, reference().moe_permute_contiguous(x, ids, NUM_EXPERTS, 128, False, True,
                                                                        False, 128))
        expected_masked = reference().moe_permute_masked(x, ids, NUM_EXPERTS, 32)
        assert_layouts_equal(masked, expected_masked)
        expected = reference().moe_unpermute_combine(expected_masked.permuted, expected_masked.row_of_slot, weights)
        assert torch.equal(combined.cpu().view(torch.int16), expected.view(torch.int16))


def test_nan_and_inf_inputs():
    """Unquantized rows are bit copies: NaN/Inf (payloads included) land exactly where the reference
    puts them. The fused cast promises, for a token with NaN/Inf, only that it finishes and that
    every other token's rows and scales are exact (as dg_triton.triton.quant); the layout indices
    never depend on the data."""
    x = tokens(300, 1024)
    x[5, 7] = float("nan")
    x[6, 300] = float("inf")
    x[7, 0] = -float("inf")
    ids = routing(300, 16, TOPK, unused_fraction=0.05)
    ids[5:8, 0] = 2  # make sure those tokens are routed
    layout = moe().moe_permute_contiguous(x, ids, 16)
    assert_layouts_equal(layout, reference().moe_permute_contiguous(x, ids, 16, 128, False, False, False, 128))

    quantized = moe().moe_permute_contiguous(x, ids, 16, quantize=True)
    expected = reference().moe_permute_contiguous(x, ids, 16, 128, False, True, False, 128)
    assert torch.equal(quantized.row_of_slot.cpu(), expected.row_of_slot)
    assert torch.equal(quantized.m_indices.cpu(), expected.m_indices)
    bad_rows = expected.row_of_slot[5:8].flatten()
    good = torch.ones(expected.permuted.size(0), dtype=torch.bool)
    good[bad_rows[bad_rows >= 0].long()] = False
    assert torch.equal(quantized.permuted.cpu().view(torch.uint8)[good], expected.permuted.view(torch.uint8)[good])
    assert torch.equal(quantized.sf.cpu()[good], expected.sf[good])

    weights = torch.rand(300, TOPK, device="cuda")
    out = moe().moe_unpermute_combine(layout.permuted, layout.row_of_slot, weights)
    want = reference().moe_unpermute_combine(layout.permuted, layout.row_of_slot, weights)
    torch.testing.assert_close(out.cpu(), want, rtol=0, atol=0, equal_nan=True)
