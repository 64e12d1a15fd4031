"""The end-to-end MoE forward on an SM90 GPU (issue 5): tests/moe_forward.py's pipeline of our
kernels (FP8 permute+cast -> grouped FP8 GEMM -> SwiGLU+cast -> grouped FP8 GEMM -> combine, and
its BF16 twin) against the plain fp32 torch MoE on the same (dequantized) weights.

Thresholds: moe_forward.FP8_THRESHOLD / BF16_THRESHOLD on the whole output and the *_TOKEN_*
ones on every token (moe_forward.py says how they were measured; the quantization steps alone use
about half of them). Tokens carry magnitudes 1/8 to 8 apart, so a token given another's rows or
scales fails. Shapes: tests/shapes.py's MOE_FORWARD lists; routing with every expert used
(distinct top-k), with empty experts, with every slot on one expert and with unused (-1) slots.
"""
import zlib

import pytest
import torch

from shapes import MOE_FORWARD_DEEPSEEK_V3, MOE_FORWARD_SHAPES, MOE_FORWARD_TOPK

pytestmark = pytest.mark.gpu
if not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9):
    pytest.skip("needs an SM90 GPU", allow_module_level=True)

import moe_forward  # noqa: E402
from dg_triton.testing import assert_bitwise_equal, calc_diff, capture_graph  # noqa: E402
from dg_triton.utils import layout as mk_layout  # noqa: E402

PATTERNS = ["distinct", "subset", "one", "unused"]


@pytest.fixture(autouse=True)
def seed_and_settings(request, monkeypatch):
    # Fresh inputs per test, reproducible from the test id alone; the automatic backend (SM90) and
    # the mk alignment the SM90 FP8 kernels need (their BLOCK_M).
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    monkeypatch.delenv("DG_BACKEND", raising=False)
    previous = mk_layout.get_mk_alignment_for_contiguous_layout()
    mk_layout.set_mk_alignment_for_contiguous_layout(moe_forward.BLOCK)
    yield
    mk_layout.set_mk_alignment_for_contiguous_layout(previous)


def expert_weights(num_experts, hidden, intermediate, fp8):
    w1 = moe_forward.random_expert_weights(num_experts, 2 * intermediate, hidden)
    w2 = moe_forward.random_expert_weights(num_experts, hidden, intermediate)
    if fp8:
        return moe_forward.quantize_expert_weights(w1), moe_forward.quantize_expert_weights(w2)
    return w1, w2


def check_against_torch_moe(pipeline, x, topk_ids, topk_weights, what):
    y = pipeline(x, topk_ids, topk_weights)
    reference = moe_forward.fp32_reference(x, topk_ids, topk_weights, pipeline.w1, pipeline.w2)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape, what
    assert torch.isfinite(y.float()).all(), f"{what}: non-finite output"
    unrouted = ((topk_ids < 0) | (topk_ids >= pipeline.num_experts)).all(dim=1)
    assert (y[unrouted] == 0).all(), f"{what}: a token with no used slot must come out 0"
    if pipeline.fp8:
        threshold, token_threshold = moe_forward.FP8_THRESHOLD, moe_forward.FP8_TOKEN_THRESHOLD
    else:
        threshold, token_threshold = moe_forward.BF16_THRESHOLD, moe_forward.BF16_TOKEN_THRESHOLD
    diff = float(calc_diff(y, reference))
    assert diff < threshold, f"{what}: calc_diff {diff:.3g} >= {threshold}"
    per_token = moe_forward.per_token_calc_diff(y, reference)
    worst = int(per_token.argmax())
    assert per_token[worst] < token_threshold, (
        f"{what}: token {worst} (slots {topk_ids[worst].tolist()}) calc_diff {float(per_token[worst]):.3g} "
        f">= {token_threshold}")


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("topk", MOE_FORWARD_TOPK)
@pytest.mark.parametrize("tokens,hidden,intermediate,experts", MOE_FORWARD_SHAPES)
def test_fp8_moe_forward_matches_torch_moe(tokens, hidden, intermediate, experts, topk, pattern):
    w1, w2 = expert_weights(experts, hidden, intermediate, fp8=True)
    topk_ids, topk_weights = moe_forward.random_routing(tokens, topk, experts, pattern)
    x = moe_forward.random_tokens(tokens, hidden)
    check_against_torch_moe(moe_forward.MoEForward(w1, w2), x, topk_ids, topk_weights,
                            f"fp8 T={tokens} H={hidden} I={intermediate} E={experts} topk={topk} {pattern}")


@pytest.mark.parametrize("pattern", ["distinct", "subset"])
@pytest.mark.parametrize("tokens,hidden,intermediate,experts", MOE_FORWARD_SHAPES)
def test_fp8_moe_forward_in_psum_layout_matches_torch_moe(tokens, hidden, intermediate, experts, pattern):
    w1, w2 = expert_weights(experts, hidden, intermediate, fp8=True)
    topk_ids, topk_weights = moe_forward.random_routing(tokens, MOE_FORWARD_TOPK[-1], experts, pattern)
    x = moe_forward.random_tokens(tokens, hidden)
    check_against_torch_moe(moe_forward.MoEForward(w1, w2, use_psum_layout=True), x, topk_ids, topk_weights,
                            f"fp8 psum T={tokens} H={hidden} I={intermediate} E={experts} {pattern}")


def test_fp8_moe_forward_matches_torch_moe_at_deepseek_v3_size():
    tokens, hidden, intermediate, experts, topk = MOE_FORWARD_DEEPSEEK_V3
    w1, w2 = expert_weights(experts, hidden, intermediate, fp8=True)
    topk_ids, topk_weights = moe_forward.random_routing(tokens, topk, experts)
    x = moe_forward.random_tokens(tokens, hidden)
    check_against_torch_moe(moe_forward.MoEForward(w1, w2), x, topk_ids, topk_weights,
                            f"fp8 DeepSeek-V3 T={tokens} H={hidden} I={intermediate} E={experts} topk={topk}")


@pytest.mark.parametrize("pattern", ["distinct", "subset", "one"])
@pytest.mark.parametrize("topk", MOE_FORWARD_TOPK)
def test_bf16_moe_forward_matches_torch_moe(topk, pattern):
    tokens, hidden, intermediate, experts = MOE_FORWARD_SHAPES[0]
    w1, w2 = expert_weights(experts, hidden, intermediate, fp8=False)
    topk_ids, topk_weights = moe_forward.random_routing(tokens, topk, experts, pattern)
    x = moe_forward.random_tokens(tokens, hidden)
    check_against_torch_moe(moe_forward.MoEForward(w1, w2), x, topk_ids, topk_weights,
                            f"bf16 T={tokens} H={hidden} I={intermediate} E={experts} topk={topk} {pattern}")


@pytest.mark.parametrize("fp8,use_psum_layout", [(True, False), (True, True), (False, False)],
                         ids=["fp8", "fp8-psum", "bf16"])
def test_moe_forward_cuda_graph_replay_equals_eager(fp8, use_psum_layout):
    """The whole pipeline captured once, replayed with other tokens, weights and routing copied into
    its inputs (every expert used, then every slot on one expert, then empty experts and unused
    slots): each replay is bitwise what an eager call on those inputs gives, so nothing in it
    depends on the routing seen at capture (the layout lives on the device, its size is a bound)."""
    tokens, hidden, intermediate, experts = MOE_FORWARD_SHAPES[-1]
    topk = MOE_FORWARD_TOPK[-1]
    w1, w2 = expert_weights(experts, hidden, intermediate, fp8)
    pipeline = moe_forward.MoEForward(w1, w2, use_psum_layout)
    x = moe_forward.random_tokens(tokens, hidden)
    topk_ids, topk_weights = moe_forward.random_routing(tokens, topk, experts)

    outputs = []   # the warm-up call's, then the captured call's (the graph's output tensor)
    graph = capture_graph(lambda: outputs.append(pipeline(x, topk_ids, topk_weights)))
    y_graph = outputs[-1]

    for pattern in ["distinct", "one", "subset", "unused"]:
        new_ids, new_weights = moe_forward.random_routing(tokens, topk, experts, pattern)
        x.copy_(moe_forward.random_tokens(tokens, hidden))
        topk_ids.copy_(new_ids)
        topk_weights.copy_(new_weights)
        graph.replay()
        y_eager = pipeline(x, topk_ids, topk_weights)
        torch.cuda.synchronize()
        assert_bitwise_equal(y_graph, y_eager, f"{'fp8' if fp8 else 'bf16'} psum={use_psum_layout} {pattern}")
        diff = float(calc_diff(y_graph, moe_forward.fp32_reference(x, topk_ids, topk_weights, w1, w2)))
        threshold = moe_forward.FP8_THRESHOLD if fp8 else moe_forward.BF16_THRESHOLD
        assert diff < threshold, f"replay after {pattern} routing: calc_diff {diff:.3g} >= {threshold}"
