"""The MoE forward of tests/moe_forward.py on CPU, with the reference GEMMs of
dg_triton.reference_grouped in place of the grouped GEMM kernels (the layout, SwiGLU and combine
calls run their plain-torch references on CPU tensors): a pure-torch run of exactly the pipeline's
quantization steps. It checks three things the GPU tests build on:

- the plain torch MoE (``torch_moe_forward``) is the MoE: equal to a slot-by-slot sum;
- the pipeline's wiring (layout, scale-factor layouts, psum vs index form, combine) gives the MoE;
- the accuracy thresholds of moe_forward.py keep their margin: the quantization steps alone stay
  well below FP8_THRESHOLD / BF16_THRESHOLD, and well above a tenth of them, so the FP8 steps did
  run (a pipeline that skipped a cast would land near the BF16 figure).
"""
import zlib

import pytest
import torch

import dg_triton
import moe_forward
from dg_triton import reference_grouped
from dg_triton.testing import calc_diff
from dg_triton.utils import layout as mk_layout

# Small enough for a CPU (about 0.3 s a case), large enough that calc_diff sits at its large-size
# value (moe_forward.py: 8.7e-4 to 1.0e-3 for FP8 from H = 1024 on).
TOKENS, HIDDEN, INTERMEDIATE, EXPERTS = 128, 1024, 256, 8
# The quantization steps must leave the GPU comparison this factor of headroom.
MARGIN = 1.5


@pytest.fixture(autouse=True)
def seed(request):
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    previous = mk_layout.get_mk_alignment_for_contiguous_layout()
    mk_layout.set_mk_alignment_for_contiguous_layout(moe_forward.BLOCK)
    yield
    mk_layout.set_mk_alignment_for_contiguous_layout(previous)


@pytest.fixture(autouse=True)
def reference_gemms(monkeypatch):
    """The grouped GEMMs as their references: FP8 has no CPU kernel, and the BF16 one would need
    the Triton interpreter (tests/interpret/test_moe_forward.py runs it)."""
    def fp8_gemm(a, b, d, grouped_layout, use_psum_layout=False):
        d.copy_(reference_grouped.m_grouped_fp8_contiguous_reference(
            a, b, d, grouped_layout, use_psum_layout, mk_layout.get_mk_alignment_for_contiguous_layout()))

    def bf16_gemm(a, b, d, grouped_layout, use_psum_layout=False):
        d.copy_(reference_grouped.m_grouped_contiguous_reference(
            a, b, d, grouped_layout, use_psum_layout, mk_layout.get_mk_alignment_for_contiguous_layout()))
    monkeypatch.setattr(dg_triton, "m_grouped_fp8_gemm_nt_contiguous", fp8_gemm)
    monkeypatch.setattr(dg_triton, "m_grouped_bf16_gemm_nt_contiguous", bf16_gemm)


def slot_by_slot_moe(x, topk_ids, topk_weights, w1, w2):
    """fp32 MoE one slot at a time: the definition torch_moe_forward must meet."""
    y = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.size(0)):
        for k in range(topk_ids.size(1)):
            e = int(topk_ids[t, k])
            if 0 <= e < w1.size(0):
                h = w1[e].double() @ x[t].double()
                gate, up = h.chunk(2)
                y[t] += float(topk_weights[t, k]) * (w2[e].double() @ (torch.nn.functional.silu(gate) * up))
    return y


@pytest.mark.parametrize("pattern", ["distinct", "subset", "one", "unused"])
def test_torch_moe_forward_equals_slot_by_slot_sum(pattern):
    tokens, hidden, intermediate, experts, topk = 12, 64, 32, 6, 3
    x = moe_forward.random_tokens(tokens, hidden, device="cpu")
    w1 = moe_forward.random_expert_weights(experts, 2 * intermediate, hidden, device="cpu")
    w2 = moe_forward.random_expert_weights(experts, hidden, intermediate, device="cpu")
    topk_ids, topk_weights = moe_forward.random_routing(tokens, topk, experts, pattern, device="cpu")
    y = moe_forward.fp32_reference(x, topk_ids, topk_weights, w1, w2)
    expected = slot_by_slot_moe(x, topk_ids, topk_weights, w1, w2)
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fp8", [True, False], ids=["fp8", "bf16"])
@pytest.mark.parametrize("topk,pattern,use_psum_layout", [
    (8, "distinct", False), (8, "distinct", True), (1, "subset", False), (8, "one", False), (8, "unused", True),
])
def test_quantization_steps_keep_threshold_margin(fp8, topk, pattern, use_psum_layout):
    x = moe_forward.random_tokens(TOKENS, HIDDEN, device="cpu")
    w1 = moe_forward.random_expert_weights(EXPERTS, 2 * INTERMEDIATE, HIDDEN, device="cpu")
    w2 = moe_forward.random_expert_weights(EXPERTS, HIDDEN, INTERMEDIATE, device="cpu")
    if fp8:
        w1, w2 = moe_forward.quantize_expert_weights(w1), moe_forward.quantize_expert_weights(w2)
    topk_ids, topk_weights = moe_forward.random_routing(TOKENS, topk, EXPERTS, pattern, device="cpu")
    y = moe_forward.MoEForward(w1, w2, use_psum_layout)(x, topk_ids, topk_weights)
    reference = moe_forward.fp32_reference(x, topk_ids, topk_weights, w1, w2)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    diff = float(calc_diff(y, reference))
    worst_token = float(moe_forward.per_token_calc_diff(y, reference).max())
    what = f"{'fp8' if fp8 else 'bf16'} topk={topk} {pattern} psum={use_psum_layout}"
    if fp8:
        threshold, token_threshold = moe_forward.FP8_THRESHOLD, moe_forward.FP8_TOKEN_THRESHOLD
        assert diff > threshold / 10, f"{what}: calc_diff {diff:.3g}: were the activations quantized?"
    else:
        threshold, token_threshold = moe_forward.BF16_THRESHOLD, moe_forward.BF16_TOKEN_THRESHOLD
    assert diff < threshold / MARGIN, f"{what}: calc_diff {diff:.3g}"
    assert worst_token < token_threshold / MARGIN, f"{what}: worst token calc_diff {worst_token:.3g}"
