"""The FP8 and BF16 GEMV (dg_triton/triton/gemv.py) under the interpreter on CPU tensors, against the
plain torch references: dg_triton.reference_fp8 on the dequantized operands (only the summation
order and the output rounding differ: 1e-5) and dg_triton.reference for BF16 (1e-5). (API.md 8's
check against the unquantized inputs, 1e-3, is the GPU test's, on its shapes: on these small ones
with per-group magnitudes the FP8 error alone reached 9.2e-4 in 300 draws.)

M from 1 to MAX_ROWS (padded row counts 1, 4, 8), N tails inside a 16-row slab and across 128-row
scale blocks, K tails (a partial last K block, a partial last group of K blocks), split-K with
uneven slices, both recipes, 1D1D accumulating into d. Outputs poisoned with NaN first.
"""
import random

import pytest
import torch

import dg_triton
from dg_triton import reference, reference_fp8
from dg_triton.testing import calc_diff
from dg_triton.triton import gemv
from dg_triton.triton.gemv import GemvConfig
from dg_triton.kernels import split_scratch
from dg_triton.utils.layout import get_mn_major_tma_aligned_tensor

DEQUANTIZED_THRESHOLD = 1e-5


def _generator():
    seed = random.randrange(2 ** 31)
    return torch.Generator().manual_seed(seed), f"seed={seed}"


def _operands(m, n, k, kind, generator):
    # Magnitudes vary by 2^-3..2^3 per 128-wide K group, so a scale applied to the wrong group shows.
    def spread(rows):
        values = torch.randn(rows, k, generator=generator)
        exponents = torch.randint(-3, 4, (rows, -(-k // 128)), generator=generator).float()
        return (values * torch.exp2(exponents).repeat_interleave(128, 1)[:, :k]).to(torch.bfloat16)

    a, b = spread(m), spread(n)
    a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False)
    if kind == "1d2d":
        b_q, sfb = dg_triton.per_block_cast_to_fp8(b, False)
        sfb_kernel = sfb
    else:
        b_q, sfb = dg_triton.per_token_cast_to_fp8(b, False)
        sfb_kernel = get_mn_major_tma_aligned_tensor(sfb)
    return a, b, (a_q, sfa), (b_q, sfb), get_mn_major_tma_aligned_tensor(sfa), sfb_kernel


def _check(d, expected, threshold, what):
    assert torch.isfinite(d).all(), f"{what}: unwritten (NaN) or non-finite output elements"
    diff = float(calc_diff(d.double(), expected.double()))
    assert diff < threshold, f"{what}: calc_diff {diff:.3g} >= {threshold}"


# (m, n, k, config): the default config, then forced ones (split-K with uneven slices, a K group
# larger than the slice, a narrow slab).
CASES = [
    (1, 300, 1040, None),
    (3, 40, 200, None),
    (8, 130, 640, None),
    (1, 300, 1040, GemvConfig(16, 2, 3, 4)),     # 9 K blocks in slices of 3, groups of 2
    (5, 257, 1040, GemvConfig(32, 4, 2, 4)),     # slices of 5 K blocks: a partial group each
    (2, 1, 128, GemvConfig(16, 1, 1, 4)),
    (8, 129, 384, GemvConfig(8, 1, 3, 2)),
]


@pytest.mark.parametrize("kind", ["1d2d", "1d1d"])
@pytest.mark.parametrize("m,n,k,config", CASES)
def test_fp8_gemv_matches_reference(m, n, k, config, kind):
    generator, what = _generator()
    what = f"{what} {kind} {(m, n, k)} {config}"
    _, _, a_pair, b_pair, sfa, sfb = _operands(m, n, k, kind, generator)
    if kind == "1d2d":
        c, recipe = None, None
        d = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    else:
        c, recipe = torch.randn(m, n, generator=generator) * 32, (1, 1, 128)
        d = c.clone()
    gemv.fp8_gemv("test", a_pair[0], sfa, b_pair[0], sfb, d, kind, c is not None, config=config,
                  num_sms=4)
    expected = reference_fp8.fp8_gemm_reference(a_pair, b_pair, torch.empty_like(d), c, recipe)
    _check(d, expected, DEQUANTIZED_THRESHOLD, what)


def test_fp8_gemv_rejects_too_many_rows_and_non_k_major_operands():
    generator, _ = _generator()
    m, n, k = gemv.MAX_ROWS + 1, 64, 256
    _, _, (a, _), (b, _), sfa, sfb = _operands(m, n, k, "1d2d", generator)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=f"1 to {gemv.MAX_ROWS} rows"):
        gemv.fp8_gemv("test", a, sfa, b, sfb, d, "1d2d", False)
    with pytest.raises(ValueError, match="K-major"):
        gemv.fp8_gemv("test", a[:2], sfa[:2], b.T.contiguous().T, sfb, d[:2], "1d2d", False)


BF16_CASES = [(1, 300, 1040, torch.bfloat16, False, None), (3, 40, 200, torch.float32, True, None),
              (8, 130, 640, torch.bfloat16, True, None), (2, 257, 1040, torch.float32, False, GemvConfig(32, 4, 2, 4)),
              (1, 129, 384, torch.bfloat16, True, GemvConfig(8, 1, 3, 2))]


@pytest.mark.parametrize("m,n,k,out_dtype,with_c,config", BF16_CASES)
def test_bf16_gemv_matches_reference(m, n, k, out_dtype, with_c, config):
    generator, what = _generator()
    what = f"{what} {(m, n, k)} {out_dtype} c={with_c} {config}"
    a = torch.randn(m, k, generator=generator).to(torch.bfloat16)
    b = torch.randn(n, k, generator=generator).to(torch.bfloat16)
    c = (torch.randn(m, n, generator=generator) * 32).to(out_dtype) if with_c else None
    d = c.clone() if with_c else torch.full((m, n), float("nan"), dtype=out_dtype)
    gemv.bf16_gemv("test", a, b, d, with_c, config=config, num_sms=4)
    _check(d, reference.bf16_gemm_reference(a, b, c, out_dtype), 1e-5, what)


def test_choose_config_splits_k_until_the_sms_have_enough_programs():
    # 2112 rows of B in 16-row slabs: 132 programs; 4 per SM asks for a split of 4 on 132 SMs.
    assert gemv.choose_config(2, 2112, 7168, 132) == GemvConfig(16, 4, 4, 4)
    # At M = 1, 8 warps a program; FP8 in 8-row slabs (264 programs: a split of 2).
    assert gemv.choose_config(1, 2112, 7168, 132, scaled=False) == GemvConfig(16, 4, 4, 8)
    assert gemv.choose_config(1, 2112, 7168, 132) == GemvConfig(8, 4, 2, 8)
    # Wide N fills the SMs without a split; a short K caps the split at its K groups.
    assert gemv.choose_config(1, 32768, 512, 132).split_k == 1
    assert gemv.choose_config(1, 576, 256, 132, scaled=False) == GemvConfig(16, 2, 1, 8)
    # Above 2 rows, 256 of K per iteration (the rows' products in registers).
    assert gemv.choose_config(4, 2112, 7168, 132).groups == 2
    for n, k in ((576, 7168), (4096, 7168), (7168, 16384), (24576, 1536)):
        config = gemv.choose_config(1, n, k, 132)
        programs = -(-n // config.block_n) * config.split_k
        assert programs >= 4 * 132 or config.split_k * config.groups * 128 >= k, (n, k, config)


class _TensorCoreKernelCalled(Exception):
    pass


def _route_to_sm90(monkeypatch, threshold: str, value: int, kernel_module):
    """The public call as on an SM90 GPU: the dispatcher answers SM90, the GEMV threshold is
    `value`, and the tensor-core kernel (no GPU here) raises _TensorCoreKernelCalled."""
    from dg_triton import dispatch
    from dg_triton.heuristics import sm90 as heuristics

    def tensor_core_kernel(*args, **kwargs):
        raise _TensorCoreKernelCalled

    monkeypatch.setattr(heuristics, threshold, value)
    monkeypatch.setattr(heuristics, "FP8_GEMV_MIN_K", 256)
    monkeypatch.setattr(heuristics, "BF16_GEMV_MIN_K", 256)
    monkeypatch.setattr(dispatch, "backend_of", lambda *args: dispatch.SM90)
    monkeypatch.setattr(kernel_module, "run", tensor_core_kernel)


def test_public_fp8_gemm_takes_the_gemv_up_to_its_threshold(monkeypatch):
    """The SM90 route of dg_triton.fp8_gemm_nt with heuristics.sm90.FP8_GEMV_MAX_M at 4 and
    FP8_GEMV_MIN_K at 256: M at the threshold goes to the GEMV, M above it or K below the minimum to the
    tensor-core kernel (stubbed: no GPU here)."""
    from dg_triton.kernels import sm90_fp8_gemm

    _route_to_sm90(monkeypatch, "FP8_GEMV_MAX_M", 4, sm90_fp8_gemm)
    generator, what = _generator()
    _, _, a_pair, b_pair, _, _ = _operands(5, 200, 384, "1d2d", generator)
    d = torch.full((4, 200), float("nan"), dtype=torch.bfloat16)
    dg_triton.fp8_gemm_nt((a_pair[0][:4], a_pair[1][:4]), b_pair, d)
    expected = reference_fp8.fp8_gemm_reference((a_pair[0][:4], a_pair[1][:4]), b_pair, d)
    _check(d, expected, DEQUANTIZED_THRESHOLD, what)
    with pytest.raises(_TensorCoreKernelCalled):
        dg_triton.fp8_gemm_nt(a_pair, b_pair, torch.empty(5, 200, dtype=torch.bfloat16))
    _, _, a_short, b_short, _, _ = _operands(1, 200, 128, "1d2d", generator)
    with pytest.raises(_TensorCoreKernelCalled):
        dg_triton.fp8_gemm_nt(a_short, b_short, torch.empty(1, 200, dtype=torch.bfloat16))


def test_public_bf16_gemm_takes_the_gemv_up_to_its_threshold(monkeypatch):
    """As above for dg_triton.bf16_gemm_nt with heuristics.sm90.BF16_GEMV_MAX_M raised, c given."""
    from dg_triton.kernels import sm90_bf16_gemm

    _route_to_sm90(monkeypatch, "BF16_GEMV_MAX_M", 2, sm90_bf16_gemm)
    generator, what = _generator()
    a = torch.randn(3, 320, generator=generator).to(torch.bfloat16)
    b = torch.randn(72, 320, generator=generator).to(torch.bfloat16)
    c = torch.randn(2, 72, generator=generator)
    d = torch.full((2, 72), float("nan"))
    dg_triton.bf16_gemm_nt(a[:2], b, d, c=c)
    _check(d, reference.bf16_gemm_reference(a[:2], b, c, torch.float32), 1e-5, what)
    with pytest.raises(_TensorCoreKernelCalled):
        dg_triton.bf16_gemm_nt(a, b, torch.empty(3, 72, dtype=torch.bfloat16))


def test_the_dispatch_thresholds_stay_within_the_rows_the_kernel_takes():
    from dg_triton.heuristics import sm90 as heuristics

    assert 0 <= heuristics.FP8_GEMV_MAX_M <= gemv.MAX_ROWS
    assert 0 <= heuristics.BF16_GEMV_MAX_M <= gemv.MAX_ROWS


def test_split_k_leaves_its_counters_zeroed_and_repeats_bitwise():
    """The slab's last K slice sums the partials and zeroes its counter again: a second launch on
    the same counters gives the same bits."""
    generator, what = _generator()
    config = GemvConfig(16, 2, 3, 4)                      # 9 K blocks in 3 slices
    _, _, a_pair, b_pair, sfa, sfb = _operands(2, 300, 1040, "1d2d", generator)
    outputs = []
    for _ in range(2):
        d = torch.full((2, 300), float("nan"), dtype=torch.bfloat16)
        gemv.fp8_gemv("test", a_pair[0], sfa, b_pair[0], sfb, d, "1d2d", False, config=config)
        outputs.append(d)
    assert (split_scratch._stream_scratch[None, None].counters == 0).all(), what
    assert torch.equal(outputs[0].view(torch.int16), outputs[1].view(torch.int16)), what
    _check(outputs[0], reference_fp8.fp8_gemm_reference(a_pair, b_pair, outputs[0]), DEQUANTIZED_THRESHOLD, what)


def test_gemv_takes_any_stride_along_a_dimension_of_one():
    """K = 1 (a and b) and N = 1 (d): validation calls such operands K-major / N-major whatever
    their stride(1); the GEMV must take them too."""
    generator, what = _generator()
    a = torch.randn(1, 2, generator=generator).to(torch.bfloat16)[:, ::2]    # [1, 1], stride (2, 2)
    b = torch.randn(5, 2, generator=generator).to(torch.bfloat16)[:, ::2]    # [5, 1], stride (2, 2)
    d = torch.full((1, 5), float("nan"))
    gemv.bf16_gemv("test", a, b, d, False)
    _check(d, reference.bf16_gemm_reference(a, b, None, torch.float32), 1e-5, what + " K = 1")
    a = torch.randn(3, 200, generator=generator).to(torch.bfloat16)
    b = torch.randn(1, 200, generator=generator).to(torch.bfloat16)
    d = torch.full((3, 2), float("nan"))[:, ::2]                              # [3, 1], stride (2, 2)
    gemv.bf16_gemv("test", a, b, d, False)
    _check(d, reference.bf16_gemm_reference(a, b, None, torch.float32), 1e-5, what + " N = 1")
