"""The SwiGLU kernels (dg_triton.activation on CUDA tensors) at DeepSeek-V3 MoE sizes against
dg_triton/reference_swiglu.py.

The strongest criterion that holds, and why it holds:
- Bitwise, against the reference's fp32 activation computed by torch **on the same GPU** and then
  cast by the reference **on the CPU**. The kernels call libdevice's expf, which is what torch's
  CUDA exp runs (measured identical on every bf16 input on an H200, torch 2.11 / triton 3.6), and
  every other step is the same IEEE fp32 operation. The cast runs on the CPU because torch on CUDA
  divides by a Python scalar as a multiply by its reciprocal (``amax / 448`` is then an ulp off
  the correctly rounded quotient the kernel computes in about half the groups), while torch's
  CPU division is correctly rounded.
- Against the reference computed entirely on the CPU (torch's CPU exp differs from libdevice's in
  the last bit): the criterion of tests/interpret/test_swiglu.py, scales within 1e-6 relative and
  FP8 codes at most one step apart in at most 1 + 1e-4 * numel elements.

Outputs are allocated poisoned (0xFF bytes), so an element left unwritten cannot pass.
"""
import contextlib
import random
from unittest import mock

import pytest
import torch

from dg_triton import reference_quant, reference_swiglu
from dg_triton.activation import swiglu, swiglu_per_token_cast_to_fp8
from dg_triton.utils.math import align, ceil_div

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# TODO(shapes): move to tests/shapes.py once that file is free.
# (M, I): DeepSeek-V3 routed experts (I = 2048, x = [M, 4096]) at 8192 and 4096 tokens, the dense
# FFN (I = 18432), tails: I = 7296 / 2 (29 groups of 128, the last partial), one token, I = 1.
LARGE_SHAPES = [(8192, 2048), (4096, 2048), (4096, 18432)]
TAIL_SHAPES = [(129, 3648), (1, 2048), (7, 1)]
# (gran_k, use_ue8m0, routing-weight dtype, clamp, SF layout)
OPTIONS = [
    (128, False, None, None, "tma"),
    (128, True, torch.float32, 7.0, "packed_tma"),
    (32, True, torch.bfloat16, None, "packed_row"),
    (32, False, torch.float32, 2.0, "row"),
]
FUSED_CASES = ([(8192, 2048, *options) for options in OPTIONS]
               + [(4096, 2048, *OPTIONS[1]), (4096, 2048, *OPTIONS[2]), (4096, 18432, *OPTIONS[0])]
               + [(m, i, *options) for m, i in TAIL_SHAPES for options in OPTIONS])


@contextlib.contextmanager
def poisoned_outputs():
    real_empty = torch.empty

    def poisoned_empty(*size, **kwargs):
        tensor = real_empty(*size, **kwargs)
        tensor.view(torch.uint8).fill_(0xFF)
        return tensor

    with mock.patch.object(torch, "empty", poisoned_empty):
        yield


def random_inputs(m, intermediate, weight_dtype, scale=None):
    """bf16 randn x on the GPU times a random magnitude, a zero row (the 1e-4 floor), weights in
    [0, 2) with one 0; fresh each call, with a description naming the seed."""
    seed = random.randrange(2 ** 31)
    generator = torch.Generator(device="cuda").manual_seed(seed)
    scale = 10.0 ** random.uniform(-2, 1) if scale is None else scale
    x = (torch.randn(m, 2 * intermediate, device="cuda", generator=generator) * scale).bfloat16()
    if m > 2:
        x[m // 2] = 0
    weights = None
    if weight_dtype is not None:
        weights = (torch.rand(m, device="cuda", generator=generator) * 2).to(weight_dtype)
        if m > 2:
            weights[m // 3] = 0
    return x, weights, f"seed={seed} scale={scale:.3g} M={m} I={intermediate} weights={weight_dtype}"


def fused(x, use_ue8m0, gran_k, weights, clamp, layout):
    with poisoned_outputs():
        return swiglu_per_token_cast_to_fp8(x, use_ue8m0, gran_k, weights, clamp,
                                            tma_aligned_sf=layout.endswith("tma"),
                                            use_packed_ue8m0=layout.startswith("packed"))


def reference_fused(x, use_ue8m0, gran_k, weights, clamp, packed):
    """The reference with its activation from torch on the GPU and its cast on the CPU (module
    docstring); results on the CPU, sf row-major."""
    act = reference_swiglu.swiglu_fp32(x, weights, clamp).cpu()
    q, sf = reference_quant.per_token_cast_to_fp8(act, use_ue8m0, gran_k)
    return q, (reference_swiglu.pack_ue8m0_padded(sf) if packed else sf)


def plain(t):
    """A CPU copy with plain row-major strides (MN-major SFs of one row count as contiguous with
    odd strides, which byte views refuse)."""
    return t.cpu().new_empty(t.shape).copy_(t)


def assert_bitwise(q, sf, q_ref, sf_ref, what):
    assert q.dtype == torch.float8_e4m3fn and q.shape == q_ref.shape and q.is_contiguous(), what
    differ = q.cpu().view(torch.uint8) != q_ref.view(torch.uint8)
    assert not differ.any(), f"{what}: {differ.sum().item()} of {q.numel()} fp8 bytes differ"
    assert sf.dtype == sf_ref.dtype and sf.shape == sf_ref.shape, what
    differ = plain(sf) != sf_ref
    assert not differ.any(), f"{what}: {differ.sum().item()} of {sf.numel()} scales differ"


def check_sf_layout(sf, m, layout, what):
    if layout.endswith("tma"):
        aligned_m = align(m, 4)
        assert sf.stride() == (1, aligned_m), what
        storage = sf.as_strided((aligned_m, sf.size(1)), (1, aligned_m))
        assert torch.all(storage[m:] == 0), f"{what}: padding rows not 0"
    else:
        assert sf.is_contiguous(), what


def fp8_ordinal(q):
    byte = q.view(torch.uint8).to(torch.int32)
    return torch.where(byte >= 128, -(byte & 127), byte)


@pytest.mark.parametrize("m,intermediate,gran_k,use_ue8m0,weight_dtype,clamp,layout", FUSED_CASES)
def test_fused_swiglu_cast_matches_reference_bitwise(m, intermediate, gran_k, use_ue8m0,
                                                     weight_dtype, clamp, layout):
    x, weights, what = random_inputs(m, intermediate, weight_dtype)
    what += f" gran_k={gran_k} ue8m0={use_ue8m0} clamp={clamp} layout={layout}"
    packed = layout.startswith("packed")
    q, sf = fused(x, use_ue8m0, gran_k, weights, clamp, layout)
    num_groups = ceil_div(intermediate, gran_k)
    assert q.is_cuda and sf.is_cuda, what
    assert sf.shape == (m, ceil_div(num_groups, 4) if packed else num_groups), what
    check_sf_layout(sf, m, layout, what)
    assert_bitwise(q, sf, *reference_fused(x, use_ue8m0, gran_k, weights, clamp, packed), what)


def test_fused_swiglu_cast_reads_strided_inputs():
    x, weights, what = random_inputs(4096, 2048, torch.float32)
    strided_weights = torch.stack([weights, weights], dim=1)[:, 0]
    expected = reference_fused(x, False, 128, weights, 3.0, False)
    for x_view in (x.t().contiguous().t(), torch.cat([x, x[:, :64]], dim=1)[:, :4096]):
        q, sf = fused(x_view, False, 128, strided_weights, 3.0, "row")
        assert_bitwise(q, sf, *expected, f"{what} x strides {x_view.stride()}")


@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_fused_swiglu_cast_is_close_to_the_cpu_reference(use_ue8m0):
    x, weights, what = random_inputs(8192, 2048, torch.float32, scale=3.0)
    q, sf = fused(x, use_ue8m0, 128, weights, 7.0, "tma")
    q_ref, sf_ref = reference_swiglu.swiglu_per_token_cast_to_fp8(
        x.cpu(), use_ue8m0, 128, weights.cpu(), 7.0)
    sf = plain(sf)
    relative = torch.where(sf == sf_ref, 0.0, (sf - sf_ref).abs() / sf_ref).max().item()
    assert relative <= 1e-6, f"{what}: scales differ by {relative:.3g} relative"
    steps = (fp8_ordinal(q.cpu()) - fp8_ordinal(q_ref)).abs()
    assert steps.max().item() <= 1, what
    assert (steps > 0).sum().item() <= 1 + 1e-4 * q.numel(), what


@pytest.mark.parametrize("gran_k,use_ue8m0,use_packed_ue8m0", [
    (128, False, False), (128, True, True), (32, True, False)])
def test_fused_equals_the_unfused_fp32_sequence(gran_k, use_ue8m0, use_packed_ue8m0):
    """Fused == per_token_cast_to_fp8 (dg_triton's cast kernel) of the fp32 activation that torch
    computes on the GPU: no bf16 intermediate anywhere."""
    x, weights, what = random_inputs(8192, 2048, torch.float32)
    q, sf = fused(x, use_ue8m0, gran_k, weights, 5.0,
                  "packed_tma" if use_packed_ue8m0 else "tma")
    act = reference_swiglu.swiglu_fp32(x, weights, 5.0)
    q_seq, sf_seq = dg_triton_per_token_cast(act, use_ue8m0, gran_k, use_packed_ue8m0)
    assert torch.equal(q.view(torch.uint8), q_seq.view(torch.uint8)), what
    assert torch.equal(plain(sf), plain(sf_seq)), what


def dg_triton_per_token_cast(x, use_ue8m0, gran_k, use_packed_ue8m0):
    from dg_triton.utils.math import per_token_cast_to_fp8
    return per_token_cast_to_fp8(x, use_ue8m0, gran_k, use_packed_ue8m0, tma_aligned_sf=True)


def test_fused_is_more_accurate_than_swiglu_then_cast():
    """The unfused sequence rounds the activation to bf16 before the cast. With UE8M0 scales a
    group whose scale is the same in both is quantized on the same grid, where the fused codes are
    the nearest to the fp32 activation: no element is closer in the unfused result."""
    x, weights, what = random_inputs(8192, 2048, torch.float32, scale=2.0)
    q, sf = swiglu_per_token_cast_to_fp8(x, True, 128, weights, tma_aligned_sf=False)
    q_unfused, sf_unfused = dg_triton_per_token_cast(swiglu(x, weights), True, 128, False)
    act = reference_swiglu.swiglu_fp32(x, weights)
    same_scale = (sf == sf_unfused).repeat_interleave(128, dim=1)
    fused_error = (q.float() * sf.repeat_interleave(128, dim=1) - act).abs()
    unfused_error = (q_unfused.float() * sf_unfused.repeat_interleave(128, dim=1) - act).abs()
    assert same_scale.float().mean() > 0.9, what
    assert torch.all(fused_error[same_scale] <= unfused_error[same_scale]), what
    assert fused_error[same_scale].sum() < unfused_error[same_scale].sum(), what


@pytest.mark.parametrize("m,intermediate,weight_dtype,clamp", [
    (8192, 2048, None, None), (8192, 2048, torch.float32, 7.0), (4096, 18432, torch.bfloat16, None),
    (129, 3648, torch.float32, 1.5), (1, 2048, None, 3.0)])
def test_swiglu_matches_reference_bitwise(m, intermediate, weight_dtype, clamp):
    """The bare activation is all IEEE ops and the same exp as torch on the GPU: bitwise."""
    x, weights, what = random_inputs(m, intermediate, weight_dtype)
    with poisoned_outputs():
        out = swiglu(x, weights, clamp)
    expected = reference_swiglu.swiglu(x, weights, clamp)
    assert out.dtype == torch.bfloat16 and out.shape == (m, intermediate), what
    differ = out.view(torch.int16) != expected.view(torch.int16)
    assert not differ.any(), f"{what}: {differ.sum().item()} bf16 values differ"


@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_nan_and_inf_follow_the_reference(use_ue8m0):
    """NaN/Inf in gate, up and weights give the reference's NaN positions, scales and codes, with
    one documented exception: under UE8M0 an infinite activation has a finite scale (2^127) and
    the kernel's saturating cvt stores it as +-448, where torch < 2.13 casts inf to NaN (torch
    2.13 saturates too). The call returns (no hang) and other rows are untouched."""
    x, weights, what = random_inputs(64, 512, torch.float32, scale=1.0)
    inf, nan = float("inf"), float("nan")
    x[1, 3], x[2, 4], x[3, 5] = nan, inf, -inf
    x[4, 512 + 6], x[5, 512 + 7] = inf, nan
    x[6, 8], x[6, 512 + 8] = -inf, 0.0
    weights[7], weights[9] = inf, nan
    q, sf = fused(x, use_ue8m0, 128, weights, None, "row")
    torch.cuda.synchronize()
    q_ref, sf_ref = reference_fused(x, use_ue8m0, 128, weights, None, False)
    expected = q_ref.float()
    if use_ue8m0:
        act = reference_swiglu.swiglu_fp32(x, weights).cpu()
        expected = torch.where(act.isinf(), act.sign() * 448.0, expected)
    q, sf = q.cpu().float(), sf.cpu()
    assert torch.equal(q.isnan(), expected.isnan()), what
    assert torch.equal(q.nan_to_num(), expected.nan_to_num()), what
    assert torch.equal(sf.isnan(), sf_ref.isnan()), what
    assert torch.equal(sf.nan_to_num(), sf_ref.nan_to_num()), what
    assert q.isnan().any(), what


def test_launches_can_be_captured_in_a_cuda_graph():
    """No host synchronization in the launchers: both calls record into a CUDA graph, and replays
    follow new input values."""
    x, weights, what = random_inputs(4096, 2048, torch.float32)
    # Compiled (and loaded) outside the capture, with the constants the captured calls use.
    swiglu(x, weights, 7.0)
    swiglu_per_token_cast_to_fp8(x, True, 128, weights, 7.0, use_packed_ue8m0=True)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = swiglu(x, weights, 7.0)
        q, sf = swiglu_per_token_cast_to_fp8(x, True, 128, weights, 7.0, use_packed_ue8m0=True)
    x.copy_(random_inputs(4096, 2048, None)[0])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16), swiglu(x, weights, 7.0).view(torch.int16)), what
    q_eager, sf_eager = swiglu_per_token_cast_to_fp8(x, True, 128, weights, 7.0,
                                                     use_packed_ue8m0=True)
    assert torch.equal(q.view(torch.uint8), q_eager.view(torch.uint8)), what
    assert torch.equal(sf, sf_eager), what


@pytest.mark.parametrize("call, fragment", [
    (lambda x: swiglu_per_token_cast_to_fp8(x, gran_k=96), "gran_k must be a power of two <= 4096"),
    (lambda x: swiglu_per_token_cast_to_fp8(x, gran_k=8192), "gran_k must be a power of two <= 4096"),
    (lambda x: swiglu_per_token_cast_to_fp8(torch.zeros(1, 2 ** 18, dtype=torch.bfloat16,
                                                        device="cuda"), gran_k=1),
     "gran_k must be at least I / 65535"),
    (lambda x: swiglu(x, routing_weights=torch.ones(4)), "routing_weights must be on x's device"),
])
def test_cuda_only_argument_checks(call, fragment):
    from dg_triton.errors import DGArgumentError
    x = torch.zeros(4, 256, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(DGArgumentError, match=fragment):
        call(x)
