"""Argument checks and kernel launches of the K-grouped GEMMs (dg_triton/k_grouped.py,
validation_k_grouped.py; API.md 1.3, 2.3, 3.6, 4), on CPU tensors.

This host has no GPU, so the checks take the SM90 rules (k_g % 128, no psum layout, recipe
(1, 1, 128)). Every rejection is a DGArgumentError whose message starts "{fn}: {argument} must be".
A call that passes the checks reaches dispatch, which has no CPU kernel without the interpreter and
raises NotImplementedError. With dispatch patched to answer SM90, each form reaches its k-grouped
kernel's launch layer (sm90_k_grouped_gemm.run / run_bf16) once with every group (recorded here);
the recorded arguments are checked against the caller's buffers. Empty problems reach neither.
SM100 is faked through settings.current_arch_major.
"""
import inspect

import pytest
import torch

import dg_triton
from dg_triton import dispatch, settings
from dg_triton.errors import DGArgumentError
from dg_triton.kernels import sm90_k_grouped_gemm
from dg_triton.reference_k_grouped import k_grouped_nt_operand, k_grouped_starts
from dg_triton.utils import layout as mk_layout
from dg_triton.utils.math import align

# M is not a multiple of 4 for FP8 (sfa padding rows in the TMA-aligned layout); BF16 needs M and N
# multiples of 8 (MN-major TMA rows). Group 1 is empty.
G, M, N = 3, 38, 20
BF16_M, BF16_N = 40, 24
KS = [128, 0, 256]
SUM_K = sum(KS)
SK = SUM_K // 128
FP8 = torch.float8_e4m3fn
FP8_NT, FP8_TN, BF16_TN = ("k_grouped_fp8_gemm_nt_contiguous", "k_grouped_fp8_gemm_tn_contiguous",
                           "k_grouped_bf16_gemm_tn_contiguous")
SFA, SFB = "a[1] (sfa)", "b[1] (sfb)"


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("DG_BACKEND", raising=False)
    previous = mk_layout.get_mk_alignment_for_contiguous_layout()
    mk_layout.set_mk_alignment_for_contiguous_layout(128)
    yield
    mk_layout.set_mk_alignment_for_contiguous_layout(previous)


def fp8_operand(ks, mn):
    """SM90's nt operand: a flat FP8 buffer of sum(ks) * MN values and the per-token SFs as the
    transpose of per-channel ones ([MN, sum(ks)/128], strides (1, MN)), as upstream builds them."""
    sum_k = sum(ks)
    if sum_k % 128 == 0 and mn:
        return k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(torch.randn(sum_k, mn), False), ks)
    # Sizes the cast refuses (rejected calls, empty problems): random values of the same layout.
    return torch.randn(sum_k * mn).to(FP8), (torch.rand(-(-sum_k // 128), mn) + 0.5).T


def fp8_args(ks=KS, m=M, n=N, c_is_d=False):
    a, b = fp8_operand(ks, m), fp8_operand(ks, n)
    d = torch.randn(len(ks), m, n)
    return {"a": a, "b": b, "d": d, "ks_cpu": list(ks), "grouped_layout": torch.tensor(ks, dtype=torch.int32),
            "c": d if c_is_d else torch.randn(len(ks), m, n)}


def bf16_args(ks=KS, m=BF16_M, n=BF16_N, c_is_d=False, dtype=torch.float32):
    sum_k = sum(ks)
    d = torch.randn(len(ks), m, n).to(dtype)
    return {"a": torch.randn(sum_k, m).to(torch.bfloat16), "b": torch.randn(sum_k, n).to(torch.bfloat16),
            "d": d, "ks_cpu": list(ks), "grouped_layout": torch.tensor(ks, dtype=torch.int32),
            "c": d if c_is_d else torch.randn(len(ks), m, n).to(dtype)}


MAKE = {FP8_NT: fp8_args, BF16_TN: bf16_args}
BOTH = sorted(MAKE)


def call(fn, **kwargs):
    return getattr(dg_triton, fn)(**kwargs)


def assert_rejected(fn, argument, kwargs, *fragments):
    with pytest.raises(DGArgumentError) as excinfo:
        call(fn, **kwargs)
    message = str(excinfo.value)
    assert message.startswith(f"{fn}: {argument} must be "), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"


def assert_reaches_dispatch(fn, kwargs):
    with pytest.raises(NotImplementedError) as excinfo:
        call(fn, **kwargs)
    assert not isinstance(excinfo.value, DGArgumentError), str(excinfo.value)
    message = str(excinfo.value)
    assert message.startswith(f"{fn}: no kernel for this device") and "SM90" in message, message


def misaligned(t, offset_elements=1):
    """t's values at a data pointer `offset_elements` past a 16-byte boundary."""
    storage = torch.empty(t.numel() + offset_elements, dtype=t.dtype)
    view = storage[offset_elements:].view(t.shape)
    view.copy_(t)
    return view


@pytest.fixture
def kernel_runs(monkeypatch):
    """Dispatch answers SM90; the launch layers record their calls (with d's content at launch
    time: c must already be in it)."""
    runs = []
    monkeypatch.setattr(dispatch, "backend", lambda function, device, available: dispatch.SM90)

    def fp8_run(function, a_flat, sfa, b_flat, sfb, d, m, n, ks, starts, key):
        runs.append(("fp8", function, a_flat, sfa, b_flat, sfb, d, d.clone(), m, n, list(ks), list(starts), key))

    def bf16_run(function, a, b, d, m, n, ks, starts, key, *rest):
        runs.append(("bf16", function, a, b, d, d.clone(), m, n, list(ks), list(starts), key, rest))
    monkeypatch.setattr(sm90_k_grouped_gemm, "run", fp8_run)
    monkeypatch.setattr(sm90_k_grouped_gemm, "run_bf16", bf16_run)
    return runs


@pytest.fixture
def no_kernel(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("an empty problem reached dispatch or a kernel")
    monkeypatch.setattr(dispatch, "backend", forbidden)
    monkeypatch.setattr(sm90_k_grouped_gemm, "run", forbidden)
    monkeypatch.setattr(sm90_k_grouped_gemm, "run_bf16", forbidden)


@pytest.fixture
def sm100(monkeypatch):
    monkeypatch.setattr(settings, "current_arch_major", lambda *args: 10)


# --- names and signatures (API.md 3, 3.6) -------------------------------------------------------------

API_SIGNATURES = {
    FP8_NT: [("a", None), ("b", None), ("d", None), ("ks_cpu", None), ("grouped_layout", None), ("c", None),
             ("recipe", (1, 1, 128)), ("compiled_dims", "mn"), ("use_psum_layout", False)],
    BF16_TN: [("a", None), ("b", None), ("d", None), ("ks_cpu", None), ("grouped_layout", None), ("c", None),
              ("compiled_dims", "mn"), ("use_psum_layout", False)],
}
API_SIGNATURES[FP8_TN] = API_SIGNATURES[FP8_NT]


@pytest.mark.parametrize("fn", sorted(API_SIGNATURES))
def test_signatures_match_api_md(fn):
    parameters = inspect.signature(getattr(dg_triton, fn)).parameters.values()
    got = [(p.name, None if p.default is inspect.Parameter.empty else p.default) for p in parameters]
    assert got == API_SIGNATURES[fn]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)


def test_k_grouped_functions_have_a_portable_kernel():
    assert {FP8_NT, BF16_TN} <= dispatch.PORTABLE_FUNCTIONS and FP8_TN not in dispatch.PORTABLE_FUNCTIONS


@pytest.mark.parametrize("arch", [None, 9, 10])
def test_fp8_tn_is_sm100_only_and_not_built(monkeypatch, arch):
    monkeypatch.setattr(settings, "current_arch_major", lambda *args: arch)
    with pytest.raises(NotImplementedError, match=f"^{FP8_TN}: DeepGEMM's SM100-only") as excinfo:
        call(FP8_TN, **fp8_args())
    assert "k_grouped_fp8_gemm_nt_contiguous" in str(excinfo.value)


# --- accepted calls -------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.parametrize("c_is_d", [False, True])
def test_valid_call_reaches_dispatch_which_has_no_cpu_kernel(fn, c_is_d):
    kwargs = MAKE[fn](c_is_d=c_is_d)
    d_before = kwargs["d"].clone()
    assert_reaches_dispatch(fn, kwargs)
    assert torch.equal(kwargs["d"], d_before), "d was touched before the refusal"


def test_accepted_argument_forms():
    for extra in ({"recipe": [1, 1, 128]}, {"compiled_dims": "mnk"}, {"compiled_dims": ""}, {"use_psum_layout": 0},
                  {"ks_cpu": tuple(KS)}):
        assert_reaches_dispatch(FP8_NT, dict(fp8_args(), **extra))
    assert_reaches_dispatch(BF16_TN, bf16_args(dtype=torch.bfloat16))
    assert_reaches_dispatch(FP8_NT, fp8_args(ks=[256]))
    assert_reaches_dispatch(FP8_NT, fp8_args(m=1, n=4))   # a size-1 M has no row stride to check


def test_sfs_in_any_strides_are_accepted():
    kwargs = fp8_args()
    (a, sfa), (b, sfb) = kwargs["a"], kwargs["b"]
    kwargs["a"], kwargs["b"] = (a, sfa.contiguous()), (b, sfb.contiguous())
    assert_reaches_dispatch(FP8_NT, kwargs)


def test_other_mk_alignment_multiple_of_128_is_honoured():
    mk_layout.set_mk_alignment_for_contiguous_layout(256)
    assert_reaches_dispatch(FP8_NT, fp8_args(ks=[256, 0, 512]))
    assert_rejected(FP8_NT, "ks_cpu[0]", fp8_args(ks=[128, 0, 256]), "get_mk_alignment_for_contiguous_layout() = 256")


# --- empty problems (API.md 1.3) -------------------------------------------------------------------------

@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.parametrize("dim", ["m", "n"])
def test_no_rows_or_columns_touches_nothing(fn, dim, no_kernel):
    kwargs = MAKE[fn](**{dim: 0})
    d_before = kwargs["d"].clone()
    call(fn, **kwargs)
    assert torch.equal(kwargs["d"], d_before)


@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.parametrize("c_is_d", [False, True])
def test_all_groups_empty_leaves_d_equal_to_c_without_a_kernel(fn, c_is_d, no_kernel):
    kwargs = MAKE[fn](ks=[0, 0], c_is_d=c_is_d)
    c_before = kwargs["c"].clone()
    call(fn, **kwargs)
    assert torch.equal(kwargs["d"], c_before) and torch.equal(kwargs["c"], c_before)


def test_scale_factors_of_an_empty_problem_are_not_read(no_kernel):
    kwargs = fp8_args(ks=[0, 0])
    kwargs["a"] = (kwargs["a"][0], "not read")
    kwargs["b"] = (kwargs["b"][0], None)
    call(FP8_NT, **kwargs)


# --- what reaches the dense kernels, per group ------------------------------------------------------------

@pytest.mark.parametrize("c_is_d", [False, True])
def test_fp8_launches_the_k_grouped_kernel_once_with_every_group(kernel_runs, c_is_d):
    kwargs = fp8_args(c_is_d=c_is_d)
    (a, sfa), (b, sfb), d, c = kwargs["a"], kwargs["b"], kwargs["d"], kwargs["c"]
    c_values = c.clone()
    call(FP8_NT, **kwargs, compiled_dims="mnk")
    assert len(kernel_runs) == 1
    kind, function, a_flat, sfa_k, b_flat, sfb_k, d_k, d_at_launch, m, n, ks, starts, key = kernel_runs[0]
    assert (kind, function, m, n, ks, starts) == ("fp8", FP8_NT, M, N, KS, k_grouped_starts(KS))
    # The caller's buffers, flat, and d itself holding c (the kernel accumulates into it).
    assert a_flat.shape == (SUM_K * M,) and a_flat.data_ptr() == a.data_ptr()
    assert b_flat.shape == (SUM_K * N,) and b_flat.data_ptr() == b.data_ptr()
    assert d_k is d and torch.equal(d_at_launch, c_values), "c was not in d before the accumulating launch"
    # The SFs in the TMA-aligned MN-major layout, all groups' K blocks.
    for sf_k, sf, mn in ((sfa_k, sfa, M), (sfb_k, sfb, N)):
        assert sf_k.stride() == (1, align(mn, 4)) and sf_k.data_ptr() % 16 == 0
        assert torch.equal(sf_k, sf)
    # The plan key names everything the plan is built from.
    assert key == (M, N, tuple(KS), -1, sfa_k.stride(), sfb_k.stride())
    assert torch.equal(d[1], c_values[1]), "the empty group's d is not c"


def test_fp8_sfs_already_in_the_kernel_layout_are_read_in_place(kernel_runs):
    kwargs = fp8_args()
    (a, sfa), (b, sfb) = kwargs["a"], kwargs["b"]
    sfa, sfb = dg_triton.get_mn_major_tma_aligned_tensor(sfa), dg_triton.get_mn_major_tma_aligned_tensor(sfb)
    kwargs["a"], kwargs["b"] = (a, sfa), (b, sfb)
    call(FP8_NT, **kwargs)
    assert kernel_runs[0][3] is sfa and kernel_runs[0][5] is sfb


def test_fp8_misaligned_sf_in_the_kernel_layout_is_rejected(kernel_runs):
    kwargs = fp8_args()
    a, sfa = kwargs["a"]
    aligned = dg_triton.get_mn_major_tma_aligned_tensor(sfa)
    storage = torch.empty(aligned.stride(1) * SK + 1)
    kwargs["a"] = (a, storage[1:].as_strided(aligned.shape, aligned.stride()))
    assert_rejected(FP8_NT, SFA, kwargs, "16-byte aligned")
    assert not kernel_runs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("c_is_d", [False, True])
@pytest.mark.parametrize("m", [BF16_M, 1])
def test_bf16_reaches_the_k_grouped_kernel_once_with_every_group(kernel_runs, c_is_d, m, dtype):
    kwargs = bf16_args(m=m, c_is_d=c_is_d, dtype=dtype)
    a, b, d, c = kwargs["a"], kwargs["b"], kwargs["d"], kwargs["c"]
    c_values = c.clone()
    call(BF16_TN, **kwargs)
    assert len(kernel_runs) == 1
    kind, function, a_k, b_k, d_k, d_at_launch, m_k, n_k, ks, starts, key, rest = kernel_runs[0]
    assert (kind, function, rest) == ("bf16", BF16_TN, ())
    assert a_k is a and b_k is b and d_k is d
    assert (m_k, n_k, ks, starts) == (m, BF16_N, KS, k_grouped_starts(KS))
    # The plan key: the problem and d's dtype (which picks the kernel's D type).
    assert key[:3] == (m, BF16_N, tuple(KS)) and key[-1] == dtype
    assert torch.equal(d_at_launch, c_values), "c was not in d before the accumulating launch"


# --- non-tensor arguments ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", BOTH)
def test_rejects_compiled_dims_that_is_not_a_str(fn):
    assert_rejected(fn, "compiled_dims", dict(MAKE[fn](), compiled_dims=None), "a str")


@pytest.mark.parametrize("fn", BOTH)
def test_rejects_psum_layout_on_sm90(fn):
    assert_rejected(fn, "use_psum_layout", dict(MAKE[fn](), use_psum_layout=True), "SM100-only")
    assert_rejected(fn, "use_psum_layout", dict(MAKE[fn](), use_psum_layout="yes"), "a bool")


@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.parametrize("ks_cpu,argument,fragment", [
    (None, "ks_cpu", "non-empty list"), ([], "ks_cpu", "non-empty list"),
    (torch.tensor(KS), "ks_cpu", "a list of ints"), ("128", "ks_cpu", "a list of ints"),
    ([128.0, 0, 256], "ks_cpu[0]", "an int"), ([True, 0, 256], "ks_cpu[0]", "an int"),
    ([128, -128, 256], "ks_cpu[1]", "non-negative"),
    ([128, 256], "ks_cpu", "G = 3 sizes"), ([128, 0, 256, 0], "ks_cpu", "G = 3 sizes"),
    ([128, 0, 192], "ks_cpu[2]", "get_mk_alignment_for_contiguous_layout() = 128"),
])
def test_rejects_bad_ks_cpu(fn, ks_cpu, argument, fragment):
    assert_rejected(fn, argument, dict(MAKE[fn](), ks_cpu=ks_cpu), fragment)


@pytest.mark.parametrize("fn", BOTH)
def test_rejects_k_not_a_multiple_of_128_on_sm90_even_with_a_smaller_mk_alignment(fn):
    mk_layout.set_mk_alignment_for_contiguous_layout(32)
    assert_rejected(fn, "ks_cpu[0]", MAKE[fn](ks=[96, 0, 256]), "a multiple of 128 on SM90")


@pytest.mark.parametrize("fn", BOTH)
@pytest.mark.parametrize("alignment", [16, 48])
def test_rejects_mk_alignment_that_is_not_a_multiple_of_32(fn, alignment):
    mk_layout.set_mk_alignment_for_contiguous_layout(alignment)
    assert_rejected(fn, "get_mk_alignment_for_contiguous_layout()", MAKE[fn](), "a multiple of 32")


@pytest.mark.parametrize("recipe", [None, (1, 128, 128), (1, 1, 32), (True, True, 128), [1, 1], "(1, 1, 128)",
                                    (1.0, 1, 128)])
def test_fp8_rejects_recipe_other_than_1d1d(recipe):
    assert_rejected(FP8_NT, "recipe", dict(fp8_args(), recipe=recipe), "(1, 1, 128)")


# --- d and c ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", BOTH)
def test_rejects_missing_c(fn):
    kwargs = MAKE[fn]()
    kwargs.pop("c")
    assert_rejected(fn, "c", kwargs, "given", "c=d")
    assert_rejected(fn, "c", dict(kwargs, c=None), "given")


@pytest.mark.parametrize("fn", BOTH)
def test_rejects_bad_c(fn):
    kwargs = MAKE[fn]()
    c = kwargs["c"]
    assert_rejected(fn, "c", dict(kwargs, c=c.tolist()), "a torch.Tensor")
    assert_rejected(fn, "c", dict(kwargs, c=c.double()), "of d's dtype")
    assert_rejected(fn, "c", dict(kwargs, c=c[:, :, :-4].contiguous()), "of shape")
    assert_rejected(fn, "c", dict(kwargs, c=c.transpose(1, 2).contiguous().transpose(1, 2)), "contiguous")


@pytest.mark.parametrize("fn", BOTH)
def test_rejects_bad_d(fn):
    kwargs = MAKE[fn]()
    d = kwargs["d"]
    assert_rejected(fn, "d", dict(kwargs, d=d.tolist()), "a torch.Tensor")
    assert_rejected(fn, "d", dict(kwargs, d=d[0]), "a 3-D tensor [G, M, N]")
    assert_rejected(fn, "d", dict(kwargs, d=d.half()), "torch.float32")
    assert_rejected(fn, "d", dict(kwargs, d=d.transpose(1, 2).contiguous().transpose(1, 2)), "contiguous")
    assert_rejected(fn, "d", dict(kwargs, d=d[:0], c=None), "group count")


def test_fp8_rejects_bf16_d():
    kwargs = fp8_args()
    assert_rejected(FP8_NT, "d", dict(kwargs, d=kwargs["d"].bfloat16(), c=kwargs["c"].bfloat16()), "torch.float32")


@pytest.mark.parametrize("fn", BOTH)
def test_rejects_misaligned_d_or_a_row_that_breaks_tma(fn):
    kwargs = MAKE[fn]()
    assert_rejected(fn, "d", dict(kwargs, d=misaligned(kwargs["d"])), "16-byte aligned")
    # N = 18 fp32: a row of 72 bytes (fp32 D rows must be 16-byte multiples).
    wide = MAKE[fn](n=18)
    assert_rejected(fn, "b" if fn == BF16_TN else "d", wide, "multiple of 16 bytes")


# --- grouped_layout -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", BOTH)
def test_rejects_bad_grouped_layout(fn):
    kwargs = MAKE[fn]()
    layout = kwargs["grouped_layout"]
    assert_rejected(fn, "grouped_layout", dict(kwargs, grouped_layout=layout.tolist()), "a torch.Tensor")
    assert_rejected(fn, "grouped_layout", dict(kwargs, grouped_layout=layout.long()), "torch.int32")
    assert_rejected(fn, "grouped_layout", dict(kwargs, grouped_layout=layout[None]), "1-D")
    assert_rejected(fn, "grouped_layout", dict(kwargs, grouped_layout=torch.zeros(2 * G, dtype=torch.int32)[::2]),
                    "contiguous")
    assert_rejected(fn, "grouped_layout", dict(kwargs, grouped_layout=torch.zeros(G + 1, dtype=torch.int32)),
                    f"of {G} elements")
    assert_rejected(fn, "grouped_layout", dict(kwargs, grouped_layout=layout.to("meta")), "on cpu like d")


# --- FP8 operands ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("operand", ["a", "b"])
def test_fp8_rejects_operand_that_is_not_a_pair(operand):
    kwargs = fp8_args()
    assert_rejected(FP8_NT, operand, dict(kwargs, **{operand: kwargs[operand][0]}), "a pair (data, sf)")


@pytest.mark.parametrize("operand", ["a", "b"])
def test_fp8_rejects_bad_data(operand):
    kwargs = fp8_args()
    data, sf = kwargs[operand]
    argument = f"{operand}[0]"
    mn = M if operand == "a" else N

    def with_data(t):
        return dict(kwargs, **{operand: (t, sf)})
    assert_rejected(FP8_NT, argument, with_data(data.tolist()), "a torch.Tensor")
    assert_rejected(FP8_NT, argument, with_data(data.to(torch.bfloat16)), "torch.float8_e4m3fn (FP8 E4M3)")
    assert_rejected(FP8_NT, argument, with_data(data.view(torch.int8)), "SM100-only")
    assert_rejected(FP8_NT, argument, with_data(data[:-128 * mn]), f"{SUM_K * mn} elements")
    two_d = data.view(mn, SUM_K)
    assert two_d.is_contiguous()
    assert_reaches_dispatch(FP8_NT, with_data(two_d))   # a flat buffer of any shape
    assert_rejected(FP8_NT, argument, with_data(data.view(SUM_K, mn).T), "contiguous")
    assert_rejected(FP8_NT, argument, with_data(data.to("meta")), "on cpu like d")
    assert_rejected(FP8_NT, argument, with_data(misaligned(data)), "16-byte aligned")


@pytest.mark.parametrize("operand,argument,mn", [("a", SFA, M), ("b", SFB, N)])
def test_fp8_rejects_bad_scale_factors(operand, argument, mn):
    kwargs = fp8_args()
    data, sf = kwargs[operand]

    def with_sf(t):
        return dict(kwargs, **{operand: (data, t)})
    assert_rejected(FP8_NT, argument, with_sf(sf.tolist()), "a torch.Tensor")
    assert_rejected(FP8_NT, argument, with_sf(sf[None]), "a 2-D tensor")
    assert_rejected(FP8_NT, argument, with_sf(sf.to(torch.int32)), "torch.float32", "SM100-only")
    assert_rejected(FP8_NT, argument, with_sf(torch.ones(mn, SK + 1)), f"({mn}, {SK})")
    assert_rejected(FP8_NT, argument, with_sf(torch.ones(SK, mn)), f"({mn}, {SK})")
    assert_rejected(FP8_NT, argument, with_sf(sf.to("meta")), "on cpu like d")


# --- BF16 operands --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("operand", ["a", "b"])
def test_bf16_rejects_bad_operand(operand):
    kwargs = bf16_args()
    t = kwargs[operand]
    mn = t.shape[1]

    def with_operand(x):
        return dict(kwargs, **{operand: x})
    assert_rejected(BF16_TN, operand, with_operand(t.tolist()), "a torch.Tensor")
    assert_rejected(BF16_TN, operand, with_operand(t[None]), "a 2-D tensor")
    assert_rejected(BF16_TN, operand, with_operand(t.float()), "torch.bfloat16")
    assert_rejected(BF16_TN, operand, with_operand(t[:-128]), f"sum(ks_cpu) = {SUM_K} rows")
    assert_rejected(BF16_TN, operand, with_operand(torch.zeros(SUM_K, mn + 8, dtype=torch.bfloat16)),
                    f"{mn} columns")
    assert_rejected(BF16_TN, operand, with_operand(t.T.contiguous().T), "contiguous")
    assert_rejected(BF16_TN, operand, with_operand(t.to("meta")), "on cpu like d")
    assert_rejected(BF16_TN, operand, with_operand(misaligned(t)), "16-byte aligned")


def test_bf16_rejects_m_whose_mn_major_rows_break_tma():
    # M = 36 bf16: group g's MN-major A has a K stride of 72 bytes.
    assert_rejected(BF16_TN, "a", bf16_args(m=36), "multiple of 16 bytes")


# --- SM100 -------------------------------------------------------------------------------------------------------

def test_fp8_nt_is_refused_on_sm100_before_any_check(sm100):
    with pytest.raises(NotImplementedError, match=f"^{FP8_NT}: DeepGEMM's SM90-only"):
        call(FP8_NT, a=None, b=None, d=None, ks_cpu=None, grouped_layout=None)


def test_bf16_on_sm100_drops_the_128_rule_and_refuses_psum_until_its_kernel_exists(sm100):
    mk_layout.set_mk_alignment_for_contiguous_layout(32)
    assert_reaches_dispatch(BF16_TN, bf16_args(ks=[32, 0, 96]))
    assert_rejected(BF16_TN, "ks_cpu[0]", bf16_args(ks=[48, 0, 96]), "get_mk_alignment_for_contiguous_layout() = 32")
    with pytest.raises(NotImplementedError, match=f"^{BF16_TN}: the psum layout"):
        call(BF16_TN, **dict(bf16_args(), use_psum_layout=True))
