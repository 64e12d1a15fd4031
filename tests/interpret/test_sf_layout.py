"""Scale-factor layout kernels (dg_triton.triton.sf_layout) under the Triton interpreter, bitwise
against the definitions of dg_triton.reference_sf_layout (API.md 2.3-2.5, 8: exact).

Shapes are API.md 8 "SF layout" shrunk for the interpreter, with MN not a multiple of 4 and SK not
a multiple of 4 (the padding and missing-group cases). They are not in tests/shapes.py, which holds
the GPU shapes.
"""
import pytest
import torch

from dg_triton import reference_sf_layout as ref
from dg_triton.triton import sf_layout
from dg_triton.utils.math import align, ceil_div

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
