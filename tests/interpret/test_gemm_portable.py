"""The portable Triton GEMMs (dg_triton/triton/gemm_portable.py) under the interpreter on CPU
tensors, against the plain-torch references (dg_triton.reference, dg_triton.reference_fp8) with
the calc_diff thresholds of API.md 8 (BF16 1e-5, FP8 1e-3), plus a tighter bound where the math
is the same up to summation order: FP8 against the reference on the dequantized operands.

Shapes have M, N and K tails (M in {1, 7, 129}, N in {64, 200}, K in {128, 320}); the
interpreter's default tiles (32 x 64, GROUP_M 2) leave partial tiles and a partial band of tiles
on them. Outputs are poisoned with NaN before each call (accumulating calls start from c), so an
unwritten element fails. The public calls (dg_triton.bf16_gemm_*, dg_triton.fp8_gemm_*) run on CPU
tensors through the dispatcher, which picks the portable backend because TRITON_INTERPRET=1.
"""
import random

import pytest
import torch
import triton
import triton.language as tl

import dg_triton
from dg_triton import dispatch, reference, reference_fp8
from dg_triton.portable import PortableGemmConfig
from dg_triton.testing import calc_diff
from dg_triton.triton import gemm_portable
from dg_triton.utils.layout import get_mn_major_tma_aligned_tensor

BF16_THRESHOLD = 1e-5
FP8_THRESHOLD = 1e-3
# FP8 against the reference on the dequantized operands: only the summation order and the
# output rounding differ.
FP8_DEQUANTIZED_THRESHOLD = 1e-5

# (m, n, k): every M tail meets an N and a K tail; 129 x 200 x 320 is several tiles each way.
SHAPES = [(1, 64, 128), (7, 200, 320), (129, 200, 320)]
# Where an alias passes an operand MN-major, its rows are M or N long and must be 16-byte
# multiples (the TMA rule validation keeps for every backend), so M tails are multiples of 8 there.
MN_MAJOR_SHAPES = [(8, 64, 128), (136, 200, 320)]


@pytest.fixture(autouse=True)
def _automatic_backend(monkeypatch):
    monkeypatch.delenv("DG_BACKEND", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _generator():
    seed = random.randrange(2 ** 31)
    return torch.Generator().manual_seed(seed), f"seed={seed}"


def _randn(shape, generator, dtype=torch.float32, scale=1.0):
    return (torch.randn(shape, generator=generator) * scale).to(dtype)


def _check(d, expected, threshold, what):
    assert torch.isfinite(d).all(), f"{what}: unwritten (NaN) or non-finite output elements"
    diff = float(calc_diff(d.double(), expected.double()))
    assert diff < threshold, f"{what}: calc_diff {diff:.3g} >= {threshold}"


def _record_descriptors(monkeypatch) -> list:
    """The TMA descriptors the launchers build from now on (None where an operand broke TMA's rules)."""
    built = []

    def record(*args):
        built.append(build(*args))
        return built[-1]

    build = gemm_portable._operand_descriptor
    monkeypatch.setattr(gemm_portable, "_operand_descriptor", record)
    return built


# ---------------------------------------------------------------------------------------------
# BF16


def test_dispatcher_picks_the_portable_backend_for_cpu_tensors_under_the_interpreter():
    assert dispatch.backend("bf16_gemm_nt", torch.device("cpu"), (dispatch.SM90, dispatch.PORTABLE)) == \
        dispatch.PORTABLE


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("out_dtype,with_c", [(torch.bfloat16, False), (torch.float32, True)])
def test_bf16_launcher_matches_reference(m, n, k, out_dtype, with_c):
    generator, what = _generator()
    a = _randn((m, k), generator, torch.bfloat16)
    b = _randn((n, k), generator, torch.bfloat16)
    c = _randn((m, n), generator, out_dtype, 32) if with_c else None
    d = c.clone() if with_c else torch.full((m, n), float("nan"), dtype=out_dtype)
    gemm_portable.bf16_gemm("test", a, b, d, with_c)
    _check(d, reference.bf16_gemm_reference(a, b, c, out_dtype), BF16_THRESHOLD, what)


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("c_mode", ["none", "separate", "in_place"])
def test_bf16_public_aliases_match_reference(layout, c_mode):
    """Every alias (A and B each K- or MN-major) through dg_triton.bf16_gemm_*; c absent, a separate
    tensor, or d itself; fp32 D with c, bf16 D without (rotating over shapes)."""
    generator, what = _generator()
    m, n, k = MN_MAJOR_SHAPES[(len(layout) + len(c_mode)) % 2] if layout != "nt" else SHAPES[2]
    out_dtype = torch.bfloat16 if c_mode == "none" else torch.float32
    a = _randn((k, m) if layout[0] == "t" else (m, k), generator, torch.bfloat16)
    b = _randn((k, n) if layout[1] == "n" else (n, k), generator, torch.bfloat16)
    c = None if c_mode == "none" else _randn((m, n), generator, out_dtype, 32)
    d = c.clone() if c_mode == "in_place" else torch.full((m, n), float("nan"), dtype=out_dtype)
    expected = reference.gemm_reference(a, b, d, c, layout)
    getattr(dg_triton, f"bf16_gemm_{layout}")(a, b, d, d if c_mode == "in_place" else c)
    _check(d, expected, BF16_THRESHOLD, f"{what} {layout} {c_mode} {(m, n, k)}")


def test_bf16_padded_d_rows_and_a_bf16_accumulation():
    """d with a row stride wider than N (allowed for dense GEMMs), accumulated in bf16; the
    padding columns are not written."""
    generator, what = _generator()
    m, n, k = 7, 200, 320
    a = _randn((m, k), generator, torch.bfloat16)
    b = _randn((n, k), generator, torch.bfloat16)
    storage = torch.full((m, n + 24), 1234.0, dtype=torch.bfloat16)
    d = storage[:, :n]
    c = _randn((m, n), generator, torch.bfloat16, 32)
    dg_triton.bf16_gemm_nt(a, b, d, c)
    _check(d, reference.bf16_gemm_reference(a, b, c, torch.bfloat16), BF16_THRESHOLD, what)
    assert (storage[:, n:] == 1234.0).all(), "padding columns of d were written"


def test_bf16_launcher_with_uneven_k_and_several_bands():
    """A forced config whose BLOCK_K does not divide K (the masked K loop) and GROUP_M 2 over 5
    tile rows (a partial band)."""
    generator, what = _generator()
    m, n, k = 129, 64, 96
    a = _randn((m, k), generator, torch.bfloat16)
    b = _randn((n, k), generator, torch.bfloat16)
    d = torch.full((m, n), float("nan"))
    gemm_portable.bf16_gemm("test", a, b, d, False, PortableGemmConfig(32, 32, 64, 2, 4, 1))
    _check(d, reference.bf16_gemm_reference(a, b, None, torch.float32), BF16_THRESHOLD, what)


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
def test_bf16_tma_operand_path_for_every_major_ness(layout, monkeypatch):
    """The TMA-descriptor operand path (USE_TMA, what SM90+ GPUs take) under the interpreter:
    each operand K- or MN-major; M, N and K tails read as zeros from TMA's out-of-bounds fill."""
    descriptors = _record_descriptors(monkeypatch)
    generator, what = _generator()
    m, n, k = 136, 200, 320
    a = _randn((k, m) if layout[0] == "t" else (m, k), generator, torch.bfloat16)
    b = _randn((k, n) if layout[1] == "n" else (n, k), generator, torch.bfloat16)
    d = torch.full((m, n), float("nan"))
    expected = reference.gemm_reference(a, b, d, None, layout)
    a_mk = a.T if layout[0] == "t" else a
    b_nk = b.T if layout[1] == "n" else b
    gemm_portable.bf16_gemm("test", a_mk, b_nk, d, False, PortableGemmConfig(32, 64, 64, 2, 4, 1), use_tma=True)
    assert len(descriptors) == 2 and None not in descriptors, "the TMA path did not run"
    _check(d, expected, BF16_THRESHOLD, f"{what} {layout}")


@pytest.mark.parametrize("split_k,use_tma", [(2, False), (3, True), (32, False)])
def test_bf16_split_k_sums_the_slices_and_accumulates(split_k, use_tma):
    """Split-K: K cut into slices (uneven: 5 K blocks over 2 or 3 slices; more slices asked for
    than K blocks), partials summed by the reduction kernel, which adds c (d holds it)."""
    generator, what = _generator()
    m, n, k = 7, 200, 320
    a = _randn((m, k), generator, torch.bfloat16)
    b = _randn((n, k), generator, torch.bfloat16)
    c = _randn((m, n), generator, torch.float32, 32)
    d = c.clone()
    config = PortableGemmConfig(32, 64, 64, 2, 4, 1, split_k=split_k)
    gemm_portable.bf16_gemm("test", a, b, d, True, config, use_tma=use_tma)
    _check(d, reference.bf16_gemm_reference(a, b, c, torch.float32), BF16_THRESHOLD, f"{what} split {split_k}")


# ---------------------------------------------------------------------------------------------
# FP8


def _fp8_operands(m, n, k, generator, per_token_b):
    a = _randn((m, k), generator, torch.bfloat16)
    b = _randn((n, k), generator, torch.bfloat16)
    a_fp8 = dg_triton.per_token_cast_to_fp8(a, False)
    b_fp8 = dg_triton.per_token_cast_to_fp8(b, False) if per_token_b else dg_triton.per_block_cast_to_fp8(b, False)
    return a, b, a_fp8, b_fp8


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("kind", ["1d2d", "1d1d"])
def test_fp8_public_call_matches_reference(m, n, k, kind):
    """dg_triton.fp8_gemm_nt on CPU tensors: 1D2D (bf16 d, no c) and 1D1D (fp32 d, c is d), SFs
    passed row-major so the public layer's transform runs too."""
    generator, what = _generator()
    a, b, a_fp8, b_fp8 = _fp8_operands(m, n, k, generator, kind == "1d1d")
    if kind == "1d2d":
        c, recipe = None, None
        d = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d)
    else:
        c, recipe = _randn((m, n), generator, torch.float32, 32), (1, 1, 128)
        d = c.clone()
        dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d, c=d, recipe=recipe)
    expected = reference_fp8.fp8_gemm_reference(a_fp8, b_fp8, torch.empty_like(d), c, recipe)
    _check(d, expected, FP8_DEQUANTIZED_THRESHOLD, f"{what} {kind} {(m, n, k)}")
    _check(d, expected, FP8_THRESHOLD, f"{what} {kind} {(m, n, k)}")
    if m * n > 1000:  # API.md 8's reference: the unquantized inputs, so the FP8 error is included
        unquantized = (c if c is not None else 0) + a.float() @ b.float().T
        _check(d, unquantized, FP8_THRESHOLD, f"{what} {kind} {(m, n, k)} vs unquantized")


def test_fp8_1d1d_with_a_separate_c():
    generator, what = _generator()
    m, n, k = 7, 200, 320
    _, _, a_fp8, b_fp8 = _fp8_operands(m, n, k, generator, True)
    c = _randn((m, n), generator, torch.float32, 32)
    d = torch.full((m, n), float("nan"))
    dg_triton.fp8_gemm_nt(a_fp8, b_fp8, d, c=c, recipe=(1, 1, 128))
    expected = reference_fp8.fp8_gemm_reference(a_fp8, b_fp8, d, c, (1, 1, 128))
    _check(d, expected, FP8_DEQUANTIZED_THRESHOLD, what)


@pytest.mark.parametrize("fp8_as_bits", [False, True])
def test_fp8_launcher_with_a_wide_tile_and_the_byte_decoding_path(fp8_as_bits):
    """BLOCK_N 256 spans two per-block SFB columns (the gathered sfb); fp8_as_bits runs the SM80
    path (FP8 codes as bytes, decoded to fp16) under the interpreter. sfb transpose-contiguous
    (MN-major), read through its strides."""
    generator, what = _generator()
    m, n, k = 33, 320, 320
    _, _, (a, sfa), (b, sfb) = _fp8_operands(m, n, k, generator, False)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    sfb_mn_major = sfb.T.contiguous().T
    gemm_portable.fp8_gemm("test", a, get_mn_major_tma_aligned_tensor(sfa), b, sfb_mn_major, d, "1d2d",
                           False, config=PortableGemmConfig(16, 256, 128, 2, 4, 1), fp8_as_bits=fp8_as_bits)
    expected = reference_fp8.fp8_gemm_reference((a, sfa), (b, sfb), d)
    _check(d, expected, FP8_DEQUANTIZED_THRESHOLD, what)


@pytest.mark.parametrize("kind", ["1d2d", "1d1d"])
@pytest.mark.parametrize("block_n,split_k,use_tma", [(64, 1, True), (256, 1, True), (64, 3, False), (128, 2, True)])
def test_fp8_tma_path_and_split_k(kind, block_n, split_k, use_tma, monkeypatch):
    """The TMA operand path and split-K of the FP8 kernel: 1D2D with a tile inside one 128-column
    SFB block (one scale per K block) and one spanning two (a gathered row of scales), 1D1D
    accumulating into d; K = 5 blocks with a 64-element tail, M and N tails."""
    descriptors = _record_descriptors(monkeypatch)
    generator, what = _generator()
    m, n, k = 33, 320, 576
    _, _, (a, sfa), (b, sfb) = _fp8_operands(m, n, k, generator, kind == "1d1d")
    if kind == "1d2d":
        c, recipe, d = None, None, torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        sfb_kernel = sfb
    else:
        c, recipe = _randn((m, n), generator, torch.float32, 32), (1, 1, 128)
        d, sfb_kernel = c.clone(), get_mn_major_tma_aligned_tensor(sfb)
    config = PortableGemmConfig(16, block_n, 128, 2, 4, 1, split_k=split_k)
    gemm_portable.fp8_gemm("test", a, get_mn_major_tma_aligned_tensor(sfa), b, sfb_kernel, d, kind,
                           c is not None, config=config, use_tma=use_tma)
    assert len(descriptors) == (2 if use_tma else 0) and None not in descriptors
    expected = reference_fp8.fp8_gemm_reference((a, sfa), (b, sfb), torch.empty_like(d), c, recipe)
    _check(d, expected, FP8_DEQUANTIZED_THRESHOLD, f"{what} {kind} {config}")


def test_operands_that_break_tma_rules_take_the_pointer_path(monkeypatch):
    """use_tma asked for, but B's row stride is not a 16-byte multiple (N = 100 MN-major rows of
    bf16): no descriptor is built for it, both operands go through pointers, the result is right."""
    descriptors = _record_descriptors(monkeypatch)
    generator, what = _generator()
    m, n, k = 64, 100, 192
    a = _randn((m, k), generator, torch.bfloat16)
    b = _randn((k, n), generator, torch.bfloat16).T     # [N, K] with strides (1, 100)
    d = torch.full((m, n), float("nan"))
    gemm_portable.bf16_gemm("test", a, b, d, False, PortableGemmConfig(32, 64, 64, 2, 4, 1), use_tma=True)
    assert descriptors[0] is not None and descriptors[1] is None
    _check(d, reference.bf16_gemm_reference(a, b, None, torch.float32), BF16_THRESHOLD, what)


def test_fp8_skip_head_mid_ignores_split_k():
    """Split-K has no column remap in its reduction, so a split config runs unsplit with head_splits."""
    generator, what = _generator()
    left, mid, right = 32, 16, 32
    m, n, k = 7, 128, 512
    _, _, (a, sfa), (b, sfb) = _fp8_operands(m, n, k, generator, False)
    heads = n // (left + right)
    d = torch.full((m, heads * (left + mid + right)), float("nan"), dtype=torch.bfloat16)
    d.view(m, heads, -1)[:, :, left:left + mid] = 4096.0
    expected = reference_fp8.fp8_gemm_nt_skip_head_mid_reference((a, sfa), (b, sfb), d, (left, mid, right))
    gemm_portable.fp8_gemm("test", a, get_mn_major_tma_aligned_tensor(sfa), b, sfb, d, "1d2d", False,
                           head_splits=(left, mid, right),
                           config=PortableGemmConfig(16, 32, 128, 2, 4, 1, split_k=4))
    assert (d.view(m, heads, -1)[:, :, left:left + mid] == 4096.0).all(), "mid columns were written"
    _check(d, expected, FP8_DEQUANTIZED_THRESHOLD, what)


def test_fp8_skip_head_mid_leaves_the_mid_columns():
    generator, what = _generator()
    left, mid, right = 32, 16, 32
    m, n, k = 7, 128, 256
    _, _, a_fp8, b_fp8 = _fp8_operands(m, n, k, generator, False)
    heads = n // (left + right)
    d = torch.full((m, heads * (left + mid + right)), float("nan"), dtype=torch.bfloat16)
    sentinel = 4096.0
    d.view(m, heads, -1)[:, :, left:left + mid] = sentinel
    expected = reference_fp8.fp8_gemm_nt_skip_head_mid_reference(a_fp8, b_fp8, d, (left, mid, right))
    dg_triton.fp8_gemm_nt_skip_head_mid(a_fp8, b_fp8, d, (left, mid, right))
    assert (d.view(m, heads, -1)[:, :, left:left + mid] == sentinel).all(), "mid columns were written"
    _check(d, expected, FP8_DEQUANTIZED_THRESHOLD, what)


@triton.jit
def _decode_kernel(bits_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    values = gemm_portable._e4m3_bits_to_float16(tl.load(bits_ptr + offsets))
    tl.store(out_ptr + offsets, values.to(tl.float32))


def test_e4m3_byte_decoding_is_exact_for_every_code():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    out = torch.empty(256)
    _decode_kernel[(1,)](codes, out, BLOCK=256)
    expected = codes.view(torch.float8_e4m3fn).float()
    nan = expected.isnan()
    assert torch.equal(out.isnan(), nan)
    assert torch.equal(out[~nan].view(torch.int32), expected[~nan].view(torch.int32))
