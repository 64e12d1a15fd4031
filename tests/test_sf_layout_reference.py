"""Scale-factor layout definitions (API.md 2.3-2.5) and the public helpers on CPU tensors.

The references of ``dg_triton.reference_sf_layout`` are checked element by element against the
offsets of API.md 2.3 on small hand-checked examples; the public functions of ``utils.layout`` are
checked against the references and against the decision table and rejections of API.md 2.4/2.5.
"""
import pytest
import torch

from dg_triton import reference_sf_layout as ref
from dg_triton.errors import DGArgumentError
from dg_triton.utils import layout

# Shapes of the layout tests (API.md 8 "SF layout", shrunk for a CPU): not in tests/shapes.py, which
# holds the GPU shapes.
MN_VALUES = [1, 3, 127, 128, 4097]
K_VALUES = [128, 384, 7296]


def storage_of(tensor: torch.Tensor, size: int) -> torch.Tensor:
    """The first ``size`` elements of ``tensor``'s storage, flat (offset 0 is asserted)."""
    assert tensor.storage_offset() == 0
    return tensor.as_strided((size,), (1,))


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32) if tensor.dtype == torch.float32 else tensor


def powers_of_two(*shape) -> torch.Tensor:
    return 2.0 ** torch.randint(-20, 20, shape).float()


def column_major(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.mT.contiguous().mT


@pytest.fixture
def arch(monkeypatch):
    """Sets the arch the decision table of ``transform_sf_into_required_layout`` sees."""
    def set_arch(major):
        monkeypatch.setattr(layout, "current_arch_major", lambda *args: major)
    return set_arch


# --- Definitions on hand-checked examples -------------------------------------------------------


def test_mn_major_places_element_r_j_at_offset_j_times_aligned_mn_plus_r():
    sf = torch.arange(15, dtype=torch.float32).reshape(3, 5)
    out = ref.get_mn_major_tma_aligned_tensor(sf)
    assert out.shape == (3, 5) and out.stride() == (1, 4)
    flat = storage_of(out, 4 * 5)
    for r in range(3):
        for j in range(5):
            assert flat[j * 4 + r].item() == 5 * r + j
    assert flat[3::4].eq(0).all()  # the padding row, written as 0


def test_grouped_mn_major_places_element_g_r_j_at_offset_g_aligned_mn_sk_plus_j_aligned_mn_plus_r():
    sf = torch.arange(2 * 3 * 5, dtype=torch.float32).reshape(2, 3, 5)
    out = ref.get_mn_major_tma_aligned_tensor(sf)
    assert out.shape == (2, 3, 5) and out.stride() == (4 * 5, 1, 4)
    flat = storage_of(out, 2 * 4 * 5)
    for g in range(2):
        for r in range(3):
            for j in range(5):
                assert flat[g * 4 * 5 + j * 4 + r].item() == 15 * g + 5 * r + j


def test_packed_ue8m0_puts_exponent_of_group_4p_plus_j_in_byte_j():
    # Element (r, j) = 2^(5r + j - 7): biased exponent 120 + 5r + j.
    exponent = torch.arange(15).reshape(3, 5) - 7
    out = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(2.0 ** exponent.float())
    assert out.dtype == torch.int32 and out.shape == (3, 2) and out.stride() == (1, 4)
    words = [[0x7B7A7978, 0x7C], [0x807F7E7D, 0x81], [0x85848382, 0x86]]
    flat = storage_of(out, 2 * 4)
    for r in range(3):
        for p in range(2):
            assert flat[p * 4 + r].item() & 0xFFFFFFFF == words[r][p]
    assert flat[3::4].eq(0).all()


def test_packed_ue8m0_of_one_is_127_and_of_zero_is_0():
    out = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(torch.tensor([[1.0, 0.0, 2.0 ** -127, 2.0 ** 127]]))
    assert out.item() & 0xFFFFFFFF == (254 << 24) | (0 << 16) | (0 << 8) | 127


def test_already_aligned_sf_is_returned_as_is():
    for shape in [(5, 3), (2, 5, 3), (1, 7), (8, 2)]:
        aligned = ref.get_mn_major_tma_aligned_tensor(torch.randn(shape))
        assert ref.is_mn_major_tma_aligned(aligned)
        assert ref.get_mn_major_tma_aligned_tensor(aligned) is aligned
        assert layout.get_mn_major_tma_aligned_tensor(aligned) is aligned
    # MN % 4 == 0 makes a plain column-major tensor aligned too.
    column = column_major(torch.randn(8, 3))
    assert layout.get_mn_major_tma_aligned_tensor(column) is column
    row_major = torch.randn(8, 3)
    assert layout.get_mn_major_tma_aligned_tensor(row_major) is not row_major


# --- Public functions on CPU equal the definitions ---------------------------------------------


@pytest.mark.parametrize("mn", MN_VALUES)
@pytest.mark.parametrize("groups", [None, 2])
@pytest.mark.parametrize("transposed", [False, True])
def test_public_helpers_on_cpu_equal_the_definitions(mn, groups, transposed):
    batch = () if groups is None else (groups,)
    for k in K_VALUES:
        sk = -(-k // 128)
        sf = torch.randn(*batch, mn, sk)
        sf = column_major(sf) if transposed else sf
        out = layout.get_mn_major_tma_aligned_tensor(sf)
        assert torch.equal(bits(out), bits(sf)) and ref.is_mn_major_tma_aligned(out)

        sf = powers_of_two(*batch, mn, -(-k // 32))
        sf = column_major(sf) if transposed else sf
        if sf.dim() == 2 and mn % 4 == 0 and not sf.is_contiguous() and sf.stride() != (1, mn):
            continue
        out = layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
        expected = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf.contiguous())
        assert torch.equal(out, expected) and out.stride() == expected.stride()


def test_packed_rejects_a_non_mn_major_non_contiguous_2d_input_with_mn_multiple_of_4():
    sliced = powers_of_two(8, 10)[:, :6]
    with pytest.raises(DGArgumentError, match="get_mn_major_tma_aligned_packed_ue8m0_tensor: sf.stride"):
        layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sliced)
    # MN % 4 != 0: DeepGEMM's slower path takes it.
    layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(powers_of_two(7, 10)[:, :6])


@pytest.mark.parametrize("function", [layout.get_mn_major_tma_aligned_tensor,
                                      layout.get_mn_major_tma_aligned_packed_ue8m0_tensor])
def test_helpers_reject_wrong_dims_and_dtypes(function):
    name = function.__name__
    with pytest.raises(DGArgumentError, match=f"{name}: sf must be 2-D"):
        function(torch.ones(4))
    with pytest.raises(DGArgumentError, match=f"{name}: sf must be 2-D"):
        function(torch.ones(2, 2, 4, 4))
    with pytest.raises(DGArgumentError, match=rf"{name}: sf.dtype must be torch.float32, got torch.bfloat16"):
        function(torch.ones(4, 4, dtype=torch.bfloat16))


# --- psum layout (API.md 2.5) ---------------------------------------------------------------------


def int32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def test_psum_row_mask_keeps_rows_from_aligned_previous_end_to_own_end():
    # mk 4: expert 0 rows [0, 3); expert 1 [4, 4) empty; expert 2 [4, 6); expert 3 [8, 9); rows 9.. unowned.
    mask = ref.psum_row_mask(int32([3, 4, 6, 9]), 12, 4)
    assert mask.tolist() == [True, True, True, False, True, True, False, False, True, False, False, False]
    # An empty expert written as a repeated unaligned end, and a last end past MN.
    assert ref.psum_row_mask(int32([2, 2, 7]), 6, 4).tolist() == [True, True, False, False, True, True]
    assert not ref.psum_row_mask(int32([0]), 5, 128).any()


def test_packed_with_psum_writes_zero_for_gap_rows_whatever_they_hold(monkeypatch):
    monkeypatch.setattr(layout, "_mk_alignment", 16)
    psum = int32([5, 21, 40])  # experts [0, 5), [16, 21), [32, 40)
    sf = powers_of_two(41, 7)
    gap = ~ref.psum_row_mask(psum, 41, 16)
    sf[gap] = float("nan")
    out = layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum)
    plain = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    assert out.shape == (41, 2) and out.stride() == (1, 44)
    assert out[gap].eq(0).all() and torch.equal(out[~gap], plain[~gap])
    assert torch.equal(storage_of(out, 44 * 2).view(2, 44)[:, 41:], torch.zeros(2, 3, dtype=torch.int32))


def test_packed_with_psum_reads_the_mk_alignment_at_call_time(monkeypatch):
    sf, psum = powers_of_two(64, 4), int32([10, 50])
    monkeypatch.setattr(layout, "_mk_alignment", 16)
    out_16 = layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum)
    monkeypatch.setattr(layout, "_mk_alignment", 32)
    out_32 = layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout=psum)
    assert out_16[16:32].ne(0).all() and out_32[16:32].eq(0).all()
    assert torch.equal(out_16[32:50], out_32[32:50]) and out_32[50:].eq(0).all()


@pytest.mark.parametrize("sf, psum, argument", [
    (torch.ones(8, 4), torch.tensor([8]), "psum_layout.dtype"),
    (torch.ones(8, 4), int32([4, 0, 8])[::2], "psum_layout must be contiguous"),
    (torch.ones(8, 4), int32([]), "psum_layout.numel()"),
    (torch.ones(8, 4), int32([[4, 8]]), "psum_layout must be 1-D"),
    (torch.ones(8, 4), torch.tensor(8, dtype=torch.int32), "psum_layout must be 1-D"),
    (torch.ones(8, 4), [8], "psum_layout must be None or a torch.Tensor"),
    (torch.ones(2, 8, 4), int32([8]), "sf must be 2-D and contiguous when psum_layout"),
    (column_major(torch.ones(8, 4)), int32([8]), "sf must be 2-D and contiguous when psum_layout"),
])
def test_packed_psum_layout_rejections_name_the_argument(sf, psum, argument):
    with pytest.raises(DGArgumentError, match=r"^get_mn_major_tma_aligned_packed_ue8m0_tensor: "
                       + argument.replace("(", r"\(").replace(")", r"\)")):
        layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum)


# --- k-grouped packing (API.md 2.5) -------------------------------------------------------------

K_GROUPED = layout.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor


def exponent_rows(*exponents_per_row, mn=4) -> torch.Tensor:
    """fp32 [len, mn]: row i is 2^(e_i - 127) in every column (biased exponent e_i)."""
    return torch.stack([torch.full((mn,), 2.0 ** (e - 127)) for e in exponents_per_row])


def words(*byte_lists) -> list[int]:
    return [sum(byte << (8 * j) for j, byte in enumerate(bytes_)) - (1 << 32 if len(bytes_) == 4 and bytes_[3] >= 128
                                                                      else 0) for bytes_ in byte_lists]


def test_k_grouped_packs_each_group_on_its_own_and_concatenates():
    # gran_k 32: group sizes 160 (5 SF rows), 0, 64 (2 rows) -> packed 2 + 0 + 1 rows.
    sf = exponent_rows(101, 102, 103, 104, 105, 201, 202)
    out = ref.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, int32([160, 0, 64]), [160, 0, 64], 32, 128)
    assert out.shape == (3, 4) and out.dtype == torch.int32
    assert out[:, 0].tolist() == words((101, 102, 103, 104), (105, 0, 0, 0), (201, 202, 0, 0))
    assert out.eq(out[:, :1]).all()


def test_k_grouped_psum_groups_start_at_aligned_previous_end():
    # k_alignment 128, gran_k 128: ends 200, 200, 600 -> sizes 200, 0 (starts at 256 > 200), 344.
    assert ref.k_grouped_sizes(int32([200, 200, 600]), 128, True) == [200, 0, 344]
    sf = exponent_rows(1, 2, 3, 4, 5)  # 2 rows for group 0, 3 rows for group 2
    out = ref.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, int32([200, 200, 600]), None, 128, 128, True)
    # Without ks_cpu, PK is the bound (5 + 3 * 3) // 4 = 3; the third row is past the content: 0.
    assert out[:, 0].tolist() == words((1, 2, 0, 0), (3, 4, 5, 0)) + [0]


def test_k_grouped_psum_with_ks_cpu_sizes_from_the_list_and_packs_from_the_layout():
    # ks_cpu = align(k_g, 256) = [256, 256]: PK = 2 * ceil(256 / 128) = 4 with gran_k 32; the device
    # sizes 32 and 100 (start 256) give one packed row each, at rows 0 and 1; rows 2, 3 are 0.
    sf = exponent_rows(7, 8, 9, 10, 11)
    out = ref.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, int32([32, 356]), [256, 256], 32, 256, True)
    assert out[:, 0].tolist() == words((7, 0, 0, 0), (8, 9, 10, 11)) + [0, 0]


def test_k_grouped_public_helper_on_cpu_equals_the_definition():
    for use_psum_layout, ks_cpu in ((False, [256, 0, 640, 128]), (True, [256, 0, 640, 128]), (True, None), (True, [])):
        layout_values = [256, 0, 640, 128] if not use_psum_layout else [256, 256, 896, 1024]
        sf_k = sum(-(-k // 32) for k in [256, 0, 640, 128])
        sf = powers_of_two(sf_k, 12)
        out = K_GROUPED(sf, int32(layout_values), ks_cpu, 32, 128, use_psum_layout)
        expected = ref.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
            sf, int32(layout_values), ks_cpu, 32, 128, use_psum_layout)
        assert torch.equal(out, expected) and out.is_contiguous()
        assert out.shape == ((2 + 0 + 5 + 1) if ks_cpu else (sf_k + 3 * 4) // 4, 12)


def test_k_grouped_with_no_packed_rows_is_empty():
    out = K_GROUPED(torch.ones(0, 8), int32([0, 0]), [0, 0], 128, 128)
    assert out.shape == (0, 8) and out.dtype == torch.int32
    assert K_GROUPED(torch.ones(0, 8), int32([0]), None, 32, 32, True).shape == (0, 8)


@pytest.mark.parametrize("args, kwargs, argument", [
    ((torch.ones(4, 8, 1), int32([128]), [128], 32, 128), {}, "sf must be 2-D"),
    ((torch.ones(4, 8, dtype=torch.float64), int32([128]), [128], 32, 128), {}, "sf.dtype"),
    ((column_major(torch.ones(4, 8)), int32([128]), [128], 32, 128), {}, "sf must be contiguous"),
    ((torch.ones(4, 8), [128], [128], 32, 128), {}, "grouped_layout must be a torch.Tensor"),
    ((torch.ones(4, 8), torch.tensor([128]), [128], 32, 128), {}, "grouped_layout.dtype"),
    ((torch.ones(4, 8), int32([128, 0, 0, 0])[::2], [128, 0], 32, 128), {}, "grouped_layout must be contiguous"),
    ((torch.ones(4, 8), int32([128]), [128], 64, 128), {}, "gran_k"),
    ((torch.ones(4, 8), int32([128]), [128], 32.0, 128), {}, "gran_k"),
    ((torch.ones(4, 8), int32([128]), [128], 32, 48), {}, "k_alignment"),
    ((torch.ones(4, 8), int32([128]), [128], 32, 0), {}, "k_alignment"),
    ((torch.ones(4, 8), int32([]), [], 32, 128), {"use_psum_layout": True}, "grouped_layout.numel()"),
    ((torch.ones(4, 8), int32([1] * 129), None, 32, 128), {"use_psum_layout": True}, "grouped_layout.numel()"),
    ((torch.ones(4, 6), int32([128]), [128], 32, 128), {}, "sf.size(1)"),
    ((torch.ones(4, 8), int32([128]), [128, 0], 32, 128), {}, "len(ks_cpu)"),
    ((torch.ones(4, 8), int32([128]), [160], 32, 128), {}, "sum(ceil(ks_cpu[g] / gran_k))"),
    ((torch.ones(4, 8), int32([128]), None, 32, 128), {}, "ks_cpu must be a non-empty list"),
    ((torch.ones(4, 8), int32([128]), [], 32, 128), {}, "ks_cpu must be a non-empty list"),
    ((torch.ones(4, 8), int32([128]), [-128], 32, 128), {}, "ks_cpu[0]"),
    ((torch.ones(4, 8), int32([128]), int32([128]), 32, 128), {}, "ks_cpu must be None or a list"),
    ((torch.ones(4, 8), int32([128]), [128], 32, 128), {"use_psum_layout": 2}, "use_psum_layout"),
])
def test_k_grouped_rejections_name_function_argument_expected_and_actual(args, kwargs, argument):
    escaped = argument.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")
    with pytest.raises(DGArgumentError, match=r"^get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor: "
                       + escaped + ".*, got "):
        K_GROUPED(*args, **kwargs)


def test_k_grouped_psum_skips_the_sfk_consistency_check_of_ks_cpu():
    # With the psum layout ks_cpu holds align(k_g, k_alignment), which need not match SFK.
    out = K_GROUPED(powers_of_two(1, 4), int32([32]), [128], 32, 128, True)
    assert out.shape == (1, 4) and out.ne(0).all()


# --- transform_sf_into_required_layout (API.md 2.4) ---------------------------------------------


@pytest.mark.parametrize("major", [None, 9])
def test_sm90_per_token_fp32_sf_becomes_mn_major(arch, major):
    arch(major)
    sf = torch.randn(127, 57)
    out = layout.transform_sf_into_required_layout(sf, 127, 7296, (1, 128, 128), is_sfa=True)
    assert torch.equal(bits(out), bits(sf)) and out.stride() == (1, 128)
    grouped = torch.randn(2, 127, 3)
    out = layout.transform_sf_into_required_layout(grouped, 127, 384, (1, 128), num_groups=2)
    assert torch.equal(bits(out), bits(grouped)) and out.stride() == (128 * 3, 1, 128)


@pytest.mark.parametrize("major", [None, 9])
def test_sm90_per_block_fp32_sf_is_returned_unchanged(arch, major):
    arch(major)
    sf = torch.randn(2, 33, 57)
    assert layout.transform_sf_into_required_layout(sf, 4097, 7296, (1, 128, 128), 2, is_sfa=False) is sf
    transposed = column_major(sf)
    assert layout.transform_sf_into_required_layout(transposed, 4097, 7296, (128, 128), 2) is transposed
    with pytest.raises(DGArgumentError, match="transform_sf_into_required_layout: sf.stride"):
        layout.transform_sf_into_required_layout(torch.randn(33, 60)[:, :57], 4097, 7296, (128, 128))


def test_disable_ue8m0_cast_takes_the_sm90_rows_on_sm100(arch):
    arch(10)
    sf = torch.randn(127, 3)
    out = layout.transform_sf_into_required_layout(sf, 127, 384, (1, 128), disable_ue8m0_cast=True)
    assert out.dtype == torch.float32 and torch.equal(bits(out), bits(sf))
    with pytest.raises(DGArgumentError, match="Unknown SF transformation"):
        layout.transform_sf_into_required_layout(torch.randn(127, 12), 127, 384, (1, 32), disable_ue8m0_cast=True)


@pytest.mark.parametrize("gran_k", [32, 128])
def test_sm100_fp32_sf_is_packed_to_ue8m0(arch, gran_k):
    arch(10)
    sf = powers_of_two(2, 127, -(-7296 // gran_k))
    out = layout.transform_sf_into_required_layout(sf, 127, 7296, (1, 1, gran_k), 2, is_sfa=True)
    expected = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    assert torch.equal(out, expected) and out.stride() == expected.stride()


def test_sm100_per_block_fp32_sf_is_broadcast_to_rows_then_packed(arch):
    arch(10)
    sf = powers_of_two(33, 57)
    out = layout.transform_sf_into_required_layout(sf, 4097, 7296, (128, 128))
    rows = torch.arange(4097) // 128
    expected = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf[rows])
    assert out.shape == (4097, 15) and torch.equal(out, expected) and out.stride() == (1, 4100)


def test_sm100_int32_sf_is_returned_unchanged_when_tma_aligned(arch):
    arch(10)
    packed = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(powers_of_two(127, 57))
    assert layout.transform_sf_into_required_layout(packed, 127, 7296, (1, 128)) is packed
    packed_32 = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(powers_of_two(127, 228))
    assert layout.transform_sf_into_required_layout(packed_32, 127, 7296, (1, 32)) is packed_32
    with pytest.raises(DGArgumentError, match="sf.stride"):
        layout.transform_sf_into_required_layout(packed.contiguous(), 127, 7296, (1, 128))
    with pytest.raises(DGArgumentError, match="gran_mn == 1"):
        layout.transform_sf_into_required_layout(packed[:1], 128, 7296, (128, 128))


@pytest.mark.parametrize("major, sf, recipe", [
    (None, torch.ones(127, 3, dtype=torch.int32), (1, 32)),     # int32 without SM100
    (9, torch.ones(127, 12), (1, 32)),                           # gran_k 32 on SM90
    (10, torch.ones(127, 6), (1, 64)),                           # gran_k 64 on SM100
    (9, torch.ones(64, 6), (2, 64)),                             # unknown granularity on SM90
])
def test_unknown_combinations_are_rejected(arch, major, sf, recipe):
    arch(major)
    message = "transform_sf_into_required_layout: sf must be .*Unknown SF transformation"
    with pytest.raises(DGArgumentError, match=message):
        layout.transform_sf_into_required_layout(sf, 127, 384, recipe)


@pytest.mark.parametrize("args, kwargs, argument", [
    ((torch.ones(127, 3), 127, 384, (1, 128)), {"num_groups": 2}, "sf.dim()"),
    ((torch.ones(2, 127, 3), 127, 384, (1, 128)), {}, "sf.dim()"),
    ((torch.ones(2, 127, 3), 127, 384, (1, 128)), {"num_groups": 3}, "sf.size(-3)"),
    ((torch.ones(126, 3), 127, 384, (1, 128)), {}, "sf.size(-2)"),
    ((torch.ones(127, 4), 127, 384, (1, 128)), {}, "sf.size(-1)"),
    ((torch.ones(127, 3, dtype=torch.int32), 127, 384, (1, 128)), {}, "sf.size(-1)"),
    ((torch.ones(127, 3, dtype=torch.float16), 127, 384, (1, 128)), {}, "sf.dtype"),
    ((torch.ones(127, 3), 127, 384, (1, 1, 128)), {}, "is_sfa"),
    ((torch.ones(127, 3), 127, 384, (1, 128)), {"is_sfa": True}, "is_sfa"),
    ((torch.ones(127, 3), 127, 384, (1, 128, 128, 1)), {}, "recipe"),
    ((torch.ones(127, 3), 127, 384, (0, 128)), {}, "recipe"),
    ((torch.ones(127, 3), -1, 384, (1, 128)), {}, "mn"),
    ((torch.ones(127, 3), 127, 384.0, (1, 128)), {}, "k"),
])
def test_transform_rejections_name_function_argument_expected_and_actual(arch, args, kwargs, argument):
    arch(None)
    with pytest.raises(DGArgumentError, match=r"^transform_sf_into_required_layout: " + argument.replace("(", r"\(")
                       .replace(")", r"\)") + " must be .*, got "):
        layout.transform_sf_into_required_layout(*args, **kwargs)


def test_transform_on_sm100_passes_psum_layout_to_the_packing(arch, monkeypatch):
    arch(10)
    monkeypatch.setattr(layout, "_mk_alignment", 32)
    psum = int32([20, 100])
    sf = powers_of_two(127, 57)
    out = layout.transform_sf_into_required_layout(sf, 127, 7296, (1, 1, 128), is_sfa=True, psum_layout=psum)
    assert torch.equal(out, ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum, 32))
    assert out[20:32].eq(0).all() and out[100:].eq(0).all() and out[:20].ne(0).all()


def test_transform_on_sm100_selects_psum_rows_after_the_row_broadcast(arch, monkeypatch):
    arch(10)
    monkeypatch.setattr(layout, "_mk_alignment", 64)
    psum = int32([30, 130, 200])
    sf = powers_of_two(2, 57)
    out = layout.transform_sf_into_required_layout(column_major(sf), 200, 7296, (128, 128), psum_layout=psum)
    expected = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf[torch.arange(200) // 128], psum, 64)
    assert out.shape == (200, 15) and torch.equal(out, expected)


def test_transform_with_psum_layout_rejects_grouped_sf_on_sm100(arch):
    arch(10)
    with pytest.raises(DGArgumentError, match="transform_sf_into_required_layout: sf must be 2-D and contiguous"):
        layout.transform_sf_into_required_layout(powers_of_two(2, 1, 57), 127, 7296, (128, 128), 2,
                                                 psum_layout=int32([127]))


def test_transform_ignores_psum_layout_where_nothing_is_packed(arch):
    # As in DeepGEMM: only the SM100 fp32 packing row uses psum_layout.
    arch(9)
    sf = torch.randn(127, 57)
    out = layout.transform_sf_into_required_layout(sf, 127, 7296, (1, 128), psum_layout=int32([10]))
    assert torch.equal(bits(out), bits(sf))


def test_group_layouts_on_another_device_than_sf_are_rejected():
    # meta tensors stand in for a second device: the check runs before any data is touched.
    with pytest.raises(DGArgumentError, match=r"psum_layout.device must be sf's device cpu, got meta"):
        layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(torch.ones(8, 4), torch.ones(1, dtype=torch.int32,
                                                                                          device="meta"))
    with pytest.raises(DGArgumentError, match=r"grouped_layout.device must be sf's device cpu, got meta"):
        K_GROUPED(torch.ones(4, 8), torch.ones(1, dtype=torch.int32, device="meta"), [128], 32, 128)
