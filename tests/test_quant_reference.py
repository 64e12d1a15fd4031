"""The reference FP8 casts (dg_triton/reference_quant.py) against API.md 2.1 / 3.15 on hand-computed
examples, and the public wrappers of dg_triton.utils.math on CPU tensors (which run the reference).
Plain CPU, no interpreter."""
import pytest
import torch

import dg_triton
from dg_triton import reference_quant
from dg_triton.errors import DGArgumentError


def test_per_token_scale_is_amax_over_448_and_data_is_x_over_scale():
    x = torch.zeros(2, 256)
    x[0, 0], x[0, 1] = 896.0, -3.0  # group (0, 0): amax 448*2 -> sf 2.0
    x[0, 128] = 44.8  # group (0, 1): sf 0.1 (fp32 division)
    q, sf = dg_triton.per_token_cast_to_fp8(x, use_ue8m0=False)
    assert sf[0, 0].item() == 2.0
    assert sf[0, 1] == torch.tensor(44.8) / 448
    assert sf[1].tolist() == [torch.tensor(1e-4).div(448).item()] * 2  # zero row: the 1e-4 floor
    assert q[0, :2].float().tolist() == [448.0, -1.5]
    assert q[1].float().abs().sum().item() == 0.0


def test_per_token_ue8m0_rounds_scale_up_to_a_power_of_two():
    x = torch.zeros(1, 130)
    x[0, 0] = 448.0 * 3  # sf 3.0 -> 4.0
    x[0, 128] = 448.0 * 0.25  # sf 0.25 stays
    q, sf = reference_quant.per_token_cast_to_fp8(x, use_ue8m0=True)
    assert sf.tolist() == [[4.0, 0.25]]
    assert q.shape == (1, 130) and q[0, 0].float().item() == 320.0  # 1344 / 4 = 336, a tie: to even
    packed_q, packed = reference_quant.per_token_cast_to_fp8(torch.ones(3, 512), True,
                                                             use_packed_ue8m0=True)
    assert packed.dtype == torch.int32 and packed.shape == (3, 1)
    # amax 1 -> sf 1/448 -> 2^-8: biased exponent 119 in each of the four bytes.
    assert packed.view(torch.uint8).tolist() == [[119] * 4] * 3


def test_ceil_to_ue8m0_and_pack_round_trip():
    x = torch.tensor([3.0, 4.0, -0.3, 0.0, 1e-45, 3e38])
    assert dg_triton.ceil_to_ue8m0(x).tolist() == [4.0, 4.0, 0.5, 2.0 ** -126, 2.0 ** -126, 2.0 ** 127]
    exponents = torch.tensor([[1.0, 2.0, 0.5, 2.0 ** -20], [2.0 ** 100, 1.0, 1.0, 2.0 ** -126]])
    packed = dg_triton.pack_ue8m0_to_int(exponents)
    assert packed.shape == (2, 1) and packed.dtype == torch.int32
    assert packed[0, 0].item() == 127 | (128 << 8) | (126 << 16) | (107 << 24)
    assert torch.equal(dg_triton.unpack_ue8m0_from_int(packed), exponents)
    # A TMA-aligned packed SF ([m, 1] with strides (1, align(m, 4))) unpacks the same.
    aligned = torch.empty_strided((2, 1), (1, 4), dtype=torch.int32)
    aligned.copy_(packed)
    assert torch.equal(dg_triton.unpack_ue8m0_from_int(aligned), exponents)


def test_per_block_and_per_channel_scales_cover_their_tiles():
    x = torch.zeros(130, 200)
    x[129, 199] = 896.0  # tile (1, 1)
    q, sf = dg_triton.per_block_cast_to_fp8(x, use_ue8m0=False)
    floor = torch.tensor(1e-4).div(448).item()
    assert sf.tolist() == [[floor, floor], [floor, 2.0]]
    assert q[129, 199].float().item() == 448.0
    y = torch.zeros(256, 3)
    y[200, 2] = -896.0
    q, sf = dg_triton.per_channel_cast_to_fp8(y, use_ue8m0=True)
    assert sf.shape == (2, 3) and sf[1, 2].item() == 2.0 and sf[0, 2].item() == 2.0 ** -22
    assert q[200, 2].float().item() == -448.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_public_casts_on_cpu_return_the_reference(dtype):
    x = (torch.randn(129, 300) * 10.0 ** torch.empty(()).uniform_(-3, 3)).to(dtype)
    for use_ue8m0 in (False, True):
        for public, reference in [
            (dg_triton.per_token_cast_to_fp8, reference_quant.per_token_cast_to_fp8),
            (dg_triton.per_block_cast_to_fp8, reference_quant.per_block_cast_to_fp8),
        ]:
            q, sf = public(x, use_ue8m0)
            q_ref, sf_ref = reference(x, use_ue8m0)
            assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
            assert torch.equal(sf, sf_ref)
        q, sf = dg_triton.per_channel_cast_to_fp8(x[:128], use_ue8m0)
        q_ref, sf_ref = reference_quant.per_channel_cast_to_fp8(x[:128], use_ue8m0)
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(sf, sf_ref)
    q, sf = dg_triton.per_token_cast_to_fp8(x, False, tma_aligned_sf=True)
    assert sf.stride() == (1, 132)
    assert torch.equal(sf, reference_quant.per_token_cast_to_fp8(x, False)[1])


@pytest.mark.parametrize("call, fragment", [
    (lambda: dg_triton.per_token_cast_to_fp8(torch.zeros(2, 3, 4), False), "x must be 2-D"),
    (lambda: dg_triton.per_token_cast_to_fp8(torch.zeros(2, 4, dtype=torch.float16), False),
     "x must be torch.bfloat16 or torch.float32"),
    (lambda: dg_triton.per_token_cast_to_fp8(torch.zeros(2, 4), False, gran_k=0), "gran_k"),
    (lambda: dg_triton.per_token_cast_to_fp8(torch.zeros(2, 512), False, use_packed_ue8m0=True),
     "use_ue8m0 must be True"),
    (lambda: dg_triton.per_token_cast_to_fp8(torch.zeros(2, 384), True, use_packed_ue8m0=True),
     "multiple of 4"),
    (lambda: dg_triton.per_block_cast_to_fp8([[1.0]], False), "x must be a torch.Tensor"),
    (lambda: dg_triton.per_channel_cast_to_fp8(torch.zeros(100, 4), False), "m a multiple of"),
])
def test_casts_reject_bad_arguments(call, fragment):
    with pytest.raises(DGArgumentError, match=fragment) as error:
        call()
    assert str(error.value).split(":")[0].endswith("_cast_to_fp8")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_per_custom_dims_cast_scales_each_kept_index_by_the_amax_over_the_rest(dtype, use_ue8m0):
    torch.manual_seed(7)
    x = (torch.randn(5, 37, 24) * torch.rand(5, 1, 1) * 10).to(dtype)
    x[2] = 0  # an all-zero slice: the 1e-4 floor
    for dims in [(0,), (0, 2), (-1,), (1,)]:
        q, sf = dg_triton.per_custom_dims_cast_to_fp8(x, dims, use_ue8m0)
        assert q.shape == x.shape and q.dtype == torch.float8_e4m3fn
        kept = sorted(d % 3 for d in dims)
        assert sf.dtype == torch.float32 and sf.shape == tuple(x.size(d) for d in kept)
        # The amax over the other dims, one scale per kept index, computed independently.
        moved = x.float().abs().permute(*kept, *[d for d in range(3) if d not in kept])
        amax = moved.reshape(*sf.shape, -1).amax(dim=-1).clamp(min=1e-4)
        want = amax / 448.0
        if use_ue8m0:
            want = torch.exp2(torch.ceil(torch.log2(want)))
        assert torch.equal(sf, want), dims
        # q is x / sf broadcast back, cast once; its largest magnitude per kept index is <= 448.
        shape = [x.size(d) if d in kept else 1 for d in range(3)]
        assert torch.equal(q.view(torch.uint8), (x.float() * (1.0 / sf.view(shape))).to(torch.float8_e4m3fn).view(torch.uint8))
        assert q.float().abs().max() <= 448
    # dims=(0,) on [SK, Dh] is one scale a token (the indexer's key cache).
    q, sf = dg_triton.per_custom_dims_cast_to_fp8(x[:, :, 0].contiguous(), (0,), use_ue8m0)
    assert sf.shape == (5,)


def test_per_custom_dims_cast_edge_dims():
    torch.manual_seed(8)
    x = torch.randn(6, 40) * 30
    one, sf_one = dg_triton.per_custom_dims_cast_to_fp8(x, (0,), False)
    # A repeated or negative dim names the same dim once.
    for dims in [(0, 0), (-2,), (0, -2)]:
        q, sf = dg_triton.per_custom_dims_cast_to_fp8(x, dims, False)
        assert torch.equal(sf, sf_one) and torch.equal(q.view(torch.uint8), one.view(torch.uint8))
    # Keeping every dim leaves nothing to reduce: one scale per element, |x| / 448 (API.md's
    # reading; DeepGEMM's amax(dim=()) would reduce everything instead, see the docstring).
    q, sf = dg_triton.per_custom_dims_cast_to_fp8(x, (0, 1), False)
    assert sf.shape == x.shape
    assert torch.equal(sf, x.abs().clamp(min=1e-4) / 448.0)
    assert q.float().abs().max() <= 448 and q.float().abs().min() >= 448 / 1.07
    # An empty kept dim is fine (an empty result); an empty reduced dim is refused by name.
    q, sf = dg_triton.per_custom_dims_cast_to_fp8(torch.randn(4, 0), (1,), False)
    assert q.shape == (4, 0) and sf.numel() == 0
    with pytest.raises(DGArgumentError, match=r"x must be non-empty in the dims its amax"):
        dg_triton.per_custom_dims_cast_to_fp8(torch.randn(4, 0), (0,), False)


@pytest.mark.parametrize("dims, fragment", [
    (0, "dims must be a tuple of ints"), ((0.5,), "dims must be a tuple of ints"),
    ((True,), "dims must be a tuple of ints"), ((3,), r"dims must be dims of a 2-D x"),
    ((-3,), r"dims must be dims of a 2-D x"),
])
def test_per_custom_dims_cast_rejects_bad_dims(dims, fragment):
    with pytest.raises(DGArgumentError, match=fragment):
        dg_triton.per_custom_dims_cast_to_fp8(torch.ones(4, 8), dims, False)
    with pytest.raises(DGArgumentError, match="x must be torch.bfloat16 or torch.float32"):
        dg_triton.per_custom_dims_cast_to_fp8(torch.ones(4, 8, dtype=torch.float16), (0,), False)


@pytest.mark.parametrize("shape", [(128, 0), (0, 0)])
def test_casts_of_no_columns_return_empty_results(shape):
    # A reshape with -1 and a byte view of an empty last dim both fail at n == 0; the results
    # are the definitions' shapes, all empty.
    x = torch.randn(*shape)
    m = shape[0]
    q, sf = dg_triton.per_block_cast_to_fp8(x, False)
    assert q.shape == shape and sf.shape == (-(-m // 128), 0)
    q, sf = dg_triton.per_channel_cast_to_fp8(x, False)
    assert q.shape == shape and sf.shape == (m // 128, 0)
    q, sf = dg_triton.per_token_cast_to_fp8(x, True, use_packed_ue8m0=True)
    assert q.shape == shape and sf.shape == (m, 0) and sf.dtype == torch.int32
    packed, sf = dg_triton.per_token_cast_to_fp4(x, True, use_packed_ue8m0=True)
    assert packed.shape == shape and sf.shape == (m, 0) and sf.dtype == torch.int32
