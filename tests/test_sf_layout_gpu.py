"""Scale-factor layout helpers (API.md 2.3-2.5) on a CUDA GPU: the Triton kernels behind
``dg_triton.utils.layout`` against the plain-torch definitions of ``dg_triton.reference_sf_layout``,
bitwise, at DeepSeek-V3 sizes (K = 7168: 56 SF columns of gran_k 128, 224 of gran_k 32; 4096 tokens;
8 groups).

Every output the kernels allocate is poisoned (all bits set: NaN as fp32, exponent bytes 255 that
no finite test input has), so a word a kernel forgets to write fails the comparison, padding rows
and rows past the groups' content included. NaN/Inf inputs: the helpers move bits, so the promise
is the reference's own result (exponent byte 255 for NaN/Inf, the NaN payload kept by the fp32
transpose), and no hang.
"""
import zlib

import pytest
import torch

from dg_triton import reference_sf_layout as ref
from dg_triton.utils import layout
from dg_triton.utils.math import align, ceil_div

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

POISON_BITS = -1
DEVICE = "cuda"
# SF columns at K = 7168 per gran_k, and the token / weight row counts of the tests.
SK = {128: 56, 32: 224}
MN_VALUES = [4096, 4097, 7168, 127, 1]


@pytest.fixture(autouse=True)
def seed_per_test(request):
    # Fresh inputs per test, reproducible from the test id alone.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


class _TorchWithPoisonedEmpty:
    """``torch`` as the launchers see it, except that ``empty`` fills its 4-byte result with
    POISON_BITS."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def empty(*args, **kwargs):
        tensor = torch.empty(*args, **kwargs)
        tensor.view(torch.int32).fill_(POISON_BITS)
        return tensor


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    from dg_triton.triton import sf_layout
    monkeypatch.setattr(sf_layout, "torch", _TorchWithPoisonedEmpty())


@pytest.fixture
def mk_alignment(monkeypatch):
    def set_alignment(value):
        monkeypatch.setattr(layout, "_mk_alignment", value)
        return value
    return set_alignment


def powers_of_two(*shape) -> torch.Tensor:
    return 2.0 ** torch.randint(-20, 20, shape, device=DEVICE).float()


def column_major(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.mT.contiguous().mT


def full_storage(tensor: torch.Tensor) -> torch.Tensor:
    """The whole [.., SK, aligned_mn] buffer behind a 2.3-layout tensor, padding rows included."""
    *batch, mn, sk = tensor.shape
    aligned_mn = align(mn, 4)
    return tensor.as_strided((*batch, sk, aligned_mn), (*([aligned_mn * sk] if batch else []), aligned_mn, 1))


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32) if tensor.dtype == torch.float32 else tensor


def assert_same_layout_and_bits(out: torch.Tensor, expected: torch.Tensor) -> None:
    assert out.is_cuda and out.dtype == expected.dtype
    assert out.shape == expected.shape and out.stride() == expected.stride()
    assert torch.equal(bits(full_storage(out)), bits(full_storage(expected)))


def special_values(*shape) -> torch.Tensor:
    """NaN (with a payload), +-Inf, -0.0, subnormals, extreme normals and non-powers of two."""
    values = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e-45, 2.0 ** -126,
                           2.0 ** 127, 3.0, -4.0, 1.0], device=DEVICE)
    picked = values[torch.randint(0, len(values), shape, device=DEVICE)]
    payload_nan = torch.tensor([0x7FC0_1234], dtype=torch.int32, device=DEVICE).view(torch.float32)
    picked.view(-1)[::97] = payload_nan
    return picked


# --- get_mn_major_tma_aligned_tensor -------------------------------------------------------------


@pytest.mark.parametrize("mn", MN_VALUES)
@pytest.mark.parametrize("groups", [None, 8])
@pytest.mark.parametrize("transposed", [False, True])
def test_mn_major_matches_definition_bitwise(mn, groups, transposed):
    batch = () if groups is None else (groups,)
    sf = torch.randn(*batch, mn, SK[128], device=DEVICE)
    sf = column_major(sf) if transposed else sf
    out = layout.get_mn_major_tma_aligned_tensor(sf)
    if ref.is_mn_major_tma_aligned(sf):
        assert out is sf
        return
    assert_same_layout_and_bits(out, ref.get_mn_major_tma_aligned_tensor(sf))


def test_mn_major_returns_an_aligned_input_as_is():
    aligned = layout.get_mn_major_tma_aligned_tensor(torch.randn(8, 4097, 56, device=DEVICE))
    assert layout.get_mn_major_tma_aligned_tensor(aligned) is aligned


def test_mn_major_copies_nan_inf_bits_exactly():
    sf = special_values(4097, 56)
    assert_same_layout_and_bits(layout.get_mn_major_tma_aligned_tensor(sf), ref.get_mn_major_tma_aligned_tensor(sf))


# --- get_mn_major_tma_aligned_packed_ue8m0_tensor --------------------------------------------------


@pytest.mark.parametrize("mn", MN_VALUES)
@pytest.mark.parametrize("groups", [None, 8])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("gran_k", [32, 128])
def test_packed_ue8m0_matches_definition_bitwise(mn, groups, transposed, gran_k):
    batch = () if groups is None else (groups,)
    sf = powers_of_two(*batch, mn, SK[gran_k])
    sf = column_major(sf) if transposed else sf
    out = layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    assert_same_layout_and_bits(out, ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf))


def test_packed_ue8m0_takes_exponent_bits_of_nan_inf_and_non_powers_of_two():
    sf = special_values(8, 4097, 57)
    out = layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    assert_same_layout_and_bits(out, ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf))


def random_psum(mn: int, num_groups: int, mk: int) -> torch.Tensor:
    """psum ends of ``num_groups`` experts in ``mn`` rows. Each expert gets a slot of
    ``mn // num_groups`` rows and fills at most ``slot - mk + 1`` of them, so with its alignment gap
    it never overflows its slot; every fourth expert is empty, alternately written as a repeated
    (unaligned) end and as an aligned end."""
    slot = mn // num_groups
    assert slot >= mk, "too many experts for the rows"
    ends, end = [], 0
    for group in range(num_groups):
        start = align(end, mk)
        if group % 4 == 1:
            end = end if group % 8 == 1 else start
        else:
            end = start + int(torch.randint(0, slot - mk + 2, ()))
        ends.append(end)
    return torch.tensor(ends, dtype=torch.int32, device=DEVICE)


@pytest.mark.parametrize("mn, num_groups, mk", [(4096, 8, 128), (65536, 256, 128), (4097, 37, 64), (127, 4, 16)])
@pytest.mark.parametrize("gran_k", [32, 128])
def test_packed_ue8m0_with_psum_packs_only_expert_rows(mk_alignment, mn, num_groups, mk, gran_k):
    mk_alignment(mk)
    psum = random_psum(mn, num_groups, mk)
    row_mask = ref.psum_row_mask(psum.cpu(), mn, mk).to(DEVICE)
    sf = powers_of_two(mn, SK[gran_k])
    # Gap rows hold NaN bits: read, they would pack as 0xFF bytes.
    sf.view(torch.int32)[~row_mask] = POISON_BITS
    out = layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum)
    assert_same_layout_and_bits(out, ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum.cpu(), mk))
    assert out[~row_mask].eq(0).all() and out[row_mask].ne(0).all()


# --- transform_sf_into_required_layout on the SM100 rows (packing) ----------------------------------


@pytest.fixture
def sm100_decision_table(monkeypatch):
    """The packing rows of API.md 2.4 run on any CUDA GPU: only the decision reads the arch."""
    monkeypatch.setattr(layout, "current_arch_major", lambda *args: 10)


@pytest.mark.parametrize("gran_mn, groups", [(1, None), (1, 8), (128, None), (128, 8)])
@pytest.mark.parametrize("gran_k", [32, 128])
def test_transform_packs_and_broadcasts_rows_bitwise(sm100_decision_table, gran_mn, groups, gran_k):
    mn, k = 4096, 7168
    batch = () if groups is None else (groups,)
    sf = powers_of_two(*batch, ceil_div(mn, gran_mn), SK[gran_k])
    out = layout.transform_sf_into_required_layout(sf, mn, k, (gran_mn, gran_k), groups)
    expected = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(ref.broadcast_sf_rows(sf, mn, gran_mn))
    assert_same_layout_and_bits(out, expected)


@pytest.mark.parametrize("gran_mn", [1, 128])
def test_transform_with_psum_layout_packs_only_expert_rows(sm100_decision_table, mk_alignment, gran_mn):
    mn, k, mk = 8192, 7168, mk_alignment(128)
    psum = random_psum(mn, 16, mk)
    sf = powers_of_two(ceil_div(mn, gran_mn), SK[128])
    out = layout.transform_sf_into_required_layout(sf, mn, k, (1, gran_mn, 128), is_sfa=False, psum_layout=psum)
    expected = ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(ref.broadcast_sf_rows(sf, mn, gran_mn), psum.cpu(), mk)
    assert_same_layout_and_bits(out, expected)


# --- get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor ----------------------------------------


def random_k_sizes(num_groups: int, k_alignment: int, max_k: int = 4096) -> list[int]:
    """Per-group K sizes, multiples of k_alignment (the wgrad GEMM's rule) up to max_k; groups 1
    and 5 empty."""
    sizes = (torch.randint(0, max_k // k_alignment + 1, (num_groups,)) * k_alignment).tolist()
    for group in (1, 5):
        if group < num_groups:
            sizes[group] = 0
    return sizes


def psum_ends(sizes: list[int], k_alignment: int) -> list[int]:
    ends, end = [], 0
    for size in sizes:
        end = align(end, k_alignment) + size
        ends.append(end)
    return ends


@pytest.mark.parametrize("mn", [7168, 4096, 2112])
@pytest.mark.parametrize("gran_k", [32, 128])
@pytest.mark.parametrize("mode", ["sizes", "psum-ks", "psum-no-ks"])
def test_k_grouped_matches_definition_bitwise(mode, gran_k, mn):
    num_groups, k_alignment = 8, 128
    use_psum_layout = mode != "sizes"
    sizes = random_k_sizes(num_groups, k_alignment)
    if use_psum_layout:
        # Psum groups may end anywhere: shave a few K rows off each non-empty group.
        sizes = [max(size - int(torch.randint(0, 100, ())), 0) if size else 0 for size in sizes]
    values = psum_ends(sizes, k_alignment) if use_psum_layout else sizes
    grouped_layout = torch.tensor(values, dtype=torch.int32, device=DEVICE)
    ks_cpu = {"sizes": sizes, "psum-ks": [align(size, k_alignment) for size in sizes], "psum-no-ks": None}[mode]
    sf_k = sum(ceil_div(size, gran_k) for size in sizes)
    sf = powers_of_two(sf_k, mn)
    out = layout.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, grouped_layout, ks_cpu, gran_k,
                                                                        k_alignment, use_psum_layout)
    expected = ref.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, grouped_layout.cpu(), ks_cpu, gran_k,
                                                                          k_alignment, use_psum_layout)
    assert out.is_cuda and out.is_contiguous() and out.shape == expected.shape
    assert torch.equal(out, expected), sizes
    content_rows = sum(ceil_div(size, 4 * gran_k) for size in sizes)
    assert out[:content_rows].ne(0).all() and out[content_rows:].eq(0).all()


def test_k_grouped_takes_exponent_bits_of_nan_inf():
    sizes = [1024, 0, 512, 4096, 128, 0, 256, 2048]
    sf = special_values(sum(ceil_div(size, 32) for size in sizes), 7168)
    grouped_layout = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)
    out = layout.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, grouped_layout, sizes, 32, 128)
    assert torch.equal(out, ref.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
        sf, grouped_layout.cpu(), sizes, 32, 128))


def test_k_grouped_with_128_groups_matches_definition():
    sizes = random_k_sizes(128, 32, max_k=1024)
    grouped_layout = torch.tensor(psum_ends(sizes, 32), dtype=torch.int32, device=DEVICE)
    sf = powers_of_two(sum(ceil_div(size, 32) for size in sizes), 4096)
    out = layout.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, grouped_layout, None, 32, 32, True)
    assert torch.equal(out, ref.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
        sf, grouped_layout.cpu(), None, 32, 32, True))


# --- No host sync: the group layouts are read on the device ---------------------------------------


def test_psum_and_k_grouped_packing_replay_in_a_cuda_graph_with_new_layouts(mk_alignment):
    mk = mk_alignment(128)
    sf = powers_of_two(4096, 56)
    psum = random_psum(4096, 8, mk)
    k_sizes = [1024, 0, 512, 256]
    k_sf = powers_of_two(4096 // 32 + 8, 2048)
    grouped_layout = torch.tensor(psum_ends(k_sizes, 128), dtype=torch.int32, device=DEVICE)

    def run():
        return (layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum),
                layout.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(k_sf, grouped_layout, None, 32, 128, True))

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()  # warm-up: compiles the kernels outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        packed, k_grouped = run()

    for _ in range(2):
        psum.copy_(random_psum(4096, 8, mk))
        new_sizes = random_k_sizes(4, 128, max_k=1024)
        grouped_layout.copy_(torch.tensor(psum_ends(new_sizes, 128), dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(full_storage(packed), full_storage(
            ref.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum.cpu(), mk)))
        assert torch.equal(k_grouped, ref.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
            k_sf, grouped_layout.cpu(), None, 32, 128, True))
