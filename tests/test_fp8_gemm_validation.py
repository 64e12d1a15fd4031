"""Argument checks and routing of the dense FP8 GEMMs and fp8_gemm_nt_skip_head_mid (API.md 1.1-1.5,
2.2-2.4, 3.1, 3.3, 4), on CPU tensors.

This host has no GPU, so the FP8 checks take DeepGEMM's SM90 path (any arch but SM100). Every
rejection is a DGArgumentError whose message starts "{fn}: {argument} must be". A call that passes
the checks on CPU tensors reaches dispatch, which has no CPU kernel and raises NotImplementedError;
with dispatch patched to answer SM90, the call reaches sm90_fp8_gemm.run, whose arguments are
checked against the layouts its docstring documents. Empty problems never reach a kernel.
"""
import inspect

import pytest
import torch

from dg_triton import dispatch, fp8_gemm, settings
from dg_triton.errors import DGArgumentError
from dg_triton.kernels import sm90_fp8_gemm
from dg_triton.reference_fp8 import (
    dequantize_operand,
    fp8_gemm_nt_skip_head_mid_reference,
    fp8_gemm_reference,
)
from dg_triton.utils.math import align, ceil_div

ALIASES = ("nt", "nn", "tn", "tt")
# Distinct, so a swapped dim cannot pass by accident; M not a multiple of 4 (TMA-aligned SF
# padding), N spans two 128-blocks, K ends in a partial 128-group. K-major rows of K bytes and
# D rows of N * 2 bytes are 16-byte multiples.
M, N, K = 36, 144, 320
FP8 = torch.float8_e4m3fn
KINDS = ("1d2d", "1d1d")
RECIPES = {"1d2d": (1, 128, 128), "1d1d": (1, 1, 128)}
PAIRS = {"1d2d": ((1, 128), (128, 128)), "1d1d": ((1, 128), (1, 128))}
D_DTYPES = {"1d2d": torch.bfloat16, "1d1d": torch.float32}
DEFAULT_COMPILED_DIMS = {"nt": "nk", "nn": "nk", "tn": "mn", "tt": "mn"}
SFA, SFB = "a[1] (sfa)", "b[1] (sfb)"


def gemm(alias):
    return getattr(fp8_gemm, f"fp8_fp4_gemm_{alias}")


def fp8(rows, cols, row_stride=None, misaligned=False):
    """A [rows, cols] FP8 tensor with stride (row_stride, 1); ``misaligned`` shifts its data pointer
    by one byte, off the 16-byte alignment TMA needs."""
    if row_stride is None and not misaligned:
        return torch.randn(rows, cols).to(FP8)
    row_stride = cols if row_stride is None else row_stride
    offset = 1 if misaligned else 0
    storage = torch.randn(offset + max(rows - 1, 0) * row_stride + cols).to(FP8)
    return storage.as_strided((rows, cols), (row_stride, 1), offset)


def scales(rows, cols):
    return torch.rand(rows, cols) + 0.5


def sfb_shape(kind, n, k):
    return (ceil_div(n, 128), ceil_div(k, 128)) if kind == "1d2d" else (n, ceil_div(k, 128))


class Problem:
    """A valid problem: logical K-major operands and the physical pairs the alias takes (API.md 1.1:
    a transposed operand is passed as a transposed view, data and SF alike, so that the NT view
    the alias makes of it is K-major, as SM90 needs)."""

    def __init__(self, alias="nt", kind="1d2d", m=M, n=N, k=K, d_dtype=None, c_mode=None):
        self.alias, self.kind = alias, kind
        self.a_logical, self.b_logical = fp8(m, k), fp8(n, k)
        self.sfa_logical = scales(m, ceil_div(k, 128))
        self.sfb_logical = scales(*sfb_shape(kind, n, k))
        self.a = self.physical("a", self.a_logical, self.sfa_logical)
        self.b = self.physical("b", self.b_logical, self.sfb_logical)
        self.d = torch.randn(m, n).to(d_dtype or D_DTYPES[kind])
        c_mode = c_mode or ("distinct" if kind == "1d1d" else "none")
        if c_mode == "distinct":
            self.c = (torch.randn(m, n) * 32).to(self.d.dtype)
        else:
            self.c = self.d if c_mode == "in_place" else None

    def physical(self, operand, data, sf):
        transposed = self.alias[0] == "t" if operand == "a" else self.alias[1] == "n"
        return (data.T, sf.T) if transposed else (data, sf)

    def call(self, **kwargs):
        args = {"a": self.a, "b": self.b, "d": self.d, "c": self.c, "recipe": RECIPES[self.kind]}
        args.update(kwargs)
        return gemm(self.alias)(**args)


def assert_rejected(fn_name, argument, call, *fragments):
    """The call raises DGArgumentError "{fn_name}: {argument} must be ..." containing ``fragments``."""
    with pytest.raises(DGArgumentError) as excinfo:
        call()
    message = str(excinfo.value)
    assert message.startswith(f"{fn_name}: {argument} must be "), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"
    return message


def assert_reaches_dispatch(fn_name, call):
    """Validation passes; the CPU has no kernel, so dispatch raises NotImplementedError."""
    with pytest.raises(NotImplementedError) as excinfo:
        call()
    assert not isinstance(excinfo.value, DGArgumentError), str(excinfo.value)
    message = str(excinfo.value)
    assert fn_name in message and "kernel" in message.lower(), message


@pytest.fixture
def no_kernel(monkeypatch):
    """Any dispatch or kernel launch fails the test."""
    def forbidden(*args, **kwargs):
        raise AssertionError("an empty problem reached dispatch or the kernel")
    monkeypatch.setattr(dispatch, "backend", forbidden)
    monkeypatch.setattr(sm90_fp8_gemm, "run", forbidden)


@pytest.fixture
def captured(monkeypatch):
    """dispatch answers SM90 for any device; run records its arguments (and d as it was then)."""
    calls = []

    def backend(function, device, available):
        assert available == (dispatch.SM90,)
        return dispatch.SM90

    def run(function, a, sfa, b, sfb, d, problem, accumulate, compiled_dims):
        calls.append({"function": function, "a": a, "sfa": sfa, "b": b, "sfb": sfb, "d": d, "d_at_launch": d.clone(),
                          "problem": problem, "accumulate": accumulate, "compiled_dims": compiled_dims})

    monkeypatch.setattr(dispatch, "backend", backend)
    monkeypatch.setattr(sm90_fp8_gemm, "run", run)
    return calls


# --- public names and signatures (API.md 3, 3.1, 3.3) -----------------------------------------------

@pytest.mark.parametrize("alias", ALIASES)
def test_fp8_gemm_aliases_are_the_fp8_fp4_callables_with_deepgemm_signatures(alias):
    fn = getattr(fp8_gemm, f"fp8_gemm_{alias}")
    assert fn is gemm(alias)
    parameters = inspect.signature(fn).parameters
    assert list(parameters) == ["a", "b", "d", "c", "recipe", "recipe_a", "recipe_b", "compiled_dims",
                                "disable_ue8m0_cast"]
    defaults = {name: p.default for name, p in parameters.items() if p.default is not inspect.Parameter.empty}
    assert defaults == {"c": None, "recipe": None, "recipe_a": None, "recipe_b": None,
                            "compiled_dims": DEFAULT_COMPILED_DIMS[alias], "disable_ue8m0_cast": False}


def test_skip_head_mid_signature_matches_deepgemm():
    parameters = inspect.signature(fp8_gemm.fp8_gemm_nt_skip_head_mid).parameters
    assert list(parameters) == ["a", "b", "d", "head_splits", "recipe", "compiled_dims", "disable_ue8m0_cast"]
    assert [parameters[name].default for name in ("recipe", "compiled_dims", "disable_ue8m0_cast")] == \
        [None, "nk", False]


def test_module_all_lists_every_public_function():
    for name in fp8_gemm.__all__:
        assert callable(getattr(fp8_gemm, name))
    assert len(fp8_gemm.__all__) == 9


# --- accepted calls ----------------------------------------------------------------------------------

@pytest.mark.parametrize("alias", ALIASES)
# The SM90 default recipe is (1, 128, 128): 1D1D needs an explicit recipe.
@pytest.mark.parametrize("kind,recipe_form", [("1d2d", "recipe"), ("1d2d", "pair"), ("1d2d", "default"),
                                              ("1d1d", "recipe"), ("1d1d", "pair")])
def test_fp8_gemm_valid_call_passes_validation_and_has_no_cpu_kernel(alias, kind, recipe_form):
    problem = Problem(alias, kind)
    kwargs = {"recipe": {"recipe": RECIPES[kind]}, "default": {"recipe": None},
              "pair": {"recipe": None, "recipe_a": PAIRS[kind][0], "recipe_b": PAIRS[kind][1]}}[recipe_form]
    assert_reaches_dispatch(f"fp8_fp4_gemm_{alias}", lambda: problem.call(**kwargs))


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("c_mode", ["in_place", "distinct"])
def test_fp8_gemm_1d1d_accepts_c_in_place_or_distinct(alias, c_mode):
    problem = Problem(alias, "1d1d", c_mode=c_mode)
    assert_reaches_dispatch(f"fp8_fp4_gemm_{alias}", problem.call)


@pytest.mark.parametrize("compiled_dims", ["", "mnk", "nk", "mn"])
@pytest.mark.parametrize("disable_ue8m0_cast", [False, True])
def test_fp8_gemm_accepts_any_compiled_dims_and_either_ue8m0_flag_on_sm90(compiled_dims, disable_ue8m0_cast):
    problem = Problem()
    assert_reaches_dispatch("fp8_fp4_gemm_nt", lambda: problem.call(
        compiled_dims=compiled_dims, disable_ue8m0_cast=disable_ue8m0_cast))


def test_fp8_gemm_accepts_recipes_as_lists():
    problem = Problem()
    assert_reaches_dispatch("fp8_fp4_gemm_nt", lambda: problem.call(recipe=[1, 128, 128]))


def test_fp8_gemm_accepts_padded_row_strides_that_are_16_byte_multiples():
    problem = Problem()
    a = fp8(M, K, row_stride=K + 16)
    d = torch.randn(M, N + 8).to(torch.bfloat16)[:, :N]
    assert_reaches_dispatch("fp8_fp4_gemm_nt", lambda: problem.call(a=(a, problem.sfa_logical), d=d))


def test_fp8_gemm_on_an_sm90_host_takes_the_same_path(monkeypatch):
    monkeypatch.setattr(settings, "current_arch_major", lambda device_index=None: 9)
    problem = Problem()
    assert_reaches_dispatch("fp8_fp4_gemm_nt", problem.call)
    int8 = torch.zeros(M, K // 2, dtype=torch.int8)
    assert_rejected("fp8_fp4_gemm_nt", "a[0]", lambda: problem.call(a=(int8, problem.sfa_logical)))


@pytest.mark.parametrize("call", ["gemm", "skip_head_mid"])
def test_fp8_gemm_on_an_sm100_host_says_the_sm100_path_is_not_built(monkeypatch, call):
    monkeypatch.setattr(settings, "current_arch_major", lambda device_index=None: 10)
    problem = Problem()
    name = "fp8_fp4_gemm_nt" if call == "gemm" else "fp8_gemm_nt_skip_head_mid"
    with pytest.raises(NotImplementedError, match=name) as excinfo:
        if call == "gemm":
            problem.call()
        else:
            fp8_gemm.fp8_gemm_nt_skip_head_mid(problem.a, problem.b, problem.d, (16, 0, 16))
    assert "SM100" in str(excinfo.value) and not isinstance(excinfo.value, DGArgumentError)


# --- routing to sm90_fp8_gemm.run in the documented layouts -----------------------------------------

def assert_sfa_tma_aligned(sfa, values):
    m, sk = values.shape
    assert sfa.dtype == torch.float32 and tuple(sfa.shape) == (m, sk)
    assert sfa.stride() == (1, align(m, 4))
    assert torch.equal(sfa, values)


def assert_launch_layouts(call, problem, kind, m=M, n=N, k=K):
    """run got the logical K-major operands (views of the caller's tensors, no copy), the SFs in
    the layouts sm90_fp8_gemm.run documents, and the caller's d."""
    a, b = call["a"], call["b"]
    assert a.dtype == FP8 and tuple(a.shape) == (m, k) and a.stride(1) == 1
    assert a.data_ptr() == problem.a_logical.data_ptr() and a.stride() == problem.a_logical.stride()
    assert b.dtype == FP8 and tuple(b.shape) == (n, k) and b.stride(1) == 1
    assert b.data_ptr() == problem.b_logical.data_ptr() and b.stride() == problem.b_logical.stride()
    assert call["d"] is problem.d
    assert_sfa_tma_aligned(call["sfa"], problem.sfa_logical)
    sfb = call["sfb"]
    assert sfb.dtype == torch.float32 and torch.equal(sfb, problem.sfb_logical)
    if kind == "1d2d":
        assert tuple(sfb.shape) == (ceil_div(n, 128), ceil_div(k, 128)) and sfb.is_contiguous()
    else:
        assert_sfa_tma_aligned(sfb, problem.sfb_logical)
    p = call["problem"]
    assert isinstance(p, sm90_fp8_gemm.Fp8GemmProblem)
    assert (p.m, p.n, p.k, p.kind, p.device_index) == (m, n, k, kind, -1)
    assert p.layout == (problem.d.dtype, a.stride(), b.stride(), problem.d.stride(), call["sfa"].stride(),
                        sfb.stride())
    hash(p)  # a plan-cache key


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("recipe_form", ["recipe", "pair", "default"])
def test_fp8_gemm_1d2d_reaches_the_kernel_in_the_documented_layouts(captured, alias, recipe_form):
    problem = Problem(alias, "1d2d")
    kwargs = {"recipe": {}, "default": {"recipe": None},
              "pair": {"recipe": None, "recipe_a": (1, 128), "recipe_b": (128, 128)}}[recipe_form]
    assert problem.call(**kwargs) is None
    [call] = captured
    assert call["function"] == f"fp8_fp4_gemm_{alias}"
    assert_launch_layouts(call, problem, "1d2d")
    assert call["problem"].head_splits is None
    assert call["accumulate"] is False
    assert call["compiled_dims"] == DEFAULT_COMPILED_DIMS[alias]


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("c_mode", ["in_place", "distinct"])
def test_fp8_gemm_1d1d_reaches_the_kernel_with_c_already_in_d(captured, alias, c_mode):
    problem = Problem(alias, "1d1d", c_mode=c_mode)
    d_before = problem.d.clone()
    problem.call(compiled_dims="mnk")
    [call] = captured
    assert_launch_layouts(call, problem, "1d1d")
    assert call["accumulate"] is True and call["compiled_dims"] == "mnk"
    # API.md 1.3: a distinct c is copied into d before the kernel accumulates into d.
    expected = problem.c if c_mode == "distinct" else d_before
    assert torch.equal(call["d_at_launch"], expected)


@pytest.mark.parametrize("alias", ["nt", "nn"])
@pytest.mark.parametrize("sfb_form", ["row_major", "mn_major"])
def test_fp8_gemm_1d2d_user_sfb_in_either_form_reaches_the_kernel_row_major(captured, alias, sfb_form):
    problem = Problem(alias, "1d2d")
    logical = problem.sfb_logical  # [ceil(N/128), ceil(K/128)]
    given = logical if sfb_form == "row_major" else logical.T.contiguous().T  # same values, strides (1, rows)
    assert given.is_contiguous() == (sfb_form == "row_major")
    problem.b = problem.physical("b", problem.b_logical, given)
    problem.call()
    [call] = captured
    assert call["sfb"].is_contiguous() and torch.equal(call["sfb"], logical)
    if sfb_form == "row_major":
        assert call["sfb"].data_ptr() == logical.data_ptr()  # no copy needed


@pytest.mark.parametrize("kind", KINDS)
def test_fp8_gemm_already_tma_aligned_sfa_reaches_the_kernel_without_a_copy(captured, kind):
    problem = Problem("nt", kind)
    aligned = torch.zeros(ceil_div(K, 128), align(M, 4)).T[:M]  # strides (1, align(M, 4))
    aligned.copy_(problem.sfa_logical)
    problem.a = (problem.a_logical, aligned)
    problem.call()
    [call] = captured
    assert call["sfa"].data_ptr() == aligned.data_ptr()
    assert_sfa_tma_aligned(call["sfa"], problem.sfa_logical)


def test_fp8_gemm_with_a_misaligned_tma_aligned_sfa_is_rejected(captured):
    problem = Problem()
    storage = torch.zeros(1 + ceil_div(K, 128) * align(M, 4))
    misaligned = storage[1:].view(ceil_div(K, 128), align(M, 4)).T[:M]
    misaligned.copy_(problem.sfa_logical)
    assert misaligned.stride() == (1, align(M, 4)) and misaligned.data_ptr() % 16
    assert_rejected("fp8_fp4_gemm_nt", SFA, lambda: problem.call(a=(problem.a_logical, misaligned)), "16-byte")
    assert not captured


def test_skip_head_mid_reaches_the_kernel_with_its_head_splits(captured):
    left, mid, right = 16, 8, 32
    n = 3 * (left + right)
    problem = Problem("nt", "1d2d", n=n)
    d = torch.randn(M, n + 3 * mid).to(torch.bfloat16)
    fp8_gemm.fp8_gemm_nt_skip_head_mid(problem.a, problem.b, d, (left, mid, right))
    [call] = captured
    p = call["problem"]
    assert call["function"] == "fp8_gemm_nt_skip_head_mid" and call["d"] is d
    assert (p.m, p.n, p.k, p.kind, p.head_splits) == (M, n, K, "1d2d", (left, mid, right))
    assert call["accumulate"] is False and call["compiled_dims"] == "nk"
    assert_sfa_tma_aligned(call["sfa"], problem.sfa_logical)
    assert call["sfb"].is_contiguous() and torch.equal(call["sfb"], problem.sfb_logical)
    assert p.layout[3] == d.stride()


def fake_kernel(function, a, sfa, b, sfb, d, problem, accumulate, compiled_dims):
    """What sm90_fp8_gemm.run promises, in plain torch, reading the operands only through the
    layouts its docstring documents."""
    assert sfa.stride() == (1, align(problem.m, 4))
    if problem.kind == "1d2d":
        assert sfb.is_contiguous()
        gran_b = (128, 128)
    else:
        assert sfb.stride() == (1, align(problem.n, 4))
        gran_b = (1, 128)
    a_values = dequantize_operand(a, sfa, problem.m, 1, 128)
    b_values = dequantize_operand(b, sfb, problem.n, *gran_b)
    product = a_values @ b_values.T
    if accumulate:
        product = d.float() + product
    if problem.head_splits is None:
        d.copy_(product.to(d.dtype))
        return
    left, mid, right = problem.head_splits
    columns = torch.arange(problem.n)
    d[:, columns + (columns + right) // (left + right) * mid] = product.to(d.dtype)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("kind", KINDS)
def test_fp8_gemm_through_a_kernel_that_honours_the_layouts_equals_the_reference(monkeypatch, alias, kind):
    monkeypatch.setattr(dispatch, "backend", lambda *args: dispatch.SM90)
    monkeypatch.setattr(sm90_fp8_gemm, "run", fake_kernel)
    problem = Problem(alias, kind)
    expected = fp8_gemm_reference(problem.a, problem.b, problem.d, problem.c, recipe=RECIPES[kind], layout=alias)
    problem.call()
    torch.testing.assert_close(problem.d, expected, rtol=1e-5, atol=1e-5)


def test_skip_head_mid_through_a_kernel_that_honours_the_layouts_equals_the_reference(monkeypatch):
    monkeypatch.setattr(dispatch, "backend", lambda *args: dispatch.SM90)
    monkeypatch.setattr(sm90_fp8_gemm, "run", fake_kernel)
    left, mid, right = 16, 8, 32
    n = 3 * (left + right)
    problem = Problem("nt", "1d2d", n=n)
    d = torch.randn(M, n + 3 * mid).to(torch.bfloat16)
    expected = fp8_gemm_nt_skip_head_mid_reference(problem.a, problem.b, d, (left, mid, right))
    fp8_gemm.fp8_gemm_nt_skip_head_mid(problem.a, problem.b, d, (left, mid, right))
    torch.testing.assert_close(d, expected, rtol=1e-5, atol=1e-5)


# --- rejections: operands, d and c ------------------------------------------------------------------

@pytest.mark.parametrize("operand", ["a", "b"])
@pytest.mark.parametrize("bad", ["tensor", "triple", "none"])
def test_fp8_gemm_rejects_operand_that_is_not_a_data_sf_pair(operand, bad):
    problem = Problem()
    pair = getattr(problem, operand)
    value = {"tensor": pair[0], "triple": (*pair, pair[1]), "none": None}[bad]
    assert_rejected("fp8_fp4_gemm_nt", operand, lambda: problem.call(**{operand: value}), "pair (data, sf)")


@pytest.mark.parametrize("argument", ["a[0]", "b[0]", "d"])
@pytest.mark.parametrize("bad", ["list", "1d", "3d"])
def test_fp8_gemm_rejects_data_or_output_that_is_not_a_2d_tensor(argument, bad):
    problem = Problem()
    original = {"a[0]": problem.a[0], "b[0]": problem.b[0], "d": problem.d}[argument]
    value = {"list": lambda t: t.float().tolist(), "1d": lambda t: t.flatten(),
             "3d": lambda t: t.unsqueeze(0)}[bad](original)
    kwargs = {"a[0]": {"a": (value, problem.a[1])}, "b[0]": {"b": (value, problem.b[1])}, "d": {"d": value}}
    assert_rejected("fp8_fp4_gemm_nt", argument, lambda: problem.call(**kwargs[argument]))


@pytest.mark.parametrize("operand", ["a", "b"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float8_e5m2, torch.uint8])
def test_fp8_gemm_rejects_operand_that_is_not_fp8_e4m3(operand, dtype):
    problem = Problem()
    data, sf = getattr(problem, operand)
    assert_rejected("fp8_fp4_gemm_nt", f"{operand}[0]", lambda: problem.call(**{operand: (data.to(dtype), sf)}),
                    "torch.float8_e4m3fn", str(dtype))


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("operand", ["a", "b"])
def test_fp8_gemm_rejects_fp4_operand_on_sm90(alias, operand):
    problem = Problem(alias)
    data, sf = getattr(problem, operand)
    packed = torch.randint(-128, 128, (data.shape[0], data.shape[1] // 2), dtype=torch.int8)
    assert_rejected(f"fp8_fp4_gemm_{alias}", f"{operand}[0]", lambda: problem.call(**{operand: (packed, sf)}),
                    "SM90", "FP4", "SM100-only", "torch.int8")


@pytest.mark.parametrize("alias,operand", [("nt", "a"), ("nt", "b"), ("nn", "b"), ("tn", "a"), ("tn", "b"),
                                           ("tt", "a")])
def test_fp8_gemm_rejects_mn_major_operand_on_sm90(alias, operand):
    # The natural row-major tensors of nn/tn/tt (b [K, N], a [K, M]) and, for nt, a transposed view:
    # each gives an MN-major operand in the NT view.
    problem = Problem(alias)
    data, sf = getattr(problem, operand)
    transposed = (alias[0] == "t") if operand == "a" else (alias[1] == "n")
    mn_major = data.contiguous() if transposed else data.T.contiguous().T
    message = assert_rejected(f"fp8_fp4_gemm_{alias}", f"{operand}[0]",
                              lambda: problem.call(**{operand: (mn_major, sf)}), "K-major", "SM90", "MN-major")
    assert (f"{alias} passes" in message) == transposed  # the message explains the alias' transpose


@pytest.mark.parametrize("operand", ["a", "b"])
def test_fp8_gemm_rejects_operand_with_no_unit_stride(operand):
    problem = Problem()
    data, sf = getattr(problem, operand)
    strided = fp8(data.shape[0], 2 * data.shape[1])[:, ::2]
    assert_rejected("fp8_fp4_gemm_nt", f"{operand}[0]", lambda: problem.call(**{operand: (strided, sf)}))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.int32, FP8])
def test_fp8_gemm_rejects_output_that_is_not_bf16_or_fp32(dtype):
    problem = Problem()
    assert_rejected("fp8_fp4_gemm_nt", "d", lambda: problem.call(d=problem.d.to(dtype)), "torch.bfloat16")


@pytest.mark.parametrize("alias", ALIASES)
def test_fp8_gemm_rejects_k_that_differs_between_a_and_b(alias):
    problem = Problem(alias)
    other = Problem(alias, k=K + 16)
    assert_rejected(f"fp8_fp4_gemm_{alias}", "b[0]", lambda: problem.call(b=other.b), f"{K}")


@pytest.mark.parametrize("dim", ["m", "n"])
def test_fp8_gemm_rejects_d_whose_shape_differs_from_the_problem(dim):
    problem = Problem()
    d = torch.zeros(M + 4, N) if dim == "m" else torch.zeros(M, N + 8)
    assert_rejected("fp8_fp4_gemm_nt", "d", lambda: problem.call(d=d.to(torch.bfloat16)))


def test_fp8_gemm_rejects_output_that_is_not_n_major():
    problem = Problem()
    d = torch.zeros(N, M, dtype=torch.bfloat16).T
    assert_rejected("fp8_fp4_gemm_nt", "d", lambda: problem.call(d=d), "N-major")


@pytest.mark.parametrize("fault", ["dtype", "shape", "not_n_major", "not_a_tensor"])
def test_fp8_gemm_rejects_bad_c(fault):
    problem = Problem(kind="1d1d")
    c = {"dtype": problem.c.to(torch.bfloat16), "shape": torch.zeros(M, N + 4),
         "not_n_major": torch.zeros(N, M).T, "not_a_tensor": problem.c.tolist()}[fault]
    assert_rejected("fp8_fp4_gemm_nt", "c", lambda: problem.call(c=c))


@pytest.mark.parametrize("argument", ["a[0]", "b[0]", "d"])
def test_fp8_gemm_rejects_data_pointer_not_16_byte_aligned(argument):
    problem = Problem()
    if argument == "d":
        kwargs = {"d": torch.zeros(M * N + 1, dtype=torch.bfloat16)[1:].view(M, N)}
    else:
        data, sf = getattr(problem, argument[0])
        kwargs = {argument[0]: (fp8(*data.shape, misaligned=True), sf)}
    assert_rejected("fp8_fp4_gemm_nt", argument, lambda: problem.call(**kwargs), "16-byte")


@pytest.mark.parametrize("argument", ["a[0]", "b[0]", "d"])
def test_fp8_gemm_rejects_row_stride_not_a_multiple_of_16_bytes(argument):
    problem = Problem()
    if argument == "d":
        kwargs = {"d": torch.zeros(M, N + 1, dtype=torch.bfloat16)[:, :N]}
    else:
        data, sf = getattr(problem, argument[0])
        kwargs = {argument[0]: (fp8(*data.shape, row_stride=data.shape[1] + 1), sf)}
    assert_rejected("fp8_fp4_gemm_nt", argument, lambda: problem.call(**kwargs), "16 bytes")


def test_fp8_gemm_rejects_k_major_rows_of_k_not_a_multiple_of_16():
    problem = Problem(k=136)
    assert_rejected("fp8_fp4_gemm_nt", "a[0]", problem.call, "16 bytes")


@pytest.mark.parametrize("argument", ["b[0]", "c", SFA, SFB])
def test_fp8_gemm_rejects_tensors_on_different_devices(argument):
    # A meta tensor is a tensor on another device, whatever devices this machine has.
    problem = Problem(kind="1d1d")
    kwargs = {"b[0]": {"b": (problem.b[0].to("meta"), problem.b[1])}, "c": {"c": problem.c.to("meta")},
              SFA: {"a": (problem.a[0], problem.a[1].to("meta"))},
              SFB: {"b": (problem.b[0], problem.b[1].to("meta"))}}[argument]
    assert_rejected("fp8_fp4_gemm_nt", argument, lambda: problem.call(**kwargs), "like d", "meta")


# --- rejections: recipes (API.md 1.5) ----------------------------------------------------------------

def test_fp8_gemm_rejects_recipe_together_with_the_pair():
    problem = Problem()
    assert_rejected("fp8_fp4_gemm_nt", "recipe", lambda: problem.call(recipe_a=(1, 128), recipe_b=(128, 128)),
                    "recipe_a")


@pytest.mark.parametrize("given", ["recipe_a", "recipe_b"])
@pytest.mark.parametrize("with_recipe", [False, True])
def test_fp8_gemm_rejects_half_a_recipe_pair(given, with_recipe):
    problem = Problem()
    kwargs = {given: (1, 128) if given == "recipe_a" else (128, 128)}
    if with_recipe:  # both forms at once: recipe is the one named
        assert_rejected("fp8_fp4_gemm_nt", "recipe", lambda: problem.call(**kwargs))
        return
    missing = "recipe_b" if given == "recipe_a" else "recipe_a"
    assert_rejected("fp8_fp4_gemm_nt", missing, lambda: problem.call(recipe=None, **kwargs), given)


@pytest.mark.parametrize("argument,value", [("recipe", (1, 128)), ("recipe", (1, 1, 1, 128)), ("recipe", "1d2d"),
                                            ("recipe", (1, 0, 128)), ("recipe", (1, -128, 128)),
                                            ("recipe_a", (1, 128, 128)), ("recipe_b", 128), ("recipe_b", (0, 128))])
def test_fp8_gemm_rejects_malformed_recipe(argument, value):
    problem = Problem()
    kwargs = {argument: value} if argument == "recipe" else {
        "recipe": None, "recipe_a": (1, 128), "recipe_b": (128, 128), argument: value}
    assert_rejected("fp8_fp4_gemm_nt", argument, lambda: problem.call(**kwargs))


@pytest.mark.parametrize("value", [(1, 128.0, 128), (1, True, 128), (1, None, 128)])
def test_fp8_gemm_rejects_recipe_entries_that_are_not_ints(value):
    problem = Problem()
    assert_rejected("fp8_fp4_gemm_nt", "recipe[1]", lambda: problem.call(recipe=value))


@pytest.mark.parametrize("recipe", [(1, 64, 128), (1, 128, 64), (1, 128, 32), (2, 128, 128), (128, 128, 128),
                                    (1, 1, 32), (1, 32, 128)])
def test_fp8_gemm_rejects_granularities_sm90_has_no_kernel_for(recipe):
    problem = Problem()
    assert_rejected("fp8_fp4_gemm_nt", "recipe", lambda: problem.call(recipe=recipe), "SM90")


@pytest.mark.parametrize("argument,recipe_a,recipe_b", [("recipe_a", (1, 32), (128, 128)),
                                                         ("recipe_a", (128, 128), (128, 128)),
                                                         ("recipe_b", (1, 128), (64, 128)),
                                                         ("recipe_b", (1, 128), (128, 32))])
def test_fp8_gemm_rejects_recipe_pair_granularities_sm90_has_no_kernel_for(argument, recipe_a, recipe_b):
    problem = Problem()
    assert_rejected("fp8_fp4_gemm_nt", argument,
                    lambda: problem.call(recipe=None, recipe_a=recipe_a, recipe_b=recipe_b), "SM90")


@pytest.mark.parametrize("argument", [SFA, SFB])
def test_fp8_gemm_default_recipe_on_sm90_rejects_int32_scale_factors(argument):
    problem = Problem()
    operand = argument[0]
    data, _sf = getattr(problem, operand)
    packed = torch.zeros(data.shape[0], 1, dtype=torch.int32)  # packed UE8M0 shape
    assert_rejected("fp8_fp4_gemm_nt", argument, lambda: problem.call(recipe=None, **{operand: (data, packed)}),
                    "default recipe", "torch.float32", "torch.int32")


@pytest.mark.parametrize("argument", [SFA, SFB])
@pytest.mark.parametrize("kind", KINDS)
def test_fp8_gemm_explicit_recipe_on_sm90_rejects_int32_scale_factors_without_converting(argument, kind):
    problem = Problem(kind=kind)
    operand = argument[0]
    data, sf = getattr(problem, operand)
    as_int = sf.to(torch.int32)
    assert_rejected("fp8_fp4_gemm_nt", argument, lambda: problem.call(**{operand: (data, as_int)}),
                    "torch.float32", "SM90", "torch.int32")


@pytest.mark.parametrize("argument", [SFA, SFB])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, FP8])
def test_fp8_gemm_rejects_scale_factors_that_are_not_fp32(argument, dtype):
    problem = Problem()
    operand = argument[0]
    data, sf = getattr(problem, operand)
    assert_rejected("fp8_fp4_gemm_nt", argument, lambda: problem.call(**{operand: (data, sf.to(dtype))}),
                    "torch.float32")


@pytest.mark.parametrize("argument", [SFA, SFB])
@pytest.mark.parametrize("bad", ["list", "1d", "3d"])
def test_fp8_gemm_rejects_scale_factor_that_is_not_a_2d_tensor(argument, bad):
    problem = Problem()
    operand = argument[0]
    data, sf = getattr(problem, operand)
    value = {"list": sf.tolist, "1d": sf.flatten, "3d": lambda: sf.unsqueeze(0)}[bad]()
    assert_rejected("fp8_fp4_gemm_nt", argument, lambda: problem.call(**{operand: (data, value)}))


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("argument,fault", [(SFA, "rows"), (SFA, "cols"), (SFB, "rows"), (SFB, "cols"),
                                            (SFB, "other_kind")])
def test_fp8_gemm_rejects_scale_factor_of_the_wrong_shape(alias, kind, argument, fault):
    problem = Problem(alias, kind)
    operand = argument[0]
    logical = problem.sfa_logical if operand == "a" else problem.sfb_logical
    rows, cols = logical.shape
    shape = {"rows": (rows + 1, cols), "cols": (rows, cols + 1),
             "other_kind": sfb_shape("1d1d" if kind == "1d2d" else "1d2d", N, K)}[fault]
    data = problem.a_logical if operand == "a" else problem.b_logical
    bad = problem.physical(operand, data, scales(*shape))
    message = assert_rejected(f"fp8_fp4_gemm_{alias}", argument, lambda: problem.call(**{operand: bad}), "shape")
    transposed = (alias[0] == "t") if operand == "a" else (alias[1] == "n")
    assert (f"{alias} passes" in message) == transposed


def test_fp8_gemm_rejects_1d2d_sfb_neither_row_major_nor_transpose_contiguous():
    problem = Problem()
    rows, cols = problem.sfb_logical.shape
    sliced = scales(rows, 2 * cols)[:, ::2]
    assert_rejected("fp8_fp4_gemm_nt", SFB, lambda: problem.call(b=(problem.b_logical, sliced)), "contiguous")


# --- rejections: what the recipe's kernel needs of d and c (API.md 1.3) ------------------------------

@pytest.mark.parametrize("alias", ALIASES)
def test_fp8_gemm_1d2d_rejects_fp32_output(alias):
    problem = Problem(alias, "1d2d", d_dtype=torch.float32)
    assert_rejected(f"fp8_fp4_gemm_{alias}", "d", problem.call, "torch.bfloat16", "1D2D", "torch.float32")


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("c_mode", ["in_place", "distinct"])
def test_fp8_gemm_1d2d_rejects_c(alias, c_mode):
    problem = Problem(alias, "1d2d", c_mode=c_mode)
    assert_rejected(f"fp8_fp4_gemm_{alias}", "c", problem.call, "None", "1D2D")


@pytest.mark.parametrize("alias", ALIASES)
def test_fp8_gemm_1d1d_rejects_bf16_output(alias):
    problem = Problem(alias, "1d1d", d_dtype=torch.bfloat16)
    assert_rejected(f"fp8_fp4_gemm_{alias}", "d", problem.call, "torch.float32", "1D1D")


@pytest.mark.parametrize("alias", ALIASES)
def test_fp8_gemm_1d1d_rejects_a_missing_c(alias):
    problem = Problem(alias, "1d1d", c_mode="none")
    assert_rejected(f"fp8_fp4_gemm_{alias}", "c", problem.call, "1D1D", "None")


def test_fp8_gemm_recipe_pair_decides_the_kernel_like_recipe():
    problem = Problem(kind="1d1d", d_dtype=torch.bfloat16, c_mode="none")
    assert_rejected("fp8_fp4_gemm_nt", "d", lambda: problem.call(recipe=None, recipe_a=(1, 128),
                                                                  recipe_b=(1, 128)), "1D1D")


@pytest.mark.parametrize("argument,value", [("compiled_dims", None), ("compiled_dims", 3),
                                            ("disable_ue8m0_cast", "yes"), ("disable_ue8m0_cast", 2)])
def test_fp8_gemm_rejects_non_tensor_arguments_of_the_wrong_type(argument, value):
    problem = Problem()
    assert_rejected("fp8_fp4_gemm_nt", argument, lambda: problem.call(**{argument: value}))


# --- empty problems (API.md 1.3): no kernel, complete on CPU tensors --------------------------------

@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("zero_dim", ["m", "n"])
@pytest.mark.parametrize("kind,c_mode", [("1d2d", "none"), ("1d1d", "none"), ("1d1d", "distinct"),
                                         ("1d1d", "in_place")])
def test_fp8_gemm_with_m_or_n_zero_touches_nothing(no_kernel, alias, zero_dim, kind, c_mode):
    m, n = (0, N) if zero_dim == "m" else (M, 0)
    problem = Problem(alias, kind, m=m, n=n, c_mode=c_mode)
    buffer = torch.full((M, N), float("nan"), dtype=D_DTYPES[kind])
    problem.d = buffer[:m, :n]
    if c_mode == "in_place":
        problem.c = problem.d
    c_before = None if problem.c is None else problem.c.clone()
    assert problem.call() is None
    assert torch.isnan(buffer).all()
    if problem.c is not None:
        assert torch.equal(problem.c, c_before)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("c_mode", ["none", "distinct", "in_place"])
def test_fp8_gemm_with_k_zero_writes_c_or_zeros_whatever_the_recipe(no_kernel, alias, d_dtype, c_mode):
    # No kernel runs, so the recipe's needs of d and c (1D2D: bf16, no c) do not apply (DeepGEMM's
    # early return comes before them).
    problem = Problem(alias, "1d2d", k=0, d_dtype=d_dtype, c_mode=c_mode)
    if c_mode == "in_place":
        problem.d.copy_(torch.randn(M, N) * 32)
    else:
        problem.d.fill_(float("nan"))
    expected = torch.zeros(M, N, dtype=d_dtype) if problem.c is None else problem.c.clone()
    problem.call()
    assert torch.equal(problem.d, expected)


def test_fp8_gemm_empty_problem_does_not_look_at_recipes_or_scale_factors(no_kernel):
    # As in DeepGEMM: the SF transform and the recipe checks come after the early returns.
    problem = Problem(m=0)
    problem.a = (problem.a[0], "not a tensor")
    problem.call(recipe=(1, 64, 128), recipe_a=(1, 128))


@pytest.mark.parametrize("alias", ALIASES)
def test_fp8_gemm_checks_operands_before_the_empty_problem_shortcut(no_kernel, alias):
    problem = Problem(alias, m=0)
    assert_rejected(f"fp8_fp4_gemm_{alias}", "d", lambda: problem.call(d=problem.d.to(torch.float16)))
    problem = Problem(alias, k=0)
    assert_rejected(f"fp8_fp4_gemm_{alias}", "c", lambda: problem.call(c=torch.zeros(M, N)))
    problem = Problem(alias, m=0)
    int8 = torch.zeros(0, K // 2, dtype=torch.int8)
    fp4_a = problem.physical("a", int8, problem.sfa_logical)
    assert_rejected(f"fp8_fp4_gemm_{alias}", "a[0]", lambda: problem.call(a=fp4_a))
    assert_rejected(f"fp8_fp4_gemm_{alias}", "recipe", lambda: problem.call(recipe=(1, 128)))


@pytest.mark.parametrize("alias", ["nn", "tn"])
def test_fp8_gemm_rejects_mn_major_operand_on_sm90_even_for_an_empty_problem(no_kernel, alias):
    # DeepGEMM checks the majors before its early return.
    problem = Problem(alias, m=0)
    assert_rejected(f"fp8_fp4_gemm_{alias}", "b[0]", lambda: problem.call(b=(problem.b[0].contiguous(), problem.b[1])))


# --- fp8_gemm_nt_skip_head_mid (API.md 3.3) --------------------------------------------------------

SPLITS = (16, 8, 32)  # left, mid, right
HEADS = 3
SKIP_N = HEADS * (SPLITS[0] + SPLITS[2])
SKIP_WIDTH = HEADS * sum(SPLITS)


def skip_head_mid(problem, d=None, head_splits=SPLITS, **kwargs):
    return lambda: fp8_gemm.fp8_gemm_nt_skip_head_mid(problem.a, problem.b, problem.d if d is None else d,
                                                      head_splits, **kwargs)


def skip_problem(m=M, n=SKIP_N, k=K, d_dtype=torch.bfloat16, width=None):
    problem = Problem("nt", "1d2d", m=m, n=n, k=k)
    problem.d = torch.randn(m, SKIP_WIDTH if width is None else width).to(d_dtype)
    return problem


@pytest.mark.parametrize("recipe", [None, (1, 128, 128)])
def test_skip_head_mid_valid_call_has_no_cpu_kernel(recipe):
    assert_reaches_dispatch("fp8_gemm_nt_skip_head_mid", skip_head_mid(skip_problem(), recipe=recipe))


def test_skip_head_mid_rejects_n_not_divisible_by_left_plus_right():
    problem = skip_problem(n=SKIP_N + 16, width=SKIP_WIDTH + 16)
    assert_rejected("fp8_gemm_nt_skip_head_mid", "head_splits", skip_head_mid(problem), "dividing N")


@pytest.mark.parametrize("width", [SKIP_N, SKIP_WIDTH + 8, SKIP_WIDTH - 8])
def test_skip_head_mid_rejects_d_of_the_wrong_width(width):
    problem = skip_problem(width=width)
    assert_rejected("fp8_gemm_nt_skip_head_mid", "d", skip_head_mid(problem), str(SKIP_WIDTH))


@pytest.mark.parametrize("recipe", [(1, 128, 64), (1, 128, 32)])
def test_skip_head_mid_rejects_gran_k_other_than_128(recipe):
    assert_rejected("fp8_gemm_nt_skip_head_mid", "recipe", skip_head_mid(skip_problem(), recipe=recipe),
                    "gran_k == 128")


def test_skip_head_mid_rejects_the_1d1d_recipe_on_sm90():
    problem = skip_problem()
    problem.b = (problem.b_logical, scales(SKIP_N, ceil_div(K, 128)))
    assert_rejected("fp8_gemm_nt_skip_head_mid", "recipe", skip_head_mid(problem, recipe=(1, 1, 128)), "1D2D")


def test_skip_head_mid_rejects_fp32_output_on_sm90():
    assert_rejected("fp8_gemm_nt_skip_head_mid", "d", skip_head_mid(skip_problem(d_dtype=torch.float32)),
                    "torch.bfloat16")


@pytest.mark.parametrize("head_splits", [(16, 32), (16, 8, 32, 0), (0, 8, 0), (-16, 8, 32), (16, 8.0, 32), None])
def test_skip_head_mid_rejects_malformed_head_splits(head_splits):
    argument = "head_splits[1]" if head_splits == (16, 8.0, 32) else "head_splits"
    assert_rejected("fp8_gemm_nt_skip_head_mid", argument, skip_head_mid(skip_problem(), head_splits=head_splits))


@pytest.mark.parametrize("zero", ["n", "k"])
def test_skip_head_mid_rejects_n_or_k_zero(no_kernel, zero):
    problem = skip_problem(n=0, width=0) if zero == "n" else skip_problem(k=0)
    assert_rejected("fp8_gemm_nt_skip_head_mid", "b[0]", skip_head_mid(problem), "positive N and K")


def test_skip_head_mid_rejects_fp4_operands():
    problem = skip_problem()
    packed = torch.zeros(M, K // 2, dtype=torch.int8)
    problem.a = (packed, problem.a[1])
    assert_rejected("fp8_gemm_nt_skip_head_mid", "a[0]", skip_head_mid(problem), "FP4")


def test_skip_head_mid_rejects_mn_major_operand_on_sm90():
    problem = skip_problem()
    problem.b = (problem.b_logical.T.contiguous().T, problem.b[1])
    assert_rejected("fp8_gemm_nt_skip_head_mid", "b[0]", skip_head_mid(problem), "K-major")


def test_skip_head_mid_with_m_zero_touches_nothing(no_kernel):
    problem = skip_problem(m=0)
    buffer = torch.full((4, SKIP_WIDTH), float("nan"), dtype=torch.bfloat16)
    skip_head_mid(problem, d=buffer[:0])()
    assert torch.isnan(buffer).all()
