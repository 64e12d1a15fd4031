"""K-grouped GEMMs on an SM90 GPU (dg_triton/k_grouped.py: the k-grouped FP8 1D1D and BF16 kernels
over up to 16 groups a launch) against
dg_triton.reference_k_grouped, per group, with API.md 8's thresholds: FP8 calc_diff < 1e-3, BF16 < 1e-5.

- Shapes: API.md 8's k-grouped list (tests/shapes.py), k_g = max(1, int(expected * U(0.7, 1.3)))
  aligned up to 128; c = randn * 32 accumulated in place (c is d), as upstream's tests do.
- FP8 operands are built as upstream builds them: per-channel casts (128 K rows x 1 column) of
  [sum(ks), MN] bf16 tensors whose magnitudes vary by up to 2^3 either way from one 128 x 128 block
  to the next (test_fp8_gemm_kernel_gpu.scale_groups_apart: a kernel reading another group's or K
  block's scales fails), each group's rows transposed into a K-major block, the SFs transposed.
  d is compared with the unquantized inputs' reference (API.md 8, FP8 error included) and, on each
  group's product d[g] - c[g] (c would otherwise dominate calc_diff), with the reference on the
  dequantized operands. BF16 is compared on d[g] and on d[g] - c[g].
- Empty groups give exactly c[g]; with c separate, d is poisoned with NaN first (every element
  must be written) and c must stay unchanged.
- A call captured in a CUDA graph replays on new inputs written into the same tensors.
- M / N tails and 128-row groups, on the SM90 kernels and on the portable Triton path
  (DG_BACKEND=triton) on the same GPU.
- Both forms over more groups than one launch takes, empty groups at and around the launches'
  seams; a second call of the same problem on other buffers (the launch parameters are cached by
  address); BF16 with a bf16 D (compared on d[g] only: d[g] - c[g] would measure d's rounding).
"""
import random

import pytest
import torch

from shapes import K_GROUPED_GMNK, K_GROUPED_SM90_K_ALIGNMENT

pytestmark = pytest.mark.gpu
if not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9):
    pytest.skip("needs an SM90 GPU", allow_module_level=True)

import dg_triton  # noqa: E402
from dg_triton import reference_k_grouped  # noqa: E402
from dg_triton.testing import calc_diff, capture_graph  # noqa: E402
from dg_triton.utils.math import align  # noqa: E402
from test_fp8_gemm_kernel_gpu import scale_groups_apart  # noqa: E402
from test_grouped_gemm_gpu import seed_and_settings  # noqa: E402,F401 (autouse fixture: seed, backend, alignment)

FP8_THRESHOLD = 1e-3
BF16_THRESHOLD = 1e-5
NAN = float("nan")


def group_ks(num_groups, expected, empty=()):
    ks = [align(max(1, int(expected * random.uniform(0.7, 1.3))), K_GROUPED_SM90_K_ALIGNMENT)
          for _ in range(num_groups)]
    for g in empty:
        ks[g] = 0
    return ks


def check(out, expected, threshold, what):
    assert torch.isfinite(out).all(), f"{what}: unwritten (NaN) or non-finite elements"
    diff = float(calc_diff(out, expected))
    assert diff < threshold, f"{what}: calc_diff {diff:.3g} >= {threshold}"


def check_groups(d, c, ks, threshold, what, expected=None, expected_products=None):
    """Per group: d[g] against `expected` and d[g] - c[g] against `expected_products` - c[g];
    empty groups exactly c[g]."""
    assert torch.isfinite(d).all(), f"{what}: unwritten (NaN) or non-finite elements"
    for g, k in enumerate(ks):
        if k == 0:
            assert torch.equal(d[g], c[g]), f"{what}: empty group {g} is not c[{g}]"
            continue
        if expected is not None:
            check(d[g], expected[g], threshold, f"{what} group {g} (k={k})")
        if expected_products is not None:
            check(d[g] - c[g], expected_products[g] - c[g], threshold, f"{what} group {g} (k={k}) product")


def tn_inputs(ks, m, n, fp8):
    """a [sum(ks), M], b [sum(ks), N] bf16; for FP8 with magnitudes apart per 128 x 128 block."""
    sum_k = sum(ks)
    if fp8:
        return scale_groups_apart(sum_k, m, 128), scale_groups_apart(sum_k, n, 128)
    return (torch.randn(sum_k, m, device="cuda", dtype=torch.bfloat16),
            torch.randn(sum_k, n, device="cuda", dtype=torch.bfloat16))


def nt_operands(a, b, ks, row_major_sf=False):
    """SM90's FP8 nt operands of the tn inputs (module docstring)."""
    a_fp8 = reference_k_grouped.k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(a, False), ks)
    b_fp8 = reference_k_grouped.k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(b, False), ks)
    if row_major_sf:   # not the kernel's layout: the call must transform it
        a_fp8, b_fp8 = (a_fp8[0], a_fp8[1].contiguous()), (b_fp8[0], b_fp8[1].contiguous())
    return a_fp8, b_fp8


def run_fp8(ks, m, n, c_is_d, row_major_sf=False):
    a, b = tn_inputs(ks, m, n, fp8=True)
    a_fp8, b_fp8 = nt_operands(a, b, ks, row_major_sf)
    c = torch.randn(len(ks), m, n, device="cuda").mul_(32)
    c_before = c.clone()
    d = c if c_is_d else torch.full_like(c, NAN)
    grouped_layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    dg_triton.k_grouped_fp8_gemm_nt_contiguous(a_fp8, b_fp8, d, ks, grouped_layout, c=c)
    torch.cuda.synchronize()
    what = f"fp8 ks={ks} m={m} n={n} c_is_d={c_is_d}"
    unquantized = reference_k_grouped.k_grouped_bf16_tn_reference(a, b, c_before, ks)
    check_groups(d, c_before, ks, FP8_THRESHOLD, f"{what} vs unquantized", expected=unquantized)
    del unquantized
    dequantized = reference_k_grouped.k_grouped_fp8_nt_reference(a_fp8, b_fp8, c_before, ks)
    check_groups(d, c_before, ks, FP8_THRESHOLD, f"{what} vs dequantized", expected_products=dequantized)
    if not c_is_d:
        assert torch.equal(c, c_before), f"{what}: c was written"
    return a_fp8[0], b_fp8[0], d


def run_bf16(ks, m, n, c_is_d, dtype=torch.float32):
    a, b = tn_inputs(ks, m, n, fp8=False)
    c = torch.randn(len(ks), m, n, device="cuda").mul_(32).to(dtype)
    c_before = c.clone()
    d = c if c_is_d else torch.full_like(c, NAN)
    grouped_layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    dg_triton.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, grouped_layout, c=c)
    torch.cuda.synchronize()
    what = f"bf16 ks={ks} m={m} n={n} c_is_d={c_is_d} d {dtype}"
    expected = reference_k_grouped.k_grouped_bf16_tn_reference(a, b, c_before, ks)
    # A bf16 d holds c + A @ B rounded, as the reference does; d - c would measure that rounding.
    products = expected if dtype == torch.float32 else None
    check_groups(d, c_before, ks, BF16_THRESHOLD, what, expected=expected, expected_products=products)
    if not c_is_d:
        assert torch.equal(c, c_before), f"{what}: c was written"
    return a, b, d


# ---- API.md 8 shapes -------------------------------------------------------------------------------

@pytest.mark.parametrize("num_groups,m,n,expected_k", K_GROUPED_GMNK)
def test_fp8_nt_matches_reference_on_api_shapes(num_groups, m, n, expected_k):
    run_fp8(group_ks(num_groups, expected_k), m, n, c_is_d=True)


@pytest.mark.parametrize("num_groups,m,n,expected_k", K_GROUPED_GMNK)
def test_bf16_tn_matches_reference_on_api_shapes(num_groups, m, n, expected_k):
    run_bf16(group_ks(num_groups, expected_k), m, n, c_is_d=True)


# ---- empty groups, separate c ---------------------------------------------------------------------------

# The API.md 8 shapes with N = 2048 (the cheaper half), an empty group first, in the middle, last;
# c separate and d poisoned (c is d with empty groups is covered by the tails below).
EMPTY_GROUP_CASES = [(g, m, n, k, empty) for (g, m, n, k) in K_GROUPED_GMNK if n == 2048
                     for empty in ((0,), (g // 2,), (g - 1,))]


@pytest.mark.parametrize("num_groups,m,n,expected_k,empty", EMPTY_GROUP_CASES)
def test_fp8_nt_with_an_empty_group_and_a_separate_c_writes_every_element(num_groups, m, n, expected_k, empty):
    run_fp8(group_ks(num_groups, expected_k, empty), m, n, c_is_d=False)


@pytest.mark.parametrize("num_groups,m,n,expected_k,empty", EMPTY_GROUP_CASES)
def test_bf16_tn_with_an_empty_group_and_a_separate_c_writes_every_element(num_groups, m, n, expected_k, empty):
    run_bf16(group_ks(num_groups, expected_k, empty), m, n, c_is_d=False)


def test_fp8_nt_with_scale_factors_to_transform():
    """Row-major [MN, sum(ks)/128] SFs: the call brings them into the TMA-aligned layout."""
    run_fp8(group_ks(4, 1024, empty=(2,)), 1024, 2048, c_is_d=False, row_major_sf=True)


# ---- tails and the portable path ----------------------------------------------------------------------

# M and N not multiples of any tile, yet multiples of 8 (TMA: the fp32 D rows and BF16's MN-major
# operand rows are 16-byte multiples), or 1 (no row stride); groups of one 128-row K block.
TAIL_CASES = [([128, 0, 384, 128], 264, 136), ([128, 256], 8, 8), ([256, 0, 128], 1, 136)]


@pytest.mark.parametrize("ks,m,n", TAIL_CASES)
@pytest.mark.parametrize("backend", ["auto", "triton"])
@pytest.mark.parametrize("c_is_d", [False, True])
def test_fp8_nt_tails_on_both_paths(monkeypatch, ks, m, n, backend, c_is_d):
    monkeypatch.setenv("DG_BACKEND", backend)
    run_fp8(ks, m, n, c_is_d)


@pytest.mark.parametrize("ks,m,n", TAIL_CASES)
@pytest.mark.parametrize("backend", ["auto", "triton"])
@pytest.mark.parametrize("c_is_d", [False, True])
def test_bf16_tn_tails_on_both_paths(monkeypatch, ks, m, n, backend, c_is_d):
    monkeypatch.setenv("DG_BACKEND", backend)
    run_bf16(ks, m, n, c_is_d)


# ---- several launches, other buffers ---------------------------------------------------------------------

def test_fp8_nt_over_several_launches_with_empty_groups_at_their_seams():
    """40 groups, 36 non-empty: launches of groups 1-16, 19-34 and 35-38; empty groups first,
    between the first two launches and last; M and N tails; c separate, d poisoned."""
    ks = group_ks(40, 256, empty=(0, 17, 18, 39))
    run_fp8(ks, 264, 136, c_is_d=False)


def test_fp8_nt_same_problem_on_other_buffers():
    ks = group_ks(5, 512, empty=(3,))
    # The first call's buffers stay alive, so the second call's are elsewhere (the launch
    # parameters are cached by address): same plan, new descriptors.
    first = run_fp8(ks, 1024, 2048, c_is_d=False)
    second = run_fp8(ks, 1024, 2048, c_is_d=False)
    assert all(x.data_ptr() != y.data_ptr() for x, y in zip(first, second))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bf16_tn_over_several_launches_with_empty_groups_at_their_seams(dtype):
    """As the FP8 case above, with both D dtypes."""
    ks = group_ks(40, 256, empty=(0, 17, 18, 39))
    run_bf16(ks, 264, 136, c_is_d=False, dtype=dtype)


def test_bf16_tn_same_problem_on_other_buffers():
    ks = group_ks(5, 512, empty=(3,))
    # The first call's buffers stay alive, so the second call's are elsewhere (the launch
    # parameters are cached by address): same plan, new descriptors.
    first = run_bf16(ks, 1024, 2048, c_is_d=False)
    second = run_bf16(ks, 1024, 2048, c_is_d=False)
    assert all(x.data_ptr() != y.data_ptr() for x, y in zip(first, second))


@pytest.mark.parametrize("num_groups,m,n,expected_k", [K_GROUPED_GMNK[3]])
def test_bf16_tn_with_a_bf16_d_on_an_api_shape(num_groups, m, n, expected_k):
    run_bf16(group_ks(num_groups, expected_k, empty=(1,)), m, n, c_is_d=True, dtype=torch.bfloat16)


# ---- CUDA graphs -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("row_major_sf", [False, True])
def test_fp8_nt_replays_from_a_cuda_graph_on_new_inputs(row_major_sf):
    ks, m, n = group_ks(4, 1024, empty=(1,)), 1024, 2048
    a, b = tn_inputs(ks, m, n, fp8=True)
    a_fp8, b_fp8 = nt_operands(a, b, ks, row_major_sf)
    c = torch.randn(len(ks), m, n, device="cuda").mul_(32)
    d = torch.full_like(c, NAN)
    grouped_layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    graph = capture_graph(lambda: dg_triton.k_grouped_fp8_gemm_nt_contiguous(a_fp8, b_fp8, d, ks, grouped_layout, c=c))
    # New values in the captured tensors: data, scale factors and c.
    a2, b2 = tn_inputs(ks, m, n, fp8=True)
    a2_fp8, b2_fp8 = nt_operands(a2, b2, ks, row_major_sf)
    for old, new in zip(a_fp8 + b_fp8, a2_fp8 + b2_fp8):
        old.copy_(new)
    c.copy_(torch.randn_like(c).mul_(32))
    d.fill_(NAN)
    graph.replay()
    torch.cuda.synchronize()
    unquantized = reference_k_grouped.k_grouped_bf16_tn_reference(a2, b2, c, ks)
    check_groups(d, c, ks, FP8_THRESHOLD, "fp8 graph replay vs unquantized", expected=unquantized)
    dequantized = reference_k_grouped.k_grouped_fp8_nt_reference(a2_fp8, b2_fp8, c, ks)
    check_groups(d, c, ks, FP8_THRESHOLD, "fp8 graph replay vs dequantized", expected_products=dequantized)


def test_bf16_tn_replays_from_a_cuda_graph_on_new_inputs():
    ks, m, n = group_ks(4, 1024, empty=(2,)), 1024, 2048
    a, b = tn_inputs(ks, m, n, fp8=False)
    c = torch.randn(len(ks), m, n, device="cuda").mul_(32)
    d = torch.full_like(c, NAN)
    grouped_layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    graph = capture_graph(lambda: dg_triton.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, grouped_layout, c=c))
    a.copy_(torch.randn_like(a))
    b.copy_(torch.randn_like(b))
    c.copy_(torch.randn_like(c).mul_(32))
    d.fill_(NAN)
    graph.replay()
    torch.cuda.synchronize()
    expected = reference_k_grouped.k_grouped_bf16_tn_reference(a, b, c, ks)
    check_groups(d, c, ks, BF16_THRESHOLD, "bf16 graph replay", expected=expected, expected_products=expected)
