"""Argument checks of m_grouped_bf16_gemm_nt_{contiguous,masked} (API.md 1.2, 3.4, 3.5, 4), on CPU
tensors. Every rejection is a DGArgumentError whose message reads "{fn}: {arg} must be {expected},
got {actual}". A call that passes the checks reaches dispatch, which has no CPU kernel without the
interpreter and raises NotImplementedError; M == 0 never reaches a kernel and completes.
"""
import re

import pytest
import torch

import dg_triton
from dg_triton.errors import DGArgumentError

G, M, N, K, MAX_M = 2, 64, 48, 64, 32
CONTIGUOUS, MASKED = "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked"


@pytest.fixture(autouse=True)
def _no_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("DG_BACKEND", raising=False)


def bf16(*shape):
    return torch.randn(*shape).to(torch.bfloat16)


def contiguous_args(psum=False, m=M):
    layout = torch.tensor([M // 2, M], dtype=torch.int32) if psum else torch.zeros(m, dtype=torch.int32)
    return {"a": bf16(m, K), "b": bf16(G, N, K), "d": bf16(m, N), "grouped_layout": layout}


def masked_args():
    return {"a": bf16(G, MAX_M, K), "b": bf16(G, N, K), "d": bf16(G, MAX_M, N),
            "masked_m": torch.full((G,), MAX_M // 2, dtype=torch.int32), "expected_m": 16}


def assert_rejected(fn, arg, **kwargs):
    with pytest.raises(DGArgumentError) as excinfo:
        getattr(dg_triton, fn)(**kwargs)
    message = str(excinfo.value)
    head, must_be, _ = message.partition(" must be ")
    assert must_be and head.startswith(f"{fn}: "), message
    assert re.fullmatch(rf"{fn}: {arg}", head), f"expected {arg!r} blamed: {message}"


def assert_reaches_dispatch(fn, **kwargs):
    with pytest.raises(NotImplementedError) as excinfo:
        getattr(dg_triton, fn)(**kwargs)
    assert not isinstance(excinfo.value, DGArgumentError), str(excinfo.value)
    assert fn in str(excinfo.value)


# --- accepted calls -----------------------------------------------------------------------------

@pytest.mark.parametrize("psum", [False, True])
def test_contiguous_valid_call_reaches_dispatch(psum):
    kwargs = contiguous_args(psum)
    if psum:
        kwargs.update(use_psum_layout=True, expected_m_for_psum_layout=32, ensure_zero_padding=False)
    assert_reaches_dispatch(CONTIGUOUS, **kwargs)


def test_contiguous_accepts_n_major_b():
    kwargs = contiguous_args()
    kwargs["b"] = bf16(G, K, N).transpose(1, 2)
    assert_reaches_dispatch(CONTIGUOUS, **kwargs)


def test_masked_valid_call_reaches_dispatch():
    assert_reaches_dispatch(MASKED, **masked_args())


@pytest.mark.parametrize("psum", [False, True])
def test_contiguous_with_no_rows_is_a_no_op(psum):
    kwargs = contiguous_args(psum, m=0)
    getattr(dg_triton, CONTIGUOUS)(**kwargs, use_psum_layout=psum)


# --- rejections shared by both -------------------------------------------------------------------

CASES = [(CONTIGUOUS, contiguous_args), (MASKED, masked_args)]


@pytest.mark.parametrize("fn,make", CASES)
@pytest.mark.parametrize("arg", ["a", "b", "d"])
def test_rejects_argument_that_is_not_a_tensor(fn, make, arg):
    kwargs = make()
    kwargs[arg] = kwargs[arg].tolist()
    assert_rejected(fn, arg, **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
@pytest.mark.parametrize("arg", ["a", "b", "d"])
def test_rejects_wrong_rank(fn, make, arg):
    kwargs = make()
    kwargs[arg] = kwargs[arg].unsqueeze(0)
    assert_rejected(fn, arg, **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
@pytest.mark.parametrize("arg", ["a", "b", "d"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float8_e4m3fn])
def test_rejects_dtype_that_is_not_bf16(fn, make, arg, dtype):
    kwargs = make()
    kwargs[arg] = kwargs[arg].to(dtype)
    assert_rejected(fn, arg, **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
def test_rejects_k_mismatch(fn, make):
    kwargs = make()
    kwargs["b"] = bf16(G, N, K + 8)
    assert_rejected(fn, "b", **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
def test_rejects_d_of_wrong_n(fn, make):
    kwargs = make()
    kwargs["d"] = bf16(*kwargs["d"].shape[:-1], N + 8)
    assert_rejected(fn, "d", **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
@pytest.mark.parametrize("dim", ["g", "n", "k"])
def test_rejects_empty_b_dims(fn, make, dim):
    kwargs = make()
    if dim == "k":
        kwargs["a"] = bf16(*kwargs["a"].shape[:-1], 0)
        kwargs["b"] = bf16(G, N, 0)
    elif dim == "n":
        kwargs["b"] = bf16(G, 0, K)
        kwargs["d"] = bf16(*kwargs["d"].shape[:-1], 0)
    elif fn == CONTIGUOUS:
        kwargs["b"] = bf16(0, N, K)
    else:
        kwargs.update(a=bf16(0, MAX_M, K), b=bf16(0, N, K), d=bf16(0, MAX_M, N),
                      masked_m=torch.zeros(0, dtype=torch.int32))
    assert_rejected(fn, "b", **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
def test_rejects_a_that_is_not_k_major(fn, make):
    kwargs = make()
    a = kwargs["a"]
    kwargs["a"] = a.transpose(-1, -2).contiguous().transpose(-1, -2)
    if fn == MASKED:  # keep groups dense, make each group M-major
        kwargs["a"] = bf16(G, K, MAX_M).transpose(1, 2)
    assert_rejected(fn, "a", **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
def test_rejects_d_that_is_not_n_major(fn, make):
    kwargs = make()
    kwargs["d"] = kwargs["d"].transpose(-1, -2).contiguous().transpose(-1, -2)
    assert_rejected(fn, "d", **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
def test_rejects_b_with_loose_group_stride(fn, make):
    kwargs = make()
    kwargs["b"] = bf16(G, N + 8, K)[:, :N]
    assert_rejected(fn, "b", **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
def test_rejects_b_with_no_unit_stride(fn, make):
    kwargs = make()
    kwargs["b"] = bf16(G, N, 2 * K)[:, :, ::2]
    assert_rejected(fn, "b", **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
@pytest.mark.parametrize("arg", ["a", "d"])
def test_rejects_misaligned_data_pointer(fn, make, arg):
    kwargs = make()
    t = kwargs[arg]
    kwargs[arg] = torch.randn(t.numel() + 1).to(torch.bfloat16)[1:].view(t.shape)
    assert_rejected(fn, arg, **kwargs)


@pytest.mark.parametrize("fn,make", CASES)
@pytest.mark.parametrize("arg", ["b", "d"])
def test_rejects_tensors_on_different_devices(fn, make, arg):
    kwargs = make()
    kwargs[arg] = kwargs[arg].to("meta")
    blamed = "a" if arg == "d" else arg  # with d moved, a is the first to disagree with it
    assert_rejected(fn, blamed, **kwargs)


# --- grouped_layout / masked_m -------------------------------------------------------------------

INDEX_ARGS = [(CONTIGUOUS, contiguous_args, "grouped_layout"), (MASKED, masked_args, "masked_m")]


@pytest.mark.parametrize("fn,make,arg", INDEX_ARGS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_rejects_index_tensor_that_is_not_int32(fn, make, arg, dtype):
    kwargs = make()
    kwargs[arg] = kwargs[arg].to(dtype)
    assert_rejected(fn, arg, **kwargs)


@pytest.mark.parametrize("fn,make,arg", INDEX_ARGS)
def test_rejects_index_tensor_that_is_not_contiguous(fn, make, arg):
    kwargs = make()
    kwargs[arg] = torch.zeros(2 * kwargs[arg].numel(), dtype=torch.int32)[::2]
    assert_rejected(fn, arg, **kwargs)


@pytest.mark.parametrize("fn,make,arg", INDEX_ARGS)
def test_rejects_index_tensor_of_wrong_size(fn, make, arg):
    kwargs = make()
    kwargs[arg] = torch.zeros(kwargs[arg].numel() + 1, dtype=torch.int32)
    assert_rejected(fn, arg, **kwargs)


@pytest.mark.parametrize("fn,make,arg", INDEX_ARGS)
def test_rejects_index_tensor_on_another_device(fn, make, arg):
    kwargs = make()
    kwargs[arg] = kwargs[arg].to("meta")
    assert_rejected(fn, arg, **kwargs)


@pytest.mark.parametrize("fn,make,arg", INDEX_ARGS)
def test_rejects_index_tensor_that_is_not_a_tensor(fn, make, arg):
    kwargs = make()
    kwargs[arg] = kwargs[arg].tolist()
    assert_rejected(fn, arg, **kwargs)


def test_contiguous_rejects_psum_of_wrong_size():
    kwargs = contiguous_args()  # an [M] index tensor where psum wants [G]
    assert_rejected(CONTIGUOUS, "grouped_layout", **kwargs, use_psum_layout=True)


def test_contiguous_rejects_expected_m_without_psum():
    assert_rejected(CONTIGUOUS, "expected_m_for_psum_layout", **contiguous_args(), expected_m_for_psum_layout=32)


@pytest.mark.parametrize("value", [-1, 1.5, "32", True])
def test_contiguous_rejects_bad_expected_m_for_psum_layout(value):
    assert_rejected(CONTIGUOUS, "expected_m_for_psum_layout", **contiguous_args(True), use_psum_layout=True,
                    expected_m_for_psum_layout=value)


def test_contiguous_rejects_d_of_wrong_m():
    kwargs = contiguous_args()
    kwargs["d"] = bf16(M + 8, N)
    assert_rejected(CONTIGUOUS, "d", **kwargs)


def test_contiguous_checks_arguments_before_the_empty_shortcut():
    kwargs = contiguous_args(m=0)
    kwargs["d"] = kwargs["d"].float()
    assert_rejected(CONTIGUOUS, "d", **kwargs)


@pytest.mark.parametrize("value", [0, -4, 2.0, None, True])
def test_masked_rejects_expected_m_that_is_not_a_positive_int(value):
    kwargs = masked_args()
    kwargs["expected_m"] = value
    assert_rejected(MASKED, "expected_m", **kwargs)


def test_masked_rejects_zero_max_m():
    kwargs = masked_args()
    kwargs["a"], kwargs["d"] = bf16(G, 0, K), bf16(G, 0, N)
    assert_rejected(MASKED, "a", **kwargs)


@pytest.mark.parametrize("arg", ["b", "d", "masked_m"])
def test_masked_rejects_group_count_mismatch(arg):
    kwargs = masked_args()
    kwargs[arg] = {"b": bf16(G + 1, N, K), "d": bf16(G + 1, MAX_M, N),
                   "masked_m": torch.zeros(G + 1, dtype=torch.int32)}[arg]
    assert_rejected(MASKED, arg, **kwargs)


def test_masked_rejects_d_of_wrong_max_m():
    kwargs = masked_args()
    kwargs["d"] = bf16(G, MAX_M + 8, N)
    assert_rejected(MASKED, "d", **kwargs)


def test_masked_rejects_b_that_is_not_k_major():
    kwargs = masked_args()
    kwargs["b"] = bf16(G, K, N).transpose(1, 2)
    assert_rejected(MASKED, "b", **kwargs)


def test_masked_rejects_a_with_loose_group_stride():
    kwargs = masked_args()
    kwargs["a"] = bf16(G, MAX_M + 8, K)[:, :MAX_M]
    assert_rejected(MASKED, "a", **kwargs)


@pytest.mark.parametrize("compiled_dims", [5, None, ["n"]])
@pytest.mark.parametrize("fn, make", [(CONTIGUOUS, contiguous_args), (MASKED, masked_args),
                                      ("m_grouped_bf16_gemm_nn_contiguous", contiguous_args)])
def test_rejects_compiled_dims_that_is_not_a_str(fn, make, compiled_dims):
    kwargs = make()
    if fn.endswith("nn_contiguous"):
        kwargs["b"] = kwargs["b"].transpose(1, 2)
    assert_rejected(fn, "compiled_dims", **kwargs, compiled_dims=compiled_dims)


@pytest.mark.parametrize("argument, value", [("use_psum_layout", "no"), ("use_psum_layout", 2),
                                             ("ensure_zero_padding", None), ("ensure_zero_padding", "x")])
def test_contiguous_rejects_flags_that_are_not_bools(argument, value):
    # bool("no") is True: a string flag must not silently switch the psum layout on.
    assert_rejected(CONTIGUOUS, argument, **contiguous_args(), **{argument: value})
