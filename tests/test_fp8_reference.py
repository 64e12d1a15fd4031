"""Reference math of the dense FP8 / FP8xFP4 GEMMs and of fp8_gemm_nt_skip_head_mid (API.md 3.1, 3.3),
checked against hand cases and against a dequantization written differently (loops and
repeat_interleave instead of index broadcasting, float64 element sums instead of a matmul)."""
import pytest
import torch

from dg_triton.reference_fp8 import (
    dequantize_operand,
    fp8_gemm_nt_skip_head_mid_reference,
    fp8_gemm_reference,
    resolve_recipe,
)
from dg_triton.reference_quant import (
    ceil_to_ue8m0,
    dequantize_from_fp4_e2m1,
    pack_fp4_codes,
    pack_ue8m0_to_int,
    per_block_cast_to_fp8,
    per_token_cast_to_fp8,
    unpack_fp4_codes,
)
from dg_triton.testing import calc_diff

ALIASES = ("nt", "nn", "tn", "tt")
FP8 = torch.float8_e4m3fn


def physical(pair, transposed):
    """(data, sf) as an alias that reads the operand transposed takes it (API.md 1.1)."""
    return tuple(t.T.contiguous() for t in pair) if transposed else pair


def slow_dequant(data, sf, gran_mn, gran_k):
    """Element by element: value times the SF of its (row // gran_mn, col // gran_k) group, one
    fp32 multiply each, as the definition's."""
    values = data.float()
    out = torch.empty_like(values)
    for r in range(values.size(0)):
        for c in range(values.size(1)):
            out[r, c] = values[r, c] * sf[r // gran_mn, c // gran_k]
    return out


def repeated_dequant(data, sf, gran_mn, gran_k):
    """The SF repeated over its group with repeat_interleave, cropped to the data's shape."""
    mn, k = data.shape
    return data.float() * sf.repeat_interleave(gran_mn, 0)[:mn].repeat_interleave(gran_k, 1)[:, :k]


def element_sum_product(a_values, b_values):
    return (a_values.double()[:, None, :] * b_values.double()[None, :, :]).sum(-1)


def quantized_problem(m, n, k, kind):
    x, y = torch.randn(m, k), torch.randn(n, k)
    a = per_token_cast_to_fp8(x, use_ue8m0=False)
    b = per_block_cast_to_fp8(y, use_ue8m0=False) if kind == "1d2d" else per_token_cast_to_fp8(y, use_ue8m0=False)
    return x, y, a, b


RECIPES = {"1d2d": (1, 128, 128), "1d1d": (1, 1, 128)}


# --- dequantization ----------------------------------------------------------------------------------

@pytest.mark.parametrize("gran_mn,gran_k", [(1, 1), (2, 2), (3, 4), (1, 128)])
def test_dequantize_scales_each_value_by_the_sf_of_its_group(gran_mn, gran_k):
    mn, k = 7, 9
    data = torch.randn(mn, k).to(FP8)
    sf = torch.rand(-(-mn // gran_mn), -(-k // gran_k)) + 0.25
    assert torch.equal(dequantize_operand(data, sf, mn, gran_mn, gran_k), slow_dequant(data, sf, gran_mn, gran_k))


def test_dequantize_reads_any_sf_strides():
    data = torch.randn(6, 256).to(FP8)
    sf = torch.rand(6, 2) + 0.5
    aligned = torch.zeros(2, 8).T[:6]  # the TMA-aligned MN-major layout
    aligned.copy_(sf)
    assert torch.equal(dequantize_operand(data, aligned, 6, 1, 128), dequantize_operand(data, sf, 6, 1, 128))


def test_dequantize_packed_ue8m0_sf_equals_its_fp32_powers_of_two():
    mn, k, gran_k = 5, 640, 128  # 5 groups: the packed word of groups 4..7 is padded
    data = torch.randn(mn, k).to(FP8)
    sf = ceil_to_ue8m0(torch.rand(mn, 5) * 4)
    padded = torch.ones(mn, 8)
    padded[:, :5] = sf
    packed = pack_ue8m0_to_int(padded)
    assert packed.dtype == torch.int32 and packed.shape == (mn, 2)
    assert torch.equal(dequantize_operand(data, packed, mn, 1, gran_k), dequantize_operand(data, sf, mn, 1, gran_k))


@pytest.mark.parametrize("packed_along", ["k", "mn"])
def test_dequantize_fp4_unpacks_along_the_packed_dim(packed_along):
    mn, k, gran_k = 6, 64, 32
    codes = torch.randint(0, 16, (mn, k), dtype=torch.uint8)
    values = dequantize_from_fp4_e2m1(codes)
    data = pack_fp4_codes(codes) if packed_along == "k" else pack_fp4_codes(codes.T.contiguous()).T
    assert data.shape == ((mn, k // 2) if packed_along == "k" else (mn // 2, k))
    assert torch.equal(unpack_fp4_codes(pack_fp4_codes(codes)), codes)
    sf = torch.rand(mn, k // gran_k) + 0.5
    expected = values * sf.repeat_interleave(gran_k, 1)
    assert torch.equal(dequantize_operand(data, sf, mn, 1, gran_k), expected)


# --- recipes -----------------------------------------------------------------------------------------

def test_resolve_recipe_default_follows_the_sfb_dtype():
    assert resolve_recipe(torch.zeros(1, 1)) == ((1, 128), (128, 128))
    assert resolve_recipe(torch.zeros(1, 1, dtype=torch.int32)) == ((1, 128), (1, 128))
    assert resolve_recipe(torch.zeros(1, 1), recipe=(1, 1, 32)) == ((1, 32), (1, 32))
    assert resolve_recipe(torch.zeros(1, 1), recipe_a=(1, 128), recipe_b=(1, 32)) == ((1, 128), (1, 32))


# --- dense GEMM --------------------------------------------------------------------------------------

def test_fp8_gemm_reference_hand_case():
    # D = c + (0.5 * [1, 2]) . (2 * [3, 4]) = 100 + 11 for the single element.
    a = (torch.tensor([[1.0, 2.0]]).to(FP8), torch.tensor([[0.5]]))
    b = (torch.tensor([[3.0, 4.0]]).to(FP8), torch.tensor([[2.0]]))
    d = torch.empty(1, 1)
    assert fp8_gemm_reference(a, b, d, recipe=(1, 1, 128)).item() == 11.0
    assert fp8_gemm_reference(a, b, d, torch.tensor([[100.0]]), recipe=(1, 1, 128)).item() == 111.0
    assert fp8_gemm_reference(a, b, d, recipe=(1, 128, 128)).item() == 11.0


def test_fp8_gemm_reference_per_block_sfb_hand_case():
    # Two N-blocks of one row each (gran_n = 1 would be per token; here gran_n = 2 covers rows 0-1).
    a = (torch.ones(1, 4).to(FP8), torch.tensor([[1.0, 10.0]]))
    b = (torch.ones(3, 4).to(FP8), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    d = torch.empty(1, 3)
    out = fp8_gemm_reference(a, b, d, recipe=(1, 2, 2))
    # Row n of B uses sfb[n // 2]; columns k // 2 pick the K group of both SFs.
    expected = [2 * (1 * 1) + 2 * (10 * 2), 2 * (1 * 1) + 2 * (10 * 2), 2 * (1 * 3) + 2 * (10 * 4)]
    assert out.tolist() == [expected]


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("kind", ["1d2d", "1d1d"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_fp8_gemm_reference_equals_the_manual_dequant_product(alias, kind, out_dtype):
    m, n, k = 9, 136, 300
    _, _, a, b = quantized_problem(m, n, k, kind)
    gran_b = (128, 128) if kind == "1d2d" else (1, 128)
    expected = element_sum_product(repeated_dequant(*a, 1, 128), repeated_dequant(*b, *gran_b))
    c = torch.randn(m, n) * 32
    d = torch.full((m, n), float("nan"), dtype=out_dtype)
    out = fp8_gemm_reference(physical(a, alias[0] == "t"), physical(b, alias[1] == "n"), d, c.to(out_dtype),
                             recipe=RECIPES[kind], layout=alias)
    assert out.dtype == out_dtype and out.shape == (m, n)
    expected = (c.to(out_dtype).double() + expected).to(out_dtype)
    tolerance = {"rtol": 1e-5, "atol": 1e-4} if out_dtype == torch.float32 else {"rtol": 8e-3, "atol": 0.5}
    torch.testing.assert_close(out.double(), expected.double(), **tolerance)


@pytest.mark.parametrize("kind", ["1d2d", "1d1d"])
def test_fp8_gemm_reference_is_within_the_fp8_threshold_of_the_unquantized_product(kind):
    # API.md 8: the FP8 GEMMs pass at calc_diff < 1e-3 against the unquantized inputs.
    x, y, a, b = quantized_problem(64, 256, 512, kind)
    out = fp8_gemm_reference(a, b, torch.empty(64, 256, dtype=torch.bfloat16), recipe=RECIPES[kind])
    assert calc_diff(out, x @ y.T) < 1e-3


def test_fp8_gemm_reference_recipe_pair_equals_recipe():
    _, _, a, b = quantized_problem(8, 128, 256, "1d2d")
    d = torch.empty(8, 128)
    assert torch.equal(fp8_gemm_reference(a, b, d, recipe=(1, 128, 128)),
                       fp8_gemm_reference(a, b, d, recipe_a=(1, 128), recipe_b=(128, 128)))
    assert torch.equal(fp8_gemm_reference(a, b, d), fp8_gemm_reference(a, b, d, recipe=(1, 128, 128)))


def test_fp8_gemm_reference_default_for_packed_sfb_is_per_token():
    m, n, k = 4, 8, 512
    a = per_token_cast_to_fp8(torch.randn(m, k), use_ue8m0=True)
    b = per_token_cast_to_fp8(torch.randn(n, k), use_ue8m0=True)
    packed_a = (a[0], pack_ue8m0_to_int(a[1]))
    packed_b = (b[0], pack_ue8m0_to_int(b[1]))
    d = torch.empty(m, n)
    assert torch.equal(fp8_gemm_reference(packed_a, packed_b, d), fp8_gemm_reference(a, b, d, recipe=(1, 1, 128)))


def test_fp8_gemm_reference_with_an_fp4_operand_equals_its_unpacked_values():
    m, n, k = 4, 6, 64
    a = per_token_cast_to_fp8(torch.randn(m, k), use_ue8m0=False, gran_k=128)
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    sfb = torch.rand(n, k // 32) + 0.5
    b_values = dequantize_from_fp4_e2m1(codes) * sfb.repeat_interleave(32, 1)
    d = torch.empty(m, n)
    out = fp8_gemm_reference(a, (pack_fp4_codes(codes), sfb), d, recipe_a=(1, 128), recipe_b=(1, 32))
    expected = element_sum_product(repeated_dequant(*a, 1, 128), b_values)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-4)
    # The same operand packed along N (B MN-major, API.md 1.4) gives the same product.
    mn_packed = pack_fp4_codes(codes.T.contiguous()).T
    torch.testing.assert_close(fp8_gemm_reference(a, (mn_packed, sfb), d, recipe_a=(1, 128), recipe_b=(1, 32)),
                               out, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("zero_dim", ["m", "n"])
def test_fp8_gemm_reference_with_m_or_n_zero_leaves_d(zero_dim):
    m, n = (0, 8) if zero_dim == "m" else (8, 0)
    a = (torch.zeros(m, 128).to(FP8), torch.ones(m, 1))
    b = (torch.zeros(n, 128).to(FP8), torch.ones(1, 1))
    d = torch.full((m, n), 3.0)
    assert torch.equal(fp8_gemm_reference(a, b, d), d)


def test_fp8_gemm_reference_with_k_zero_gives_c_or_zeros():
    a = (torch.zeros(4, 0).to(FP8), torch.ones(4, 0))
    b = (torch.zeros(8, 0).to(FP8), torch.ones(1, 0))
    d = torch.full((4, 8), float("nan"))
    c = torch.randn(4, 8)
    assert torch.equal(fp8_gemm_reference(a, b, d), torch.zeros(4, 8))
    assert torch.equal(fp8_gemm_reference(a, b, d, c), c)


# --- skip-head-mid -----------------------------------------------------------------------------------

@pytest.mark.parametrize("head_splits", [(16, 8, 32), (32, 0, 16), (8, 24, 8)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_skip_head_mid_reference_places_heads_and_leaves_mid_untouched(head_splits, out_dtype):
    left, mid, right = head_splits
    heads, m, k = 3, 5, 256
    n = heads * (left + right)
    _, _, a, b = quantized_problem(m, n, k, "1d2d")
    d = torch.full((m, heads * (left + mid + right)), float("nan"), dtype=out_dtype)
    d[:, ::3] = 7.0  # mid columns keep whatever was there, NaN or not
    out = fp8_gemm_nt_skip_head_mid_reference(a, b, d, head_splits)
    product = fp8_gemm_reference(a, b, torch.empty(m, n, dtype=out_dtype))
    columns = torch.arange(n)
    n_out = columns + (columns + right) // (left + right) * mid  # API.md 3.3 column remap
    assert torch.equal(out[:, n_out], product)
    # The columns not written are exactly the mid columns of each head, and keep d's values.
    written = torch.zeros(d.size(1), dtype=torch.bool)
    written[n_out] = True
    is_mid = torch.zeros(heads, left + mid + right, dtype=torch.bool)
    is_mid[:, left:left + mid] = True
    assert torch.equal(~written, is_mid.flatten())
    assert torch.equal(out[:, ~written].nan_to_num(-1.0), d[:, ~written].nan_to_num(-1.0))


def test_skip_head_mid_reference_does_not_modify_d_and_handles_m_zero():
    a = (torch.zeros(0, 128).to(FP8), torch.ones(0, 1))
    b = (torch.zeros(96, 128).to(FP8), torch.ones(1, 1))
    d = torch.full((0, 112), 2.0)
    assert torch.equal(fp8_gemm_nt_skip_head_mid_reference(a, b, d, (16, 8, 32)), d)
    _, _, a, b = quantized_problem(4, 96, 128, "1d2d")
    d = torch.zeros(4, 112)
    before = d.clone()
    fp8_gemm_nt_skip_head_mid_reference(a, b, d, (16, 8, 32))
    assert torch.equal(d, before)
