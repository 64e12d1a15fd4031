"""Argument checks and routing of the M-grouped FP8 GEMMs (dg_triton/grouped_fp8.py; API.md 1.2,
1.5, 2.2, 2.3, 3.4, 3.5, 4), on CPU tensors.

This host has no GPU, so the checks take the SM90 rules (recipe (1, 128, 128), fp32 SFs, K-major
operands). Every rejection is a DGArgumentError whose message starts "{fn}: {argument} must be",
fn the m_grouped_fp8_fp4_gemm_* name whatever alias was called. A call that passes the checks
reaches dispatch, which has no CPU kernel and raises NotImplementedError; with dispatch patched
to answer SM90, it reaches the kernel layer (sm90_grouped_gemm.run_fp8_*, recorded here), whose
arguments are checked against the layouts that layer documents. Empty problems reach neither.
The warm path (grouped.py's signature cache) is exercised with meta tensors playing CUDA ones.
"""
import inspect

import pytest
import torch

import dg_triton
from dg_triton import dispatch, grouped, grouped_fp8, settings
from dg_triton.errors import DGArgumentError
from dg_triton.kernels import sm90_grouped_gemm
from dg_triton.utils import layout as mk_layout
from dg_triton.utils.math import align, ceil_div

# Distinct sizes, so a swapped dim cannot pass by accident: N spans two 128-blocks, K ends in a
# partial 128-group, M is two 128-row segments, max_m is not a multiple of 4 (SF row padding).
G, M, N, K, MAX_M = 2, 256, 144, 320, 38
SK, SN = ceil_div(K, 128), ceil_div(N, 128)
FP8 = torch.float8_e4m3fn
CONTIGUOUS, NN, MASKED = ("m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nn_contiguous",
                          "m_grouped_fp8_fp4_gemm_nt_masked")
SFA, SFB = "a[1] (sfa)", "b[1] (sfb)"


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("DG_BACKEND", raising=False)
    monkeypatch.setattr(grouped, "_accepted", {})
    previous = mk_layout.get_mk_alignment_for_contiguous_layout()
    mk_layout.set_mk_alignment_for_contiguous_layout(128)
    yield
    mk_layout.set_mk_alignment_for_contiguous_layout(previous)


def fp8(*shape, device="cpu"):
    return torch.randn(*shape).to(FP8).to(device)


def scales(*shape):
    return torch.rand(*shape) + 0.5


def bf16(*shape):
    return torch.randn(*shape).to(torch.bfloat16)


def misaligned(t):
    """t's values at a data pointer one element (1 byte for FP8) past a 16-byte boundary."""
    storage = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = storage[1:].view(t.shape)
    view.copy_(t)
    return view


def contiguous_args(psum=False, m=M):
    layout = (torch.tensor([100, M], dtype=torch.int32) if psum
              else torch.tensor([0] * 128 + [1] * 100 + [-1] * 28, dtype=torch.int32)[:m])
    return {"a": (fp8(m, K), scales(m, SK)), "b": (fp8(G, N, K), scales(G, SN, SK)), "d": bf16(m, N),
            "grouped_layout": layout, "use_psum_layout": psum}


def nn_args():
    """nn: b = (B [G, K, N], sfb [G, SK, SN]) whose .mT (what nn reads) is K-major, as SM90 needs."""
    kwargs = contiguous_args()
    kwargs.pop("use_psum_layout")
    b, sfb = kwargs["b"]
    kwargs["b"] = (b.mT, sfb.mT)
    return kwargs


def masked_args():
    return {"a": (fp8(G, MAX_M, K), scales(G, MAX_M, SK)), "b": (fp8(G, N, K), scales(G, SN, SK)),
            "d": bf16(G, MAX_M, N), "masked_m": torch.tensor([MAX_M, 5], dtype=torch.int32), "expected_m": 16}


MAKE = {CONTIGUOUS: contiguous_args, NN: nn_args, MASKED: masked_args}


def call(fn, **kwargs):
    return getattr(dg_triton, fn)(**kwargs)


def assert_rejected(fn, argument, kwargs, *fragments, called=None):
    with pytest.raises(DGArgumentError) as excinfo:
        call(called or fn, **kwargs)
    message = str(excinfo.value)
    assert message.startswith(f"{fn}: {argument} must be "), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"
    return message


def assert_reaches_dispatch(fn, kwargs, called=None):
    with pytest.raises(NotImplementedError) as excinfo:
        call(called or fn, **kwargs)
    assert not isinstance(excinfo.value, DGArgumentError), str(excinfo.value)
    message = str(excinfo.value)
    assert message.startswith(f"{fn}: no kernel for this device") and "SM90" in message, message


@pytest.fixture
def kernel_runs(monkeypatch):
    """Dispatch answers SM90 and the kernel layer records its calls."""
    runs = []
    monkeypatch.setattr(dispatch, "backend", lambda function, device, available: dispatch.SM90)
    def record(kind):
        def run(function, key, *args):
            # The plan key is the call's signature: the function first, then all it depends on.
            assert isinstance(key, tuple) and key[0] == function, key
            runs.append((kind, (function, *args)))
        return run
    monkeypatch.setattr(sm90_grouped_gemm, "run_fp8_contiguous", record("contiguous"), raising=False)
    monkeypatch.setattr(sm90_grouped_gemm, "run_fp8_masked", record("masked"), raising=False)
    return runs


@pytest.fixture
def no_kernel(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("an empty problem reached dispatch or the kernel layer")
    monkeypatch.setattr(dispatch, "backend", forbidden)
    monkeypatch.setattr(sm90_grouped_gemm, "run_fp8_contiguous", forbidden, raising=False)
    monkeypatch.setattr(sm90_grouped_gemm, "run_fp8_masked", forbidden, raising=False)


# --- names and signatures (API.md 3, 3.4, 3.5) ------------------------------------------------------

def test_fp8_names_are_the_fp8_fp4_callables_and_the_legacy_alias_is_masked():
    for suffix in ("nt_contiguous", "nn_contiguous", "nt_masked"):
        assert getattr(dg_triton, f"m_grouped_fp8_gemm_{suffix}") is getattr(dg_triton, f"m_grouped_fp8_fp4_gemm_{suffix}")
    assert dg_triton.fp8_m_grouped_gemm_nt_masked is dg_triton.m_grouped_fp8_fp4_gemm_nt_masked


API_SIGNATURES = {
    CONTIGUOUS: [("a", None), ("b", None), ("d", None), ("grouped_layout", None), ("recipe", None),
                 ("recipe_a", None), ("recipe_b", None), ("compiled_dims", "nk"), ("disable_ue8m0_cast", False),
                 ("use_psum_layout", False), ("ensure_zero_padding", True), ("expected_m_for_psum_layout", None)],
    NN: [("a", None), ("b", None), ("d", None), ("grouped_layout", None), ("recipe", None), ("recipe_a", None),
         ("recipe_b", None), ("compiled_dims", "nk"), ("disable_ue8m0_cast", False), ("use_psum_layout", False),
         ("ensure_zero_padding", True)],
    MASKED: [("a", None), ("b", None), ("d", None), ("masked_m", None), ("expected_m", None), ("recipe", None),
             ("recipe_a", None), ("recipe_b", None), ("compiled_dims", "nk"), ("disable_ue8m0_cast", False)],
}


@pytest.mark.parametrize("fn", sorted(API_SIGNATURES))
def test_signatures_match_api_md(fn):
    parameters = inspect.signature(getattr(dg_triton, fn)).parameters.values()
    got = [(p.name, None if p.default is inspect.Parameter.empty else p.default) for p in parameters]
    assert got == API_SIGNATURES[fn]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)


# --- valid calls ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn,called", [(CONTIGUOUS, CONTIGUOUS), (CONTIGUOUS, "m_grouped_fp8_gemm_nt_contiguous"),
                                       (NN, "m_grouped_fp8_gemm_nn_contiguous"), (MASKED, MASKED),
                                       (MASKED, "m_grouped_fp8_gemm_nt_masked"),
                                       (MASKED, "fp8_m_grouped_gemm_nt_masked")])
def test_valid_call_reaches_dispatch_which_has_no_cpu_kernel(fn, called):
    assert_reaches_dispatch(fn, MAKE[fn](), called)


def test_valid_psum_call_reaches_dispatch():
    kwargs = contiguous_args(psum=True)
    assert_reaches_dispatch(CONTIGUOUS, dict(kwargs, expected_m_for_psum_layout=100, ensure_zero_padding=False))


def test_accepted_recipe_forms_and_flags():
    for extra in ({"recipe": (1, 128, 128)}, {"recipe": [1, 128, 128]}, {"recipe_a": (1, 128), "recipe_b": (128, 128)},
                  {"disable_ue8m0_cast": True}, {"compiled_dims": "mnk"}, {"compiled_dims": ""}):
        assert_reaches_dispatch(CONTIGUOUS, dict(contiguous_args(), **extra))
        assert_reaches_dispatch(MASKED, dict(masked_args(), **extra))


def test_other_mk_alignment_is_honoured_for_the_index_layout():
    mk_layout.set_mk_alignment_for_contiguous_layout(64)
    kwargs = contiguous_args(m=192)
    assert_reaches_dispatch(CONTIGUOUS, kwargs)


def test_other_arch_gets_dispatchs_not_implemented_naming_the_function_and_sm90(monkeypatch):
    monkeypatch.setattr(dispatch, "_choices", {})
    monkeypatch.setattr(dispatch, "_backend_for_device",
                        lambda device: (None, "NVIDIA A100 is sm_80, which has no CUDA kernels in dg_triton"))
    with pytest.raises(NotImplementedError) as excinfo:
        call(MASKED, **masked_args())
    message = str(excinfo.value)
    assert message.startswith(f"{MASKED}: no kernel for this device") and "sm_80" in message
    assert "has SM90 kernels" in message


def test_sm100_is_refused_before_any_check(monkeypatch):
    monkeypatch.setattr(settings, "current_arch_major", lambda *args: 10)
    for fn in (CONTIGUOUS, MASKED):
        with pytest.raises(NotImplementedError, match=f"^{fn}: the SM100 FP8"):
            call(fn, **MAKE[fn]())


# --- what reaches the kernel layer ------------------------------------------------------------------------

def test_contiguous_reaches_kernel_with_documented_layouts(kernel_runs):
    kwargs = contiguous_args()
    (a, sfa), (b, sfb) = kwargs["a"], kwargs["b"]
    call(CONTIGUOUS, **kwargs, compiled_dims="k")
    [(kind, args)] = kernel_runs
    (function, a_k, sfa_k, b_k, sfb_k, d_k, layout_k, num_groups, use_psum, mk_alignment, compiled_dims,
     expected_m) = args
    assert kind == "contiguous" and function == CONTIGUOUS
    assert a_k is a and b_k is b and d_k is kwargs["d"] and layout_k is kwargs["grouped_layout"]
    assert sfa_k.dtype == torch.float32 and sfa_k.shape == (M, SK) and sfa_k.stride() == (1, align(M, 4))
    assert torch.equal(sfa_k, sfa)
    assert sfb_k is sfb and sfb_k.is_contiguous()
    assert (num_groups, use_psum, mk_alignment, compiled_dims, expected_m) == (G, False, 128, "k", None)


def test_contiguous_psum_reaches_kernel_with_psum_and_alignment(kernel_runs):
    kwargs = contiguous_args(psum=True)
    call(CONTIGUOUS, **kwargs, expected_m_for_psum_layout=128)
    [(_, args)] = kernel_runs
    # expected_m_for_psum_layout reaches the config choice (API.md 3.4).
    assert args[6] is kwargs["grouped_layout"] and args[7:] == (G, True, 128, "nk", 128)


def test_masked_reaches_kernel_with_documented_layouts(kernel_runs):
    kwargs = masked_args()
    (a, sfa), (b, sfb) = kwargs["a"], kwargs["b"]
    call(MASKED, **kwargs)
    [(kind, args)] = kernel_runs
    function, a_k, sfa_k, b_k, sfb_k, d_k, masked_m, expected_m, compiled_dims = args
    assert kind == "masked" and function == MASKED
    assert a_k is a and b_k is b and d_k is kwargs["d"] and masked_m is kwargs["masked_m"]
    aligned = align(MAX_M, 4)
    assert sfa_k.shape == (G, MAX_M, SK) and sfa_k.stride() == (SK * aligned, 1, aligned)
    assert torch.equal(sfa_k, sfa)
    assert sfb_k is sfb
    assert (expected_m, compiled_dims) == (16, "nk")


def test_sf_already_in_the_kernel_layouts_is_not_copied(kernel_runs):
    kwargs = masked_args()
    a, sfa = kwargs["a"]
    aligned_sfa = dg_triton.get_mn_major_tma_aligned_tensor(sfa)
    assert aligned_sfa is not sfa
    kwargs["a"] = (a, aligned_sfa)
    call(MASKED, **kwargs)
    assert kernel_runs[0][1][2] is aligned_sfa


def test_transpose_contiguous_sfb_is_made_contiguous(kernel_runs):
    kwargs = contiguous_args()
    b, sfb = kwargs["b"]
    mn_major_sfb = sfb.mT.contiguous().mT
    kwargs["b"] = (b, mn_major_sfb)
    call(CONTIGUOUS, **kwargs)
    sfb_k = kernel_runs[0][1][4]
    assert sfb_k.is_contiguous() and torch.equal(sfb_k, sfb)


def test_nn_alias_passes_the_k_major_mT_view_to_the_kernel(kernel_runs):
    kwargs = nn_args()
    b, sfb = kwargs["b"]
    call(NN, **kwargs)
    args = kernel_runs[0][1]
    assert args[0] == NN
    assert args[3].shape == (G, N, K) and args[3].stride(-1) == 1 and torch.equal(args[3].float(), b.mT.float())
    assert args[4].shape == (G, SN, SK) and args[4].is_contiguous() and torch.equal(args[4], sfb.mT)


def test_misaligned_sfa_in_the_kernel_layout_is_rejected(kernel_runs):
    kwargs = contiguous_args()
    a, sfa = kwargs["a"]
    aligned = dg_triton.get_mn_major_tma_aligned_tensor(sfa)
    storage = torch.empty(aligned.stride(1) * SK + 1)
    shifted = storage[1:].as_strided(aligned.shape, aligned.stride())
    kwargs["a"] = (a, shifted)
    assert_rejected(CONTIGUOUS, SFA, kwargs, "16-byte aligned")
    assert not kernel_runs


# --- empty problems (API.md 1.3, 3.4) ------------------------------------------------------------------

@pytest.mark.parametrize("psum", [False, True])
def test_contiguous_with_no_rows_launches_nothing(psum, no_kernel):
    kwargs = contiguous_args(psum, m=0)
    call(CONTIGUOUS, **kwargs)
    kwargs["a"] = (kwargs["a"][0], "scale factors of an empty problem are not read")
    call(CONTIGUOUS, **kwargs)


def test_masked_with_no_rows_or_no_groups_is_rejected(no_kernel):
    kwargs = masked_args()
    kwargs.update(a=(fp8(G, 0, K), scales(G, 0, SK)), d=bf16(G, 0, N))
    assert_rejected(MASKED, "a[0]", kwargs, "max_m")
    kwargs = {"a": (fp8(0, MAX_M, K), scales(0, MAX_M, SK)), "b": (fp8(0, N, K), scales(0, SN, SK)),
              "d": bf16(0, MAX_M, N), "masked_m": torch.zeros(0, dtype=torch.int32), "expected_m": 16}
    assert_rejected(MASKED, "b[0]", kwargs, "group count")


# --- operand rejections --------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
@pytest.mark.parametrize("operand", ["a", "b"])
def test_rejects_operand_that_is_not_a_pair(fn, operand):
    kwargs = MAKE[fn]()
    assert_rejected(fn, operand, dict(kwargs, **{operand: kwargs[operand][0]}), "a pair (data, sf)")
    assert_rejected(fn, operand, dict(kwargs, **{operand: kwargs[operand] + (None,)}), "a pair (data, sf)")


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
@pytest.mark.parametrize("operand", ["a", "b"])
def test_rejects_data_that_is_not_an_fp8_tensor_of_the_right_rank(fn, operand):
    kwargs = MAKE[fn]()
    data, sf = kwargs[operand]
    argument = f"{operand}[0]"
    assert_rejected(fn, argument, dict(kwargs, **{operand: (data.tolist(), sf)}), "a torch.Tensor")
    assert_rejected(fn, argument, dict(kwargs, **{operand: (data[0], sf)}), "-D tensor")
    assert_rejected(fn, argument, dict(kwargs, **{operand: (data.to(torch.bfloat16), sf)}),
                    "torch.float8_e4m3fn (FP8 E4M3)")
    assert_rejected(fn, argument, dict(kwargs, **{operand: (data.view(torch.int8), sf)}), "SM100-only")


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_k_mismatch_and_empty_b_dims(fn):
    kwargs = MAKE[fn]()
    b, sfb = kwargs["b"]
    assert_rejected(fn, "b[0]", dict(kwargs, b=(fp8(G, N, K + 16), sfb)), f"of K (size along K) {K}")
    assert_rejected(fn, "b[0]", dict(kwargs, b=(fp8(G, 0, K), sfb), d=bf16(*kwargs["d"].shape[:-1], 0)),
                    "positive N")
    a, sfa = kwargs["a"]
    assert_rejected(fn, "b[0]", dict(kwargs, a=(fp8(*a.shape[:-1], 0), sfa), b=(fp8(G, N, 0), sfb)),
                    "positive K")


def test_rejects_contiguous_b_without_groups():
    kwargs = contiguous_args()
    assert_rejected(CONTIGUOUS, "b[0]", dict(kwargs, b=(fp8(0, N, K), scales(0, SN, SK))), "group count")


def test_rejects_masked_group_count_mismatch():
    kwargs = masked_args()
    assert_rejected(MASKED, "b[0]", dict(kwargs, b=(fp8(G + 1, N, K), scales(G + 1, SN, SK))), f"{G} groups")


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_a_that_is_not_k_major(fn):
    kwargs = MAKE[fn]()
    a, sfa = kwargs["a"]
    mn_major = fp8(G, K, MAX_M).mT if fn == MASKED else fp8(K, M).T
    assert_rejected(fn, "a[0]", dict(kwargs, a=(mn_major, sfa)), "K-major")


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_mn_major_b_on_sm90(fn):
    kwargs = MAKE[fn]()
    assert_rejected(fn, "b[0]", dict(kwargs, b=(fp8(G, K, N).mT, kwargs["b"][1])), "K-major on SM90")


def test_nn_with_mn_major_b_is_rejected_with_a_way_out():
    kwargs = nn_args()
    message = assert_rejected(NN, "b[0]", dict(kwargs, b=(fp8(G, K, N), kwargs["b"][1])),
                              "K-major on SM90", called="m_grouped_fp8_gemm_nn_contiguous")
    assert ".mT" in message and "m_grouped_fp8_fp4_gemm_nt_contiguous" in message


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_b_whose_groups_are_not_densely_packed(fn):
    kwargs = MAKE[fn]()
    assert_rejected(fn, "b[0]", dict(kwargs, b=(fp8(G, N + 16, K)[:, :N], kwargs["b"][1])), "densely packed")


def test_rejects_single_group_b_with_padded_rows():
    kwargs = masked_args()
    kwargs.update(a=(fp8(1, MAX_M, K), scales(1, MAX_M, SK)), d=bf16(1, MAX_M, N),
                  masked_m=torch.tensor([3], dtype=torch.int32), b=(fp8(1, N, K + 16)[:, :, :K], scales(1, SN, SK)))
    assert_rejected(MASKED, "b[0]", kwargs, "contiguous [G, N, K]")


def test_rejects_masked_a_whose_groups_are_not_densely_packed():
    kwargs = masked_args()
    assert_rejected(MASKED, "a[0]", dict(kwargs, a=(fp8(G, MAX_M + 2, K)[:, :MAX_M], kwargs["a"][1])),
                    "densely packed")


# --- d --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_d_of_wrong_type_dtype_rank_or_shape(fn):
    kwargs = MAKE[fn]()
    d = kwargs["d"]
    assert_rejected(fn, "d", dict(kwargs, d=d.tolist()), "a torch.Tensor")
    assert_rejected(fn, "d", dict(kwargs, d=d.float()), "torch.bfloat16")
    assert_rejected(fn, "d", dict(kwargs, d=d.unsqueeze(0)), "-D tensor")
    assert_rejected(fn, "d", dict(kwargs, d=bf16(*d.shape[:-1], N + 8)), f"{N}")
    assert_rejected(fn, "d", dict(kwargs, d=bf16(d.shape[0] + 1, *d.shape[1:])))


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_d_that_is_not_n_major(fn):
    kwargs = MAKE[fn]()
    d = kwargs["d"]
    assert_rejected(fn, "d", dict(kwargs, d=d.mT.contiguous().mT), "N-major")


# --- TMA rules (API.md 1.2): 16-byte aligned bases and strides -------------------------------------------------

@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
@pytest.mark.parametrize("operand", ["a[0]", "b[0]", "d"])
def test_rejects_misaligned_data_pointer(fn, operand):
    kwargs = MAKE[fn]()
    if operand == "d":
        kwargs["d"] = misaligned(kwargs["d"])
    else:
        name = operand[0]
        kwargs[name] = (misaligned(kwargs[name][0]), kwargs[name][1])
    assert_rejected(fn, operand, kwargs, "16-byte aligned")


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_rows_that_are_not_16_byte_multiples(fn):
    kwargs = MAKE[fn]()
    k = K - 8   # K-major FP8 rows of 312 bytes
    sk = ceil_div(k, 128)
    a, sfa = kwargs["a"]
    a_short = fp8(*a.shape[:-1], k)
    b_short = (fp8(G, N, k), scales(G, SN, sk))
    assert_rejected(fn, "a[0]", dict(kwargs, a=(a_short, sfa[..., :sk]), b=b_short), "multiple of 16 bytes")
    n = N - 4   # bf16 D rows of 280 bytes
    d = kwargs["d"]
    assert_rejected(fn, "d", dict(kwargs, b=(fp8(G, n, K), scales(G, ceil_div(n, 128), SK)),
                                  d=bf16(*d.shape[:-1], n)), "multiple of 16 bytes")


def test_index_layout_needs_m_a_multiple_of_the_mk_alignment():
    kwargs = contiguous_args(m=200)
    assert_rejected(CONTIGUOUS, "a[0]", kwargs, "get_mk_alignment_for_contiguous_layout() = 128")
    assert_reaches_dispatch(CONTIGUOUS, dict(contiguous_args(m=200), grouped_layout=torch.tensor([100, 200],
                            dtype=torch.int32), use_psum_layout=True))


# --- group tensors and scalars --------------------------------------------------------------------------------

@pytest.mark.parametrize("psum", [False, True])
def test_rejects_bad_grouped_layout(psum):
    kwargs = contiguous_args(psum)
    layout = kwargs["grouped_layout"]
    assert_rejected(CONTIGUOUS, "grouped_layout", dict(kwargs, grouped_layout=layout.long()), "torch.int32")
    assert_rejected(CONTIGUOUS, "grouped_layout", dict(kwargs, grouped_layout=layout.tolist()), "a torch.Tensor")
    assert_rejected(CONTIGUOUS, "grouped_layout", dict(kwargs, grouped_layout=layout[None]), "1-D")
    strided = torch.zeros(2 * layout.numel(), dtype=torch.int32)[::2]
    assert_rejected(CONTIGUOUS, "grouped_layout", dict(kwargs, grouped_layout=strided), "contiguous")
    expected = f"of {G} elements" if psum else f"of {M} elements"
    assert_rejected(CONTIGUOUS, "grouped_layout", dict(kwargs, grouped_layout=layout[1:]), expected)


def test_rejects_expected_m_for_psum_layout_misuse():
    assert_rejected(CONTIGUOUS, "expected_m_for_psum_layout", dict(contiguous_args(), expected_m_for_psum_layout=64),
                    "None without use_psum_layout")
    for bad in (-1, 1.5, True, "64"):
        assert_rejected(CONTIGUOUS, "expected_m_for_psum_layout",
                        dict(contiguous_args(psum=True), expected_m_for_psum_layout=bad), "non-negative int")


def test_rejects_bad_masked_m():
    kwargs = masked_args()
    masked_m = kwargs["masked_m"]
    assert_rejected(MASKED, "masked_m", dict(kwargs, masked_m=masked_m.long()), "torch.int32")
    assert_rejected(MASKED, "masked_m", dict(kwargs, masked_m=masked_m[:1]), f"of {G} elements")
    assert_rejected(MASKED, "masked_m", dict(kwargs, masked_m=torch.zeros(2 * G, dtype=torch.int32)[::2]),
                    "contiguous")
    assert_rejected(MASKED, "masked_m", dict(kwargs, masked_m=[MAX_M, 5]), "a torch.Tensor")


@pytest.mark.parametrize("bad,fragment", [(0, "positive"), (-3, "positive"), (16.0, "an int"), (True, "an int"),
                                          (None, "an int")])
def test_rejects_expected_m_that_is_not_a_positive_int(bad, fragment):
    assert_rejected(MASKED, "expected_m", dict(masked_args(), expected_m=bad), fragment)


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_tensors_on_another_device(fn):
    kwargs = MAKE[fn]()
    index = "grouped_layout" if fn == CONTIGUOUS else "masked_m"
    assert_rejected(fn, index, dict(kwargs, **{index: kwargs[index].to("meta")}), "on cpu like d")
    a, sfa = kwargs["a"]
    assert_rejected(fn, "a[0]", dict(kwargs, a=(a.to("meta"), sfa)), "on cpu like d")
    assert_rejected(fn, SFA, dict(kwargs, a=(a, sfa.to("meta"))), "on cpu like d")
    b, sfb = kwargs["b"]
    assert_rejected(fn, SFB, dict(kwargs, b=(b, sfb.to("meta"))), "on cpu like d")


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_compiled_dims_and_flag_of_the_wrong_type(fn):
    assert_rejected(fn, "compiled_dims", dict(MAKE[fn](), compiled_dims=None), "a str")
    assert_rejected(fn, "disable_ue8m0_cast", dict(MAKE[fn](), disable_ue8m0_cast="yes"), "a bool")


# --- recipes (API.md 1.5) --------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
@pytest.mark.parametrize("extra,argument,fragment", [
    ({"recipe": (1, 1, 128)}, "recipe", "(1, 128, 128) on SM90"),
    ({"recipe": (1, 128, 32)}, "recipe", "(1, 128, 128) on SM90"),
    ({"recipe": (1, 128)}, "recipe", "a tuple of 3 ints"),
    ({"recipe": "1,128,128"}, "recipe", "a tuple of 3 ints"),
    ({"recipe_a": (1, 128)}, "recipe_b", "given together with recipe_a"),
    ({"recipe_b": (128, 128)}, "recipe_a", "given together with recipe_b"),
    ({"recipe": (1, 128, 128), "recipe_a": (1, 128), "recipe_b": (128, 128)}, "recipe", "None when recipe_a"),
    ({"recipe_a": (1, 128), "recipe_b": (1, 128)}, "recipe_b", "(128, 128) on SM90"),
    ({"recipe_a": (1, 32), "recipe_b": (128, 128)}, "recipe_a", "(1, 128) on SM90"),
])
def test_rejects_recipes_the_sm90_grouped_kernels_do_not_take(fn, extra, argument, fragment):
    assert_rejected(fn, argument, dict(MAKE[fn](), **extra), fragment)


# --- scale factors (API.md 2.2, 2.4) ----------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
@pytest.mark.parametrize("operand,argument", [("a", SFA), ("b", SFB)])
def test_rejects_packed_ue8m0_int32_sf_instead_of_fp32_never_truncating(fn, operand, argument):
    """An int32 SF (SM100's packed UE8M0, 4 exponents per int) is named as such, with or without an
    explicit recipe, even when its shape happens to match the fp32 one."""
    kwargs = MAKE[fn]()
    data, sf = kwargs[operand]
    packed_like = torch.zeros(*sf.shape[:-1], ceil_div(sf.shape[-1], 4), dtype=torch.int32)
    same_shape = torch.zeros(sf.shape, dtype=torch.int32)
    for bad in (packed_like, same_shape):
        changed = dict(kwargs, **{operand: (data, bad)})
        assert_rejected(fn, argument, changed, "torch.float32 with the default recipe on SM90", "UE8M0")
        assert_rejected(fn, argument, dict(changed, recipe=(1, 128, 128)), "torch.float32 on SM90", "UE8M0")


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, torch.uint8, torch.float8_e8m0fnu])
def test_rejects_sf_of_another_dtype(fn, dtype):
    kwargs = MAKE[fn]()
    a, sfa = kwargs["a"]
    bad = torch.ones(sfa.shape).to(dtype)
    assert_rejected(fn, SFA, dict(kwargs, a=(a, bad), recipe=(1, 128, 128)), "torch.float32")


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_sf_of_the_wrong_shape_or_rank(fn):
    kwargs = MAKE[fn]()
    (a, sfa), (b, sfb) = kwargs["a"], kwargs["b"]
    assert_rejected(fn, SFA, dict(kwargs, a=(a, sfa[..., :-1])), "ceil(K / 128)")
    assert_rejected(fn, SFA, dict(kwargs, a=(a, sfa[None])), "-D tensor")
    assert_rejected(fn, SFA, dict(kwargs, a=(a, sfa.tolist())), "a torch.Tensor")
    assert_rejected(fn, SFB, dict(kwargs, b=(b, sfb[0])), "a 3-D tensor")
    assert_rejected(fn, SFB, dict(kwargs, b=(b, scales(G, N, SK))), "(G, ceil(N / 128), ceil(K / 128))")
    assert_rejected(fn, SFB, dict(kwargs, b=(b, scales(G + 1, SN, SK))), f"G={G}")


def test_rejects_contiguous_sfa_with_group_dim():
    kwargs = contiguous_args()
    a, sfa = kwargs["a"]
    assert_rejected(CONTIGUOUS, SFA, dict(kwargs, a=(a, sfa.view(G, M // G, SK))), "a 2-D tensor")


@pytest.mark.parametrize("fn", [CONTIGUOUS, MASKED])
def test_rejects_sfb_that_is_neither_contiguous_nor_transpose_contiguous(fn):
    kwargs = MAKE[fn]()
    b, sfb = kwargs["b"]
    strided = scales(G, SN, SK + 1)[..., :SK]
    assert_rejected(fn, SFB, dict(kwargs, b=(b, strided)), "transpose-contiguous")


def test_nn_sf_messages_say_which_view_is_named():
    kwargs = nn_args()
    b, sfb = kwargs["b"]
    message = assert_rejected(NN, SFB, dict(kwargs, b=(b, sfb[:, :, :1])), "ceil(N / 128)")
    assert "reads their .mT" in message


# --- the warm path: grouped.py's signature cache, meta tensors playing CUDA ones ----------------------------------

@pytest.fixture
def fake_cuda(monkeypatch, kernel_runs):
    monkeypatch.setattr(torch.Tensor, "is_cuda", torch._C.TensorBase.__dict__["is_meta"])
    return kernel_runs


def meta(t):
    return t.to("meta")


def meta_contiguous_args():
    kwargs = contiguous_args()
    a, sfa = kwargs["a"]
    b, sfb = kwargs["b"]
    # sfa already in the kernel's layout: the meta "device" has no copy kernel.
    sfa = dg_triton.get_mn_major_tma_aligned_tensor(sfa)
    return dict(kwargs, a=(meta(a), torch.empty_strided(sfa.shape, sfa.stride(), device="meta")),
                b=(meta(b), meta(sfb)), d=meta(kwargs["d"]), grouped_layout=meta(kwargs["grouped_layout"]))


def count_full_checks(monkeypatch):
    calls = []
    for name in ("_check_contiguous", "_check_masked"):
        check = getattr(grouped_fp8, name)
        monkeypatch.setattr(grouped_fp8, name, lambda *args, check=check: calls.append(1) or check(*args))
    return calls


def test_warm_call_skips_the_full_checks_but_not_the_pointer_alignment(fake_cuda, monkeypatch):
    checks = count_full_checks(monkeypatch)
    kwargs = meta_contiguous_args()
    for _ in range(3):
        call(CONTIGUOUS, **kwargs)
    assert len(checks) == 1 and len(fake_cuda) == 3
    a, sfa = kwargs["a"]
    assert_rejected(CONTIGUOUS, "a[0]", dict(kwargs, a=(misaligned(a), sfa)), "16-byte aligned")
    assert len(checks) == 2 and len(fake_cuda) == 3


def test_warm_signature_differs_by_sf_layout_and_recipe(fake_cuda, monkeypatch):
    checks = count_full_checks(monkeypatch)
    kwargs = meta_contiguous_args()
    call(CONTIGUOUS, **kwargs)
    b, sfb = kwargs["b"]
    bad_sfb = torch.empty(G, SN, SK, dtype=torch.int32, device="meta")
    assert_rejected(CONTIGUOUS, SFB, dict(kwargs, b=(b, bad_sfb)), "torch.float32")
    assert_rejected(CONTIGUOUS, "recipe", dict(kwargs, recipe=(1, 1, 128)), "(1, 128, 128) on SM90")
    mk_layout.set_mk_alignment_for_contiguous_layout(512)
    assert_rejected(CONTIGUOUS, "a[0]", kwargs, "= 512")
    assert len(checks) == 4 and len(fake_cuda) == 1


# --- the FP8 references (dg_triton.reference_grouped) ----------------------------------------------------------

def test_fp8_contiguous_reference_is_the_dense_fp8_reference_per_expert_with_bf16_row_rules():
    from dg_triton import reference_grouped
    from dg_triton.reference_fp8 import fp8_gemm_reference
    kwargs = contiguous_args()
    (a, sfa), (b, sfb), layout = kwargs["a"], kwargs["b"], kwargs["grouped_layout"]
    d = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    out = reference_grouped.m_grouped_fp8_contiguous_reference((a, sfa), (b, sfb), d, layout)
    for g in range(G):
        rows = layout == g
        expected = fp8_gemm_reference((a[rows], sfa[rows]), (b[g], sfb[g]), d[rows])
        assert torch.equal(out[rows], expected)
    assert (out[layout < 0] == 0).all()
    psum = torch.tensor([100, 200], dtype=torch.int32)
    out = reference_grouped.m_grouped_fp8_contiguous_reference((a, sfa), (b, sfb), d, psum, True, 128,
                                                               ensure_zero_padding=False)
    assert torch.equal(out[128:200], fp8_gemm_reference((a[128:200], sfa[128:200]), (b[1], sfb[1]), d[128:200]))
    assert torch.isnan(out[100:128].float()).all() and torch.isnan(out[200:].float()).all()


def test_fp8_masked_reference_writes_only_the_first_masked_m_rows():
    from dg_triton import reference_grouped
    from dg_triton.reference_fp8 import fp8_gemm_reference
    kwargs = masked_args()
    (a, sfa), (b, sfb), masked_m = kwargs["a"], kwargs["b"], kwargs["masked_m"]
    d = torch.full((G, MAX_M, N), float("nan"), dtype=torch.bfloat16)
    out = reference_grouped.m_grouped_fp8_masked_reference((a, sfa), (b, sfb), d, masked_m)
    for g, rows in enumerate(masked_m.tolist()):
        expected = fp8_gemm_reference((a[g, :rows], sfa[g, :rows]), (b[g], sfb[g]), d[g, :rows])
        assert torch.equal(out[g, :rows], expected)
        assert torch.isnan(out[g, rows:].float()).all()


@pytest.mark.parametrize("argument, value", [("use_psum_layout", "no"), ("ensure_zero_padding", None)])
def test_contiguous_rejects_flags_that_are_not_bools(argument, value):
    # bool("no") is True: a string flag must not silently switch the psum layout on.
    assert_rejected(CONTIGUOUS, argument, {**contiguous_args(), argument: value}, "a bool")
