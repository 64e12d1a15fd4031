"""The FP4 helpers (per_token_cast_to_fp4, transpose_packed_fp4, cast_back_from_fp4) on a CUDA GPU,
through the public wrappers (so the Triton kernels of dg_triton/triton/fp4.py run), bitwise against
the plain-torch reference run on CPU copies.

The reference runs on the CPU on purpose: CUDA torch computes ``tensor / python_scalar`` as a
multiply by the reciprocal (one bit less exact), so the reference on CUDA tensors is not the
reference. Sizes are DeepSeek-V3's (hidden 7168, MoE intermediate 2048, q-LoRA 1536, dense
intermediate 18432), plus ragged m.

Outputs are allocated by the launchers; before each call the CUDA caching allocator is handed
blocks of the outputs' sizes filled with 0xFF and freed, so an element a kernel forgets to write is
most likely 0xFF (a NaN scale, an impossible UE8M0 byte 255) rather than a lucky match. That reuse
is the allocator's usual behaviour, not a guarantee; the comparisons cover every element either way.
"""
import zlib

import pytest
import torch

import dg_triton
from dg_triton import reference_quant
from fp4_ties import fp4_tie_row

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CAST_SHAPES = [(4096, 7168), (4096, 2048), (4097, 1536), (129, 7168), (1, 7168), (2111, 18432)]
TRANSPOSE_SHAPES = [(4096, 7168), (7168, 2048), (130, 18432), (2, 7168)]
# (use_ue8m0, use_packed_ue8m0)
SF_MODES = [(False, False), (True, False), (True, True)]


@pytest.fixture(autouse=True)
def seed_per_test(request):
    # Fresh inputs per test, reproducible from the test id alone.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _poison_allocator(*sizes_in_bytes):
    blocks = [torch.full((size,), 0xFF, dtype=torch.uint8, device="cuda")
              for size in sizes_in_bytes]
    del blocks


def _random_input(m, n, dtype):
    magnitude = 10.0 ** (torch.rand(()).item() * 6 - 3)
    x = torch.randn((m, n), device="cuda") * magnitude
    if m > 2:
        x[m // 2] = 0  # the 1e-4 floor
        x[1, : n // 2] *= 1e-3  # groups far below the row's other groups
    return x.to(dtype)


def _sf_equal(sf, sf_ref):
    """Exact, with NaN equal to NaN (payloads may differ between the GPU and the CPU)."""
    sf, sf_ref = sf.cpu(), sf_ref.cpu()
    assert sf.dtype == sf_ref.dtype and sf.shape == sf_ref.shape
    if sf.dtype == torch.float32:
        return bool(((sf == sf_ref) | (sf.isnan() & sf_ref.isnan())).all())
    return torch.equal(sf, sf_ref)


def _cast(x, use_ue8m0, gran_k, use_packed_ue8m0, tma_aligned_sf=False):
    m, n = x.shape
    num_sf = -(-n // gran_k)
    sf_columns = -(-num_sf // 4) if use_packed_ue8m0 else num_sf
    _poison_allocator(m * n // 2, 4 * sf_columns * (-(-m // 4) * 4 if tma_aligned_sf else m))
    return dg_triton.per_token_cast_to_fp4(x, use_ue8m0, gran_k, use_packed_ue8m0,
                                           tma_aligned_sf=tma_aligned_sf)


@pytest.mark.parametrize("use_ue8m0,use_packed_ue8m0", SF_MODES)
@pytest.mark.parametrize("gran_k", [32, 128])
@pytest.mark.parametrize("m,n", CAST_SHAPES)
def test_per_token_cast_to_fp4_matches_reference_bitwise(m, n, gran_k, use_ue8m0, use_packed_ue8m0):
    dtype = torch.bfloat16 if (m + gran_k) % 2 else torch.float32
    tma_aligned_sf = (m // 2 + gran_k // 32 + use_ue8m0) % 2 == 1
    x = _random_input(m, n, dtype)
    packed, sf = _cast(x, use_ue8m0, gran_k, use_packed_ue8m0, tma_aligned_sf)
    packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x.cpu(), use_ue8m0, gran_k,
                                                               use_packed_ue8m0)
    assert packed.is_cuda and packed.dtype == torch.int8 and packed.is_contiguous()
    assert torch.equal(packed.cpu(), packed_ref)
    if tma_aligned_sf:
        assert sf.stride() == (1, -(-m // 4) * 4)
    assert _sf_equal(sf, sf_ref)

    back = dg_triton.cast_back_from_fp4(packed, sf, gran_k, use_packed_ue8m0)
    back_ref = reference_quant.cast_back_from_fp4(packed_ref, sf_ref, gran_k, use_packed_ue8m0)
    assert torch.equal(back.cpu().view(torch.int32), back_ref.view(torch.int32))


def test_per_token_cast_to_fp4_reads_strided_input():
    x = _random_input(7168, 4096, torch.bfloat16).t()  # [4096, 7168], strides (1, 4096)
    for gran_k in (32, 128):
        packed, sf = _cast(x, True, gran_k, True)
        packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x.cpu(), True, gran_k, True)
        assert torch.equal(packed.cpu(), packed_ref) and _sf_equal(sf, sf_ref)


@pytest.mark.parametrize("use_ue8m0,use_packed_ue8m0", SF_MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_values_on_and_next_to_every_midpoint_round_as_the_reference(dtype, use_ue8m0,
                                                                     use_packed_ue8m0):
    """Every row is fp4_tie_row() times a power of two (2^-20..2^20), so the scaled values sit on,
    just above and just below each E2M1 midpoint: the strict compares of the kernel's index
    (saturating FMAs on a GPU) must round ties down as the reference does."""
    rows = torch.arange(-20, 21, dtype=torch.float32)
    x = (fp4_tie_row().repeat(56)[None, :] * torch.exp2(rows)[:, None]).to(dtype).cuda()
    for gran_k in (32, 128):
        packed, sf = _cast(x, use_ue8m0, gran_k, use_packed_ue8m0)
        packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x.cpu(), use_ue8m0, gran_k,
                                                                   use_packed_ue8m0)
        assert torch.equal(packed.cpu(), packed_ref)
        assert _sf_equal(sf, sf_ref)


@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_nan_and_inf_give_what_the_reference_gives(use_ue8m0):
    """A group holding a NaN has sf NaN, one holding an Inf sf Inf, both 2^127 with UE8M0; codes
    are then 0, except +-6 for the infinities under UE8M0 (see dg_triton/triton/fp4.py)."""
    x = _random_input(4096, 7168, torch.float32)
    rows = torch.randint(0, 4096, (64,))
    cols = torch.randint(0, 7168, (64,))
    x[rows[:16], cols[:16]] = float("nan")
    x[rows[16:40], cols[16:40]] = float("inf")
    x[rows[40:], cols[40:]] = float("-inf")
    x[7, 5], x[7, 6] = float("inf"), float("nan")
    for gran_k in (32, 128):
        packed, sf = _cast(x, use_ue8m0, gran_k, False)
        torch.cuda.synchronize()  # a hang or a fault shows here, not in the comparison
        packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x.cpu(), use_ue8m0, gran_k)
        assert torch.equal(packed.cpu(), packed_ref)
        assert _sf_equal(sf, sf_ref)
        assert bool(sf[7, 0].isnan()) != use_ue8m0
        back = dg_triton.cast_back_from_fp4(packed, sf, gran_k)
        back_ref = reference_quant.cast_back_from_fp4(packed_ref, sf_ref, gran_k)
        same = (back.cpu() == back_ref) | (back.cpu().isnan() & back_ref.isnan())
        assert bool(same.all())


@pytest.mark.parametrize("m,n", TRANSPOSE_SHAPES)
def test_transpose_packed_fp4_matches_reference_bitwise(m, n):
    a = torch.randint(-128, 128, (m, n // 2), dtype=torch.int8, device="cuda")
    _poison_allocator(m * n // 2)
    out = dg_triton.transpose_packed_fp4(a)
    assert out.shape == (n, m // 2) and out.is_contiguous()
    assert torch.equal(out.cpu(), reference_quant.transpose_packed_fp4(a.cpu()))
    assert torch.equal(dg_triton.transpose_packed_fp4(out), a)
    strided = a[:, 1:-1]
    assert torch.equal(dg_triton.transpose_packed_fp4(strided).cpu(),
                       reference_quant.transpose_packed_fp4(strided.cpu()))


@pytest.mark.parametrize("use_packed_ue8m0", [False, True])
@pytest.mark.parametrize("gran_k", [32, 128])
def test_cast_back_from_fp4_on_arbitrary_bytes_and_scales(gran_k, use_packed_ue8m0):
    """Every code (8 included) against random scales: subnormal, huge, Inf/NaN products, and
    random UE8M0 bytes including 0 and 255."""
    m, n = 4097, 7168
    packed = torch.randint(-128, 128, (m, n // 2), dtype=torch.int8, device="cuda")
    num_sf = -(-n // gran_k)
    if use_packed_ue8m0:
        sf = torch.randint(-2 ** 31, 2 ** 31, (m, -(-num_sf // 4)), dtype=torch.int32,
                           device="cuda")
    else:
        sf = torch.randn(m, num_sf, device="cuda") * 10.0 ** torch.randint(-40, 39, (m, 1),
                                                                         device="cuda")
    _poison_allocator(4 * m * n)
    out = dg_triton.cast_back_from_fp4(packed, sf, gran_k, use_packed_ue8m0)
    ref = reference_quant.cast_back_from_fp4(packed.cpu(), sf.cpu(), gran_k, use_packed_ue8m0)
    out = out.cpu()
    same = (out.view(torch.int32) == ref.view(torch.int32)) | (out.isnan() & ref.isnan())
    assert bool(same.all()), f"{(~same).sum().item()} values differ"


def test_helpers_capture_in_a_cuda_graph():
    """No host synchronization in the launchers: the three helpers capture and replay."""
    x = _random_input(4096, 7168, torch.bfloat16)
    packed, sf = dg_triton.per_token_cast_to_fp4(x, True, 32, True)  # compile outside the capture
    dg_triton.cast_back_from_fp4(packed, sf, 32, True)
    dg_triton.transpose_packed_fp4(packed)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        packed_g, sf_g = dg_triton.per_token_cast_to_fp4(x, True, 32, True)
        back_g = dg_triton.cast_back_from_fp4(packed_g, sf_g, 32, True)
        transposed_g = dg_triton.transpose_packed_fp4(packed_g)
    x.copy_(_random_input(4096, 7168, torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x.cpu(), True, 32, True)
    assert torch.equal(packed_g.cpu(), packed_ref) and torch.equal(sf_g.cpu(), sf_ref)
    back_ref = reference_quant.cast_back_from_fp4(packed_ref, sf_ref, 32, True)
    assert torch.equal(back_g.cpu(), back_ref)
    assert torch.equal(transposed_g.cpu(), reference_quant.transpose_packed_fp4(packed_ref))


def test_offsets_past_two_to_the_31():
    """Inputs and outputs with more than 2^31 elements: offsets are 64-bit. The rows are
    independent, so the last rows are checked against the reference on those rows alone."""
    m, n = 300_000, 7168  # 2.15e9 elements
    x = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    x[-64:] = _random_input(64, n, torch.bfloat16)
    x[:-64].normal_()
    packed, sf = dg_triton.per_token_cast_to_fp4(x, True, 32, True)
    packed_ref, sf_ref = reference_quant.per_token_cast_to_fp4(x[-64:].cpu(), True, 32, True)
    assert torch.equal(packed[-64:].cpu(), packed_ref) and torch.equal(sf[-64:].cpu(), sf_ref)
    del x
    back = dg_triton.cast_back_from_fp4(packed, sf, 32, True)  # fp32 [m, n]: 8.6 GB
    back_ref = reference_quant.cast_back_from_fp4(packed_ref, sf_ref, 32, True)
    assert torch.equal(back[-64:].cpu(), back_ref)
    del back
    # Transpose of [m, n/2] bytes: output rows of length m/2, the last input rows land in the
    # last output columns.
    transposed = dg_triton.transpose_packed_fp4(packed)
    assert transposed.shape == (n, m // 2)
    assert torch.equal(transposed[:, -32:].cpu(), reference_quant.transpose_packed_fp4(packed_ref))
