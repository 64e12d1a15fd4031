"""The reference FP4 helpers (dg_triton/reference_quant.py) against API.md 1.4 / 2.1 / 3.15 on
hand-computed examples, the public wrappers of dg_triton.utils.math on CPU tensors (which run the
reference), and the wrappers' argument checks. Plain CPU, no interpreter."""
import pytest
import torch

import dg_triton
from dg_triton import reference_quant
from dg_triton.errors import DGArgumentError

# Code of each E2M1 magnitude {0, .5, 1, 1.5, 2, 3, 4, 6} is its index; bit 3 is the sign.
MAGNITUDES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _codes_of(values, use_ue8m0=False):
    """Codes of one row whose first element is +-6 (so sf is exactly 1, amax / 6)."""
    x = torch.tensor([values], dtype=torch.float32)
    packed, sf = reference_quant.per_token_cast_to_fp4(x, use_ue8m0, gran_k=len(values))
    assert sf.tolist() == [[1.0]]
    return reference_quant.unpack_fp4_codes(packed)[0].tolist()


def test_ties_round_down_and_values_above_a_threshold_round_up():
    thresholds = reference_quant.FP4_E2M1_THRESHOLDS
    assert thresholds == (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
    above = [torch.nextafter(torch.tensor(t), torch.tensor(10.0)).item() for t in thresholds]
    codes = _codes_of([6.0, *thresholds, *above, 0.0])  # 16 values
    assert codes[0] == 7
    assert codes[1:8] == [0, 1, 2, 3, 4, 5, 6]  # exactly on a midpoint: the lower magnitude
    assert codes[8:15] == [1, 2, 3, 4, 5, 6, 7]  # one ulp above: the upper one
    assert codes[15] == 0


def test_every_magnitude_maps_to_its_index_with_the_sign_in_bit_3():
    codes = _codes_of([*MAGNITUDES, *(-v for v in MAGNITUDES)])
    assert codes == [0, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11, 12, 13, 14, 15]


def test_values_that_round_to_zero_lose_their_sign():
    codes = _codes_of([-6.0, -0.25, -0.1, -0.0, -1e-30, 0.25, -0.26, 5.5])
    assert codes == [15, 0, 0, 0, 0, 0, 9, 7]  # code 8 ("-0") never appears; 5.5 saturates to 6


def test_even_column_goes_to_the_low_nibble():
    x = torch.tensor([[6.0, 1.0, -0.5, 3.0]])  # codes 7, 2, 9, 5
    packed, sf = reference_quant.per_token_cast_to_fp4(x, False, gran_k=4)
    assert sf.tolist() == [[1.0]]
    assert packed.dtype == torch.int8 and packed.shape == (1, 2)
    assert packed.view(torch.uint8).tolist() == [[0x27, 0x59]]


def test_scale_is_amax_over_6_with_the_floor_and_optional_ue8m0():
    x = torch.zeros(3, 64)
    x[0, 0], x[0, 1], x[0, 2] = 3.0, -1.5, 0.4  # amax 3: sf 0.5, scaled 6, -3, 0.8
    x[0, 32] = 7.0  # amax 7: sf 7/6 (fp32 division), UE8M0 2.0
    x[2, 40] = -12.0  # sf 2
    packed, sf = reference_quant.per_token_cast_to_fp4(x, False, gran_k=32)
    assert sf[0, 0].item() == 0.5 and sf[0, 1] == torch.tensor(7.0) / 6
    floor = (torch.tensor(1e-4) / 6).item()
    assert sf[1].tolist() == [floor, floor] and sf[2].tolist() == [floor, 2.0]
    codes = reference_quant.unpack_fp4_codes(packed)
    assert codes[0, :3].tolist() == [7, 13, 2]  # 6, -3, 0.8 -> 1.0
    assert codes[0, 32].item() == 7 and codes[2, 40].item() == 15
    assert codes[1].abs().sum().item() == 0

    packed, sf = reference_quant.per_token_cast_to_fp4(x, True, gran_k=32)
    # 1e-4 / 6 = 1.67e-5 rounds up to 2^-15.
    assert sf.tolist() == [[0.5, 2.0], [2.0 ** -15] * 2, [2.0 ** -15, 2.0]]
    assert reference_quant.unpack_fp4_codes(packed)[0, 32].item() == 5  # 7 / 2 = 3.5, a tie: 3


def test_columns_past_n_count_as_zero_and_packed_scales_pad_with_one():
    x = torch.full((2, 100), -1.0)  # groups of 32: 4 groups, the last one 4 columns wide
    x[1, 96:] = 12.0
    packed, sf = reference_quant.per_token_cast_to_fp4(x, True, gran_k=32)
    assert packed.shape == (2, 50) and sf.shape == (2, 4)
    packed_words, words = reference_quant.per_token_cast_to_fp4(x, True, 32, True)
    assert torch.equal(packed_words, packed)
    assert words.dtype == torch.int32 and words.shape == (2, 1)
    assert torch.equal(reference_quant.unpack_ue8m0_from_int(words), sf)
    # 5 groups of 24 (n = 120): two words, the last 3 bytes of the second one are 1.0 (127).
    _, words = reference_quant.per_token_cast_to_fp4(torch.ones(1, 120), True, 24, True)
    assert words.shape == (1, 2)
    # amax 1 -> sf 1/6 -> 2^-2: biased exponent 125.
    assert words.view(torch.uint8).tolist() == [[125, 125, 125, 125, 125, 127, 127, 127]]


def test_transpose_moves_codes_unchanged():
    codes = torch.tensor([[1, 2, 3, 8], [4, 5, 15, 0]], dtype=torch.uint8)  # logical [2, 4]
    a = reference_quant.pack_fp4_codes(codes)
    assert a.view(torch.uint8).tolist() == [[0x21, 0x83], [0x54, 0x0F]]
    t = reference_quant.transpose_packed_fp4(a)
    assert t.shape == (4, 1) and t.dtype == torch.int8
    # Row c of the result packs (codes[0, c], codes[1, c]), row 0 low.
    assert t.view(torch.uint8).flatten().tolist() == [0x41, 0x52, 0xF3, 0x08]
    random_bytes = torch.randint(-128, 128, (6, 5), dtype=torch.int8)
    twice = reference_quant.transpose_packed_fp4(reference_quant.transpose_packed_fp4(random_bytes))
    assert torch.equal(twice, random_bytes)


def test_cast_back_multiplies_each_code_by_its_group_scale():
    codes = torch.tensor([[7, 9, 8, 0, 2, 13]], dtype=torch.uint8)
    packed = reference_quant.pack_fp4_codes(codes)
    out = reference_quant.cast_back_from_fp4(packed, torch.tensor([[0.5, 4.0]]), gran_k=4)
    assert out.tolist() == [[3.0, -0.25, 0.0, 0.0, 4.0, -12.0]]
    assert out.dtype == torch.float32
    assert not out[0, 2].signbit()  # code 8 is +0
    words = torch.tensor([[126 | (129 << 8) | (7 << 16)]], dtype=torch.int32)  # 0.5, 4.0, 2^-120
    assert torch.equal(reference_quant.cast_back_from_fp4(packed, words, 4, True), out)


@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("gran_k", [32, 128])
def test_round_trip_error_is_at_most_one_scale(gran_k, use_ue8m0):
    """The largest gap between neighbouring magnitudes is 2 (4 to 6), so |x - back| <= sf."""
    x = torch.randn(64, 384) * 10.0 ** torch.empty(()).uniform_(-3, 3)
    packed, sf = dg_triton.per_token_cast_to_fp4(x, use_ue8m0, gran_k)
    back = dg_triton.cast_back_from_fp4(packed, sf, gran_k)
    scale_of_column = sf.repeat_interleave(gran_k, dim=1)[:, :384]
    assert bool(((x - back).abs() <= scale_of_column * 1.0001).all())
    grid = torch.tensor(MAGNITUDES)
    ratio = (back / scale_of_column).abs()
    assert bool(torch.isin(ratio, grid).all())


def test_public_helpers_on_cpu_return_the_reference():
    x = torch.randn(129, 300, dtype=torch.bfloat16)
    for gran_k, use_ue8m0, packed_sf in [(32, False, False), (128, True, False), (32, True, True)]:
        got = dg_triton.per_token_cast_to_fp4(x, use_ue8m0, gran_k, packed_sf)
        ref = reference_quant.per_token_cast_to_fp4(x, use_ue8m0, gran_k, packed_sf)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
        aligned = dg_triton.per_token_cast_to_fp4(x, use_ue8m0, gran_k, packed_sf,
                                                  tma_aligned_sf=True)[1]
        assert aligned.stride() == (1, 132) and torch.equal(aligned, ref[1])
        back = dg_triton.cast_back_from_fp4(got[0], aligned, gran_k, packed_sf)
        assert torch.equal(back, reference_quant.cast_back_from_fp4(*ref, gran_k, packed_sf))
    a = torch.randint(-128, 128, (130, 77), dtype=torch.int8)
    assert torch.equal(dg_triton.transpose_packed_fp4(a), reference_quant.transpose_packed_fp4(a))
    # Defaults as DeepGEMM's: gran_k 128, unpacked SF.
    packed, sf = dg_triton.per_token_cast_to_fp4(x, False)
    assert sf.shape == (129, 3) and sf.dtype == torch.float32
    assert dg_triton.cast_back_from_fp4(packed, sf).shape == (129, 300)


def test_empty_inputs_give_empty_outputs():
    packed, sf = dg_triton.per_token_cast_to_fp4(torch.zeros(0, 64), True, 32, True)
    assert packed.shape == (0, 32) and sf.shape == (0, 1)
    packed, sf = dg_triton.per_token_cast_to_fp4(torch.zeros(3, 0), False, 32)
    assert packed.shape == (3, 0) and sf.shape == (3, 0)
    assert dg_triton.transpose_packed_fp4(torch.zeros(0, 5, dtype=torch.int8)).shape == (10, 0)


def _rejects(argument, fn, *args, **kwargs):
    with pytest.raises(DGArgumentError) as info:
        fn(*args, **kwargs)
    assert f": {argument} must be" in str(info.value), str(info.value)
    return str(info.value)


def test_cast_rejects_bad_input():
    cast = dg_triton.per_token_cast_to_fp4
    assert "n=129" in _rejects("x", cast, torch.zeros(4, 129), False)
    _rejects("x", cast, torch.zeros(4, 128, dtype=torch.float16), False)
    _rejects("x", cast, torch.zeros(4, 128, dtype=torch.int8), False)
    _rejects("x", cast, torch.zeros(2, 4, 128), False)
    _rejects("x", cast, [[1.0, 2.0]], False)
    _rejects("use_ue8m0", cast, torch.zeros(4, 128), False, 32, True)
    for gran_k in (0, -32, 1.5, True):
        _rejects("gran_k", cast, torch.zeros(4, 128), False, gran_k)


def test_transpose_rejects_bad_input():
    transpose = dg_triton.transpose_packed_fp4
    assert "m=3" in _rejects("a", transpose, torch.zeros(3, 8, dtype=torch.int8))
    _rejects("a", transpose, torch.zeros(4, 8, dtype=torch.uint8))
    _rejects("a", transpose, torch.zeros(4, 8))
    _rejects("a", transpose, torch.zeros(8, dtype=torch.int8))
    _rejects("a", transpose, None)


def test_cast_back_rejects_bad_input():
    back = dg_triton.cast_back_from_fp4
    packed = torch.zeros(4, 100, dtype=torch.int8)  # n = 200: 2 groups of 128, 7 of 32
    sf = torch.ones(4, 2)
    assert back(packed, sf).shape == (4, 200)
    _rejects("packed", back, packed.to(torch.uint8), sf)
    _rejects("packed", back, torch.zeros(4, 2, 50, dtype=torch.int8), sf)
    _rejects("sf", back, packed, sf.to(torch.bfloat16))
    _rejects("sf", back, packed, torch.ones(4, 3))
    _rejects("sf", back, packed, torch.ones(4, 2), 32)  # 32 needs 7 columns
    _rejects("sf", back, packed, torch.ones(4, 1))
    _rejects("sf", back, packed, sf, 128, True)  # packed needs int32
    assert back(packed, torch.zeros(4, 1, dtype=torch.int32), 128, True).shape == (4, 200)
    _rejects("sf", back, packed, torch.zeros(4, 2, dtype=torch.int32), 128, True)
    _rejects("sf", back, packed, "scales")
    _rejects("sf", back, packed, torch.ones(4, 2, device="meta"))
    _rejects("gran_k", back, packed, sf, 0)
