"""The SwiGLU references (dg_triton/reference_swiglu.py) on hand-made and random inputs, the public
wrappers of dg_triton.activation on CPU tensors (which run the references), and their argument checks.
Plain CPU, no interpreter."""
import pytest
import torch

from dg_triton import reference_quant, reference_swiglu
from dg_triton.errors import DGArgumentError
from dg_triton.activation import swiglu, swiglu_per_token_cast_to_fp8

FLOOR_SF = torch.tensor(1e-4).div(448).item()


def _x(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.cat([gate, up], dim=1).to(torch.bfloat16)


def _random_x(m: int, intermediate: int, scale: float = 3.0) -> torch.Tensor:
    return (torch.randn(m, 2 * intermediate) * scale).to(torch.bfloat16)


def test_activation_is_silu_of_gate_times_up_in_fp32():
    x = _random_x(64, 320)
    act = reference_swiglu.swiglu_fp32(x)
    assert act.dtype == torch.float32 and act.shape == (64, 320)
    gate, up = x[:, :320].double(), x[:, 320:].double()
    exact = gate / (1 + torch.exp(-gate)) * up
    torch.testing.assert_close(act.double(), exact, rtol=1e-6, atol=1e-30)
    assert torch.equal(reference_swiglu.swiglu(x), act.to(torch.bfloat16))
    # silu(0) = 0, silu of a large gate is the gate itself, silu(-inf) is NaN (-inf / inf).
    special = reference_swiglu.silu(torch.tensor([0.0, 100.0, -float("inf"), float("inf")]))
    assert special[:2].tolist() == [0.0, 100.0] and special[2].isnan() and special[3].isinf()


def test_clamp_bounds_gate_above_and_up_on_both_sides():
    gate = torch.tensor([[-10.0, 10.0, 1.0]])
    up = torch.tensor([[-10.0, 10.0, 2.0]])
    act = reference_swiglu.swiglu_fp32(_x(gate, up), clamp=3)
    expected = reference_swiglu.silu(torch.tensor([[-10.0, 3.0, 1.0]])) * torch.tensor(
        [[-3.0, 3.0, 2.0]])
    assert torch.equal(act, expected)
    # The clamp is applied as its nearest fp32 value.
    up = torch.full((1, 3), 0.5)
    act = reference_swiglu.swiglu_fp32(_x(torch.ones(1, 3), up), clamp=0.1)
    fp32_tenth = torch.tensor(0.1, dtype=torch.float32)
    assert torch.equal(act, reference_swiglu.silu(torch.full((1, 3), fp32_tenth.item())) * fp32_tenth)
    # clamp = 0 zeroes up, so every group takes the 1e-4 floor and every code is zero.
    q, sf = reference_swiglu.swiglu_per_token_cast_to_fp8(_random_x(3, 256), False, clamp=0.0)
    assert torch.all(sf == FLOOR_SF) and torch.all(q.float() == 0)


def test_routing_weights_scale_rows_after_the_activation():
    x = _random_x(6, 256)
    weights = torch.tensor([2.0, 0.0, 0.5, 1.0, 3.0, -1.0])
    act = reference_swiglu.swiglu_fp32(x, routing_weights=weights)
    assert torch.equal(act, reference_swiglu.swiglu_fp32(x) * weights[:, None])
    # bf16 weights are upcast: the same result as fp32 weights of the same values.
    assert torch.equal(act, reference_swiglu.swiglu_fp32(x, weights.to(torch.bfloat16)))
    # A power-of-two weight scales act, amax and sf exactly, so the codes stay the same; a zero
    # weight gives the 1e-4 floor.
    q, sf = reference_swiglu.swiglu_per_token_cast_to_fp8(x, False, routing_weights=weights)
    q_plain, sf_plain = reference_swiglu.swiglu_per_token_cast_to_fp8(x, False)
    assert torch.equal(sf[0], sf_plain[0] * 2) and torch.equal(q[0].view(torch.uint8),
                                                                q_plain[0].view(torch.uint8))
    assert torch.equal(sf[5], sf_plain[5]) and torch.equal(q[5].float(), -q_plain[5].float())
    assert torch.all(sf[1] == FLOOR_SF) and torch.all(q[1].float() == 0)


@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("gran_k", [128, 32])
def test_fused_cast_is_the_per_token_cast_of_the_fp32_activation(use_ue8m0, gran_k):
    x = _random_x(33, 200)  # I = 200: a partial last group, zero-padded
    weights = torch.rand(33)
    q, sf = reference_swiglu.swiglu_per_token_cast_to_fp8(x, use_ue8m0, gran_k, weights, 4.0)
    act = reference_swiglu.swiglu_fp32(x, weights, 4.0)
    q_cast, sf_cast = reference_quant.per_token_cast_to_fp8(act, use_ue8m0, gran_k)
    assert q.shape == (33, 200) and sf.shape == (33, -(-200 // gran_k))
    assert torch.equal(q.view(torch.uint8), q_cast.view(torch.uint8)) and torch.equal(sf, sf_cast)


def test_fused_cast_is_more_accurate_than_the_unfused_sequence():
    """With UE8M0 scales (powers of two, so scaling is exact) a group whose scale is the same in
    both is quantized on the same grid: the fused codes are the nearest to the fp32 activation, the
    unfused ones those nearest to its bf16 rounding. So no element is closer in the unfused result,
    and some are farther."""
    x = _random_x(256, 1024)
    act = reference_swiglu.swiglu_fp32(x)
    q, sf = reference_swiglu.swiglu_per_token_cast_to_fp8(x, True)
    q_unfused, sf_unfused = reference_quant.per_token_cast_to_fp8(reference_swiglu.swiglu(x), True)

    def error(codes, scales):
        return (codes.float() * scales.repeat_interleave(128, dim=1) - act).abs()

    same_scale = (sf == sf_unfused).repeat_interleave(128, dim=1)
    assert same_scale.float().mean() > 0.9
    fused_error, unfused_error = error(q, sf), error(q_unfused, sf_unfused)
    assert torch.all(fused_error[same_scale] <= unfused_error[same_scale])
    assert fused_error[same_scale].sum() < unfused_error[same_scale].sum()
    assert not torch.equal(q.view(torch.uint8), q_unfused.view(torch.uint8))


def test_packed_scales_leave_missing_groups_as_byte_zero():
    x = _random_x(5, 384)  # 3 groups: one word with byte 3 missing
    _, packed = reference_swiglu.swiglu_per_token_cast_to_fp8(x, True, use_packed_ue8m0=True)
    _, sf = reference_swiglu.swiglu_per_token_cast_to_fp8(x, True)
    assert packed.dtype == torch.int32 and packed.shape == (5, 1)
    exponents = packed.view(torch.uint8)
    assert torch.all(exponents[:, 3] == 0)
    assert torch.equal(exponents[:, :3].int(), (sf.view(torch.int32) >> 23))


@pytest.mark.parametrize("use_ue8m0,use_packed_ue8m0", [(False, False), (True, False), (True, True)])
def test_public_functions_on_cpu_return_the_reference(use_ue8m0, use_packed_ue8m0):
    x = _random_x(130, 640)
    weights = torch.rand(130, dtype=torch.bfloat16)
    expected_q, expected_sf = reference_swiglu.swiglu_per_token_cast_to_fp8(
        x, use_ue8m0, 128, weights, 5.0, use_packed_ue8m0)
    q, sf = swiglu_per_token_cast_to_fp8(x, use_ue8m0, routing_weights=weights, clamp=5.0,
                                         use_packed_ue8m0=use_packed_ue8m0)
    assert sf.stride() == (1, 132)  # TMA-aligned MN-major by default (API.md 2.3)
    assert torch.equal(q.view(torch.uint8), expected_q.view(torch.uint8))
    assert torch.equal(sf, expected_sf)
    q, sf = swiglu_per_token_cast_to_fp8(x, use_ue8m0, routing_weights=weights, clamp=5.0,
                                         tma_aligned_sf=False, use_packed_ue8m0=use_packed_ue8m0)
    assert sf.is_contiguous() and torch.equal(sf, expected_sf)
    assert torch.equal(swiglu(x, weights, 5.0), reference_swiglu.swiglu(x, weights, 5.0))


def test_public_functions_take_no_tokens():
    x = torch.empty(0, 512, dtype=torch.bfloat16)
    q, sf = swiglu_per_token_cast_to_fp8(x, True, 32, use_packed_ue8m0=True)
    assert q.shape == (0, 256) and q.dtype == torch.float8_e4m3fn
    assert sf.shape == (0, 2) and sf.dtype == torch.int32
    assert swiglu(x, torch.empty(0)).shape == (0, 256)


X = torch.zeros(4, 256, dtype=torch.bfloat16)


@pytest.mark.parametrize("call, fragment", [
    (lambda f: f([[1.0]]), "x must be a torch.Tensor"),
    (lambda f: f(torch.zeros(2, 3, 4, dtype=torch.bfloat16)), "x must be 2-D"),
    (lambda f: f(torch.zeros(4, 256)), "x must be torch.bfloat16, got torch.float32"),
    (lambda f: f(torch.zeros(4, 255, dtype=torch.bfloat16)), "x must be .*even"),
    (lambda f: f(torch.zeros(4, 0, dtype=torch.bfloat16)), "x must be .*non-zero"),
    (lambda f: f(X, routing_weights=[1.0] * 4), "routing_weights must be a torch.Tensor"),
    (lambda f: f(X, routing_weights=torch.ones(4, 1)), r"routing_weights must be 1-D of shape \[M\]"),
    (lambda f: f(X, routing_weights=torch.ones(5)), r"routing_weights must be .*\[4\], got shape \(5,\)"),
    (lambda f: f(X, routing_weights=torch.ones(4, dtype=torch.float16)),
     "routing_weights must be torch.float32 or torch.bfloat16"),
    (lambda f: f(X, routing_weights=torch.ones(4, device="meta")), "routing_weights must be on x's device"),
    (lambda f: f(X, clamp=-1.0), "clamp must be a float >= 0"),
    (lambda f: f(X, clamp=float("nan")), "clamp must be a float >= 0"),
    (lambda f: f(X, clamp="7"), "clamp must be a float >= 0"),
    (lambda f: f(X, clamp=True), "clamp must be a float >= 0"),
])
@pytest.mark.parametrize("function", [swiglu, swiglu_per_token_cast_to_fp8])
def test_both_functions_reject_bad_arguments(function, call, fragment):
    with pytest.raises(DGArgumentError, match=fragment) as error:
        call(function)
    assert str(error.value).startswith(function.__name__ + ":")


@pytest.mark.parametrize("kwargs, fragment", [
    ({"gran_k": 0}, "gran_k must be a positive int"),
    ({"gran_k": 128.0}, "gran_k must be a positive int"),
    ({"gran_k": True}, "gran_k must be a positive int"),
    ({"use_packed_ue8m0": True}, "use_ue8m0 must be True when use_packed_ue8m0 is True"),
])
def test_fused_cast_rejects_bad_cast_arguments(kwargs, fragment):
    with pytest.raises(DGArgumentError, match=fragment):
        swiglu_per_token_cast_to_fp8(X, **kwargs)
