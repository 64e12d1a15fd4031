"""Scale-factor layout kernels (dg_triton.triton.sf_layout) under the Triton interpreter, bitwise
against the definitions of dg_triton.reference_sf_layout (API.md 2.3-2.5, 8: exact).

Shapes are API.md 8 "SF layout" shrunk for the interpreter, with MN not a multiple of 4 and SK not
a multiple of 4 (the padding and missing-group cases). They are not in tests/shapes.py, which holds
the GPU shapes.

Every output the launchers allocate is poisoned (all bits set: a NaN as fp32, and exponent bytes
255 that no test input has), so a word a kernel forgets to write fails the bitwise comparison,
padding rows and rows past the groups' content included.
"""
import zlib

import pytest
import torch

from dg_triton import reference_sf_layout as ref
from dg_triton.triton import sf_layout
from dg_triton.utils.math import align, ceil_div

POISON_BITS = -1


class _TorchWithPoisonedEmpty:
    """``torch`` as the launchers see it, except that ``empty`` fills its 4-byte result with
    POISON_BITS instead of leaving whatever memory held."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def empty(*args, **kwargs):
        tensor = torch.empty(*args, **kwargs)
        tensor.view(torch.int32).fill_(POISON_BITS)
        return tensor


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    monkeypatch.setattr(sf_layout, "torch", _TorchWithPoisonedEmpty())


@pytest.fixture(autouse=True)
def seed_per_test(request):
    # Fresh inputs per test, reproducible from the test id alone.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))

MN_VALUES = [1, 127, 4097]
K_VALUES = [128, 384, 7296]


def full_storage(tensor: torch.Tensor) -> torch.Tensor:
    """The whole [.., SK, aligned_mn] buffer behind a 2.3-layout tensor, padding rows included."""
    *batch, mn, sk = tensor.shape
    aligned_mn = align(mn, 4)
    return tensor.as_strided((*batch, sk, aligned_mn), (*([aligned_mn * sk] if batch else []), aligned_mn, 1))


def aligned_strides(shape) -> tuple:
    *batch, mn, sk = shape
    aligned_mn = align(mn, 4)
    return (aligned_mn * sk, 1, aligned_mn) if batch else (1, aligned_mn)


def make_input(values: torch.Tensor, transposed: bool) -> torch.Tensor:
    return values.mT.contiguous().mT if transposed else values


def powers_of_two(*shape) -> torch.Tensor:
    return 2.0 ** torch.randint(-20, 20, shape).float()


@pytest.mark.parametrize("mn", MN_VALUES)
@pytest.mark.parametrize("groups", [None, 2])
@pytest.mark.parametrize("transposed", [False, True])
def test_mn_major_kernel_matches_definition_bitwise(mn, groups, transposed):
    batch = () if groups is None else (groups,)
    for k in K_VALUES:
        sf = make_input(torch.randn(*batch, mn, ceil_div(k, 128)), transposed)
        out = sf_layout.mn_major_tma_aligned(sf)
        expected = ref.get_mn_major_tma_aligned_tensor(sf.contiguous())
        assert out.shape == sf.shape and out.stride() == aligned_strides(sf.shape)
        assert torch.equal(out.view(torch.int32), sf.view(torch.int32))
        # Padding rows are 0 in both (API.md 2.3 leaves them unspecified; dg_triton writes 0).
        assert torch.equal(full_storage(out).view(torch.int32), full_storage(expected).view(torch.int32))


def test_mn_major_kernel_moves_bits_not_values():
    special = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf"), 1e-45, -3.0, 0.0])
    sf = special[torch.randint(0, len(special), (127, 57))]
    out = sf_layout.mn_major_tma_aligned(sf)
    assert torch.equal(out.view(torch.int32), sf.view(torch.int32))


@pytest.mark.parametrize("mn", MN_VALUES)
@pytest.mark.parametrize("groups", [None, 2])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("gran_k", [32, 128])
def test_packed_ue8m0_kernel_matches_definition_bitwise(mn, groups, transposed, gran_k):
    batch = () if groups is None else (groups,)
    for k in K_VALUES:
        sf = make_input(powers_of_two(*batch, mn, ceil_div(k, gran_k)), transposed)
        out = sf_layout.mn_major_tma_aligned_packed_ue8m0(sf)
        expected = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
        packed_shape = (*batch, mn, ceil_div(ceil_div(k, gran_k), 4))
        assert out.dtype == torch.int32 and out.shape == packed_shape
        assert out.stride() == aligned_strides(packed_shape)
        assert torch.equal(full_storage(out), full_storage(expected))


@pytest.mark.parametrize("offset, row_stride", [(1, 56), (0, 58), (0, 56)])
def test_packed_ue8m0_kernel_on_rows_not_16_byte_aligned(offset, row_stride):
    # The 16-byte vector path needs aligned rows of whole words; a view starting one element in,
    # or rows 58 elements apart, must take the scalar path and give the same bits.
    storage = powers_of_two(300 * row_stride + offset)
    sf = storage[offset:offset + 300 * row_stride].view(300, row_stride)[:, :56]
    assert torch.equal(full_storage(sf_layout.mn_major_tma_aligned_packed_ue8m0(sf)),
                       full_storage(ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)))


def test_packed_ue8m0_kernel_reads_exponent_of_any_fp32():
    # Zero, subnormals, the extreme normal exponents and negative inputs (sign bit ignored).
    special = torch.tensor([0.0, 1e-45, 2.0 ** -126, 2.0 ** 127, 1.0, -4.0, 3.0, float("inf")])
    sf = special[torch.randint(0, len(special), (2, 127, 13))]
    assert torch.equal(full_storage(sf_layout.mn_major_tma_aligned_packed_ue8m0(sf)),
                       full_storage(ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)))


@pytest.mark.parametrize("mn, gran_mn", [(1, 128), (127, 128), (4097, 128), (300, 7)])
@pytest.mark.parametrize("groups", [None, 2])
def test_packed_ue8m0_kernel_broadcasts_rows_like_index_select(mn, gran_mn, groups):
    batch = () if groups is None else (groups,)
    sf = powers_of_two(*batch, ceil_div(mn, gran_mn), 57)
    out = sf_layout.mn_major_tma_aligned_packed_ue8m0(sf, mn=mn, gran_mn=gran_mn)
    expected = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(ref.broadcast_sf_rows(sf, mn, gran_mn))
    assert out.shape == expected.shape and out.stride() == expected.stride()
    assert torch.equal(full_storage(out), full_storage(expected))


def test_empty_sf_gives_empty_output_without_launch():
    assert sf_layout.mn_major_tma_aligned(torch.randn(0, 3)).shape == (0, 3)
    assert sf_layout.mn_major_tma_aligned_packed_ue8m0(torch.randn(2, 5, 0)).shape == (2, 5, 0)


# --- psum layout (API.md 2.5): rows outside every expert are not read and are packed as 0 ---------


def random_psum_ends(mn: int, num_groups: int, mk_alignment: int) -> list[int]:
    """End rows of ``num_groups`` experts in an ``mn``-row buffer, each starting at the aligned end
    of the previous one. Expert 1 is empty written as a repeated (unaligned) end, expert 3 empty
    written as an aligned end; the last end may fall short of ``mn``."""
    ends, end = [], 0
    for group in range(num_groups):
        start = align(end, mk_alignment)
        if group == 3:
            end = start
        elif group != 1:
            end = start + int(torch.randint(0, max(mn - start, 0) // max(num_groups - group - 1, 1) + 1, ()))
        ends.append(end)
    return ends


def poisoned_gap_rows(sf: torch.Tensor, row_mask: torch.Tensor) -> torch.Tensor:
    """``sf`` with every row outside ``row_mask`` set to NaN bits (exponent byte 255): any of them
    that the kernel read would show up as 0xFF in a packed word."""
    bits = sf.view(torch.int32).clone()
    bits[~row_mask] = POISON_BITS
    return bits.view(torch.float32)


@pytest.mark.parametrize("mn", [1, 127, 129, 256, 300])
@pytest.mark.parametrize("num_groups", [1, 2, 4])
@pytest.mark.parametrize("gran_k", [32, 128])
def test_packed_ue8m0_kernel_with_psum_packs_only_expert_rows(mn, num_groups, gran_k):
    mk_alignment = 32
    psum = torch.tensor(random_psum_ends(mn, num_groups, mk_alignment), dtype=torch.int32)
    row_mask = ref.psum_row_mask(psum, mn, mk_alignment)
    sf = poisoned_gap_rows(powers_of_two(mn, ceil_div(7296, gran_k)), row_mask)
    out = sf_layout.mn_major_tma_aligned_packed_ue8m0(sf, psum_layout=psum, mk_alignment=mk_alignment)
    expected = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum, mk_alignment)
    assert out.shape == expected.shape and out.stride() == expected.stride()
    assert torch.equal(full_storage(out), full_storage(expected)), psum.tolist()
    assert out[~row_mask].eq(0).all() and out[row_mask].ne(0).all()


def test_packed_ue8m0_kernel_binary_search_finds_every_group_of_many():
    # 37 groups (6 search steps, not a power of two), empty ones among them, mk_alignment 16.
    mn, mk_alignment = 300, 16
    psum = torch.tensor(random_psum_ends(mn, 37, mk_alignment), dtype=torch.int32)
    row_mask = ref.psum_row_mask(psum, mn, mk_alignment)
    sf = poisoned_gap_rows(powers_of_two(mn, 5), row_mask)
    out = sf_layout.mn_major_tma_aligned_packed_ue8m0(sf, psum_layout=psum, mk_alignment=mk_alignment)
    assert torch.equal(full_storage(out), full_storage(ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(
        sf, psum, mk_alignment))), psum.tolist()


@pytest.mark.parametrize("mn, gran_mn", [(300, 128), (129, 7)])
def test_packed_ue8m0_kernel_with_psum_selects_broadcast_rows(mn, gran_mn):
    mk_alignment = 64
    psum = torch.tensor(random_psum_ends(mn, 4, mk_alignment), dtype=torch.int32)
    sf = powers_of_two(ceil_div(mn, gran_mn), 57)
    out = sf_layout.mn_major_tma_aligned_packed_ue8m0(sf, mn=mn, gran_mn=gran_mn, psum_layout=psum,
                                                      mk_alignment=mk_alignment)
    expected = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(ref.broadcast_sf_rows(sf, mn, gran_mn), psum,
                                                                mk_alignment)
    assert torch.equal(full_storage(out), full_storage(expected)), psum.tolist()


# --- k-grouped packing (API.md 2.5) -------------------------------------------------------------

# K sizes drawn for the groups: empty, one SF row, partial last SF row or word, several words.
K_SIZE_CHOICES = [0, 32, 96, 128, 200, 384, 520, 1024]


def random_k_grouped_layout(num_groups: int, use_psum_layout: bool, k_alignment: int):
    """(grouped_layout, true sizes): sizes drawn from K_SIZE_CHOICES with group 1 empty; with
    the psum layout, end offsets where group g starts at align(end_{g-1}, k_alignment)."""
    sizes = [K_SIZE_CHOICES[int(i)] for i in torch.randint(0, len(K_SIZE_CHOICES), (num_groups,))]
    if num_groups > 1:
        sizes[1] = 0
    if not use_psum_layout:
        return torch.tensor(sizes, dtype=torch.int32), sizes
    ends, end = [], 0
    for size in sizes:
        end = align(end, k_alignment) + size
        ends.append(end)
    return torch.tensor(ends, dtype=torch.int32), sizes


# (use_psum_layout, give ks_cpu, k_alignment). k_alignment 256 > 4 * 32 makes the psum ks_cpu sizing
# (align(k_g, 256)) exceed the packed content of gran_k 32 groups: trailing rows must be 0.
K_GROUPED_MODES = {
    "sizes": (False, True, 128),
    "psum-ks": (True, True, 256),
    "psum-no-ks": (True, False, 32),
}


@pytest.mark.parametrize("mn", [4, 300])
@pytest.mark.parametrize("num_groups", [1, 2, 4])
@pytest.mark.parametrize("gran_k", [32, 128])
@pytest.mark.parametrize("mode", sorted(K_GROUPED_MODES))
def test_k_grouped_kernel_matches_definition_bitwise(mode, gran_k, num_groups, mn):
    use_psum_layout, give_ks, k_alignment = K_GROUPED_MODES[mode]
    grouped_layout, sizes = random_k_grouped_layout(num_groups, use_psum_layout, k_alignment)
    assert ref.k_grouped_sizes(grouped_layout, k_alignment, use_psum_layout) == sizes
    sf_k = sum(ceil_div(k, gran_k) for k in sizes)
    sf = powers_of_two(sf_k, mn)
    ks_cpu = ([align(k, k_alignment) for k in sizes] if use_psum_layout else sizes) if give_ks else None
    packed_sf_k = ref.k_grouped_packed_sf_k(ks_cpu, sf_k, num_groups, gran_k)
    out = sf_layout.k_grouped_packed_ue8m0(sf, grouped_layout, packed_sf_k, gran_k, k_alignment, use_psum_layout)
    expected = ref.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, grouped_layout, ks_cpu, gran_k,
                                                                          k_alignment, use_psum_layout)
    assert out.shape == (packed_sf_k, mn) and out.is_contiguous() and out.dtype == torch.int32
    assert torch.equal(out, expected), (sizes, grouped_layout.tolist())
    # Every group's words carry bytes (all inputs are non-zero powers of two); rows past the
    # content (psum bound, or ks_cpu sizing above the content) are 0.
    content_rows = sum(ceil_div(k, 4 * gran_k) for k in sizes)
    assert out[:content_rows].ne(0).all() and out[content_rows:].eq(0).all()


def test_k_grouped_kernel_on_malformed_layouts_stays_in_bounds_and_equals_definition():
    sf = powers_of_two(12, 8)
    cases = [
        (torch.tensor([-64, 640, 96], dtype=torch.int32), False, 9),     # negative size; sizes past SFK
        (torch.tensor([300, 100, 700], dtype=torch.int32), True, 20),    # decreasing psum end
        (torch.tensor([-5, 256, 4096], dtype=torch.int32), True, 2),     # negative end; PK cuts content
    ]
    for grouped_layout, use_psum_layout, packed_sf_k in cases:
        out = sf_layout.k_grouped_packed_ue8m0(sf, grouped_layout, packed_sf_k, 32, 128, use_psum_layout)
        sizes = ref.k_grouped_sizes(grouped_layout, 128, use_psum_layout)
        expected = ref.pack_k_groups(sf, sizes, packed_sf_k, 32)
        assert out.shape == expected.shape == (packed_sf_k, 8)
        assert torch.equal(out, expected), grouped_layout.tolist()


def test_k_grouped_kernel_with_no_packed_rows_returns_empty_without_launch():
    out = sf_layout.k_grouped_packed_ue8m0(torch.ones(0, 8), torch.zeros(3, dtype=torch.int32), 0, 32, 128, False)
    assert out.shape == (0, 8) and out.dtype == torch.int32
