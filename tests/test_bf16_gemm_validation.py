"""Argument checks of bf16_gemm_{nt,nn,tn,tt} (API.md 1.1-1.3, 3.2, 4), on CPU tensors.

Every rejection is a DGArgumentError whose message reads "{fn}: {arg} must be {expected}, got
{actual}". A call that passes the checks on CPU tensors reaches dispatch, which has no CPU kernel
and raises NotImplementedError; empty problems (M, N or K zero) never reach a kernel and complete.
"""
import re

import pytest
import torch

from dg_triton.errors import DGArgumentError

ALIASES = ("nt", "nn", "tn", "tt")
M, N, K = 32, 48, 64  # distinct, so a swapped or mismatched dim cannot pass by accident
C_MODES = ("none", "distinct", "in_place")


def gemm(alias):
    # Looked up per test: dg_triton may not export the aliases yet, and collection must not fail.
    import dg_triton
    return getattr(dg_triton, f"bf16_gemm_{alias}")


def matrix(rows, cols, dtype=torch.bfloat16, row_stride=None, misaligned=False):
    """A [rows, cols] tensor with stride (row_stride, 1). ``misaligned`` shifts its data pointer by
    one element, off the 16-byte alignment TMA needs."""
    if row_stride is None and not misaligned:
        return torch.randn(rows, cols).to(dtype)
    row_stride = cols if row_stride is None else row_stride
    offset = 1 if misaligned else 0
    storage = torch.randn(offset + max(rows - 1, 0) * row_stride + cols).to(dtype)
    return storage.as_strided((rows, cols), (row_stride, 1), offset)


def physical_shapes(alias, m, n, k):
    """The shapes the alias takes a and b in (API.md 1.1 table)."""
    a_shape = (m, k) if alias[0] == "n" else (k, m)
    b_shape = (n, k) if alias[1] == "t" else (k, n)
    return a_shape, b_shape


def problem(alias, m=M, n=N, k=K, d_dtype=torch.bfloat16, row_strides=None, misaligned=()):
    """Physical (a, b, d) for the alias; ``row_strides`` maps an argument name to its row stride."""
    row_strides = row_strides or {}
    a_shape, b_shape = physical_shapes(alias, m, n, k)
    a = matrix(*a_shape, row_stride=row_strides.get("a"), misaligned="a" in misaligned)
    b = matrix(*b_shape, row_stride=row_strides.get("b"), misaligned="b" in misaligned)
    d = matrix(m, n, d_dtype, row_stride=row_strides.get("d"), misaligned="d" in misaligned)
    return a, b, d


def with_c(d, c_mode):
    if c_mode == "none":
        return None
    if c_mode == "in_place":
        return d
    return torch.randn(d.shape).to(d.dtype)


def call(alias, a, b, d, c=None, **kwargs):
    gemm(alias)(a, b, d, c, **kwargs)


def assert_rejected(alias, arg, a, b, d, c=None, args=None):
    """The call raises DGArgumentError naming the function and, before "must be", the argument
    (or one of ``args`` where the check may blame either side)."""
    fn = f"bf16_gemm_{alias}"
    with pytest.raises(DGArgumentError) as excinfo:
        call(alias, a, b, d, c)
    message = str(excinfo.value)
    assert fn in message, message
    head, must_be, _ = message.partition("must be")
    assert must_be, message
    subject = head.split(fn, 1)[-1]
    named = [x for x in (args or (arg,)) if re.search(rf"(?<!\w){x}(?!\w)", subject)]
    assert named, f"expected {args or arg!r} named before 'must be': {message}"


def assert_reaches_dispatch(alias, a, b, d, c=None, **kwargs):
    """Validation passes; the CPU has no kernel, so dispatch raises NotImplementedError."""
    with pytest.raises(NotImplementedError) as excinfo:
        call(alias, a, b, d, c, **kwargs)
    assert not isinstance(excinfo.value, DGArgumentError), str(excinfo.value)
    message = str(excinfo.value)
    assert f"bf16_gemm_{alias}" in message and "kernel" in message.lower(), message


def replace(alias, arg, value, d_dtype=torch.bfloat16):
    """(a, b, d, c) of a valid problem with ``arg`` replaced by ``value(original)``. c is a distinct
    tensor like d when it is the argument under test, else None, so no other check can fire first."""
    a, b, d = problem(alias, d_dtype=d_dtype)
    tensors = {"a": a, "b": b, "d": d, "c": with_c(d, "distinct" if arg == "c" else "none")}
    tensors[arg] = value(tensors[arg])
    return tensors["a"], tensors["b"], tensors["d"], tensors["c"]


# --- accepted calls --------------------------------------------------------------------------------

@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("c_mode", C_MODES)
def test_bf16_gemm_valid_call_passes_validation_and_has_no_cpu_kernel(alias, d_dtype, c_mode):
    a, b, d = problem(alias, d_dtype=d_dtype)
    assert_reaches_dispatch(alias, a, b, d, with_c(d, c_mode))


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("compiled_dims", ["", "mnk", "nk", "mn"])
def test_bf16_gemm_accepts_any_compiled_dims(alias, compiled_dims):
    a, b, d = problem(alias)
    assert_reaches_dispatch(alias, a, b, d, compiled_dims=compiled_dims)


@pytest.mark.parametrize("alias", ALIASES)
def test_bf16_gemm_accepts_padded_row_strides_that_are_16_byte_multiples(alias):
    a_shape, b_shape = physical_shapes(alias, M, N, K)
    strides = {"a": a_shape[1] + 8, "b": b_shape[1] + 8, "d": N + 8}
    a, b, d = problem(alias, row_strides=strides)
    c = matrix(M, N, row_stride=N + 16)
    assert_reaches_dispatch(alias, a, b, d, c)


@pytest.mark.parametrize("alias", ALIASES)
def test_bf16_gemm_accepts_m_of_one_whatever_its_row_stride(alias):
    # A size-1 dim has no stride TMA uses, so the 16-byte rule does not apply to it (decode, M=1).
    a_shape, _ = physical_shapes(alias, 1, N, K)
    a = matrix(1, K, row_stride=K + 1) if alias[0] == "n" else matrix(K, 1)  # [K, 1]: strides (1, 1)
    _, b, _ = problem(alias, m=1)
    d = matrix(1, N, row_stride=N + 1)
    assert a.shape == a_shape
    assert_reaches_dispatch(alias, a, b, d)


@pytest.mark.parametrize("alias", ("nt", "tt"))
def test_bf16_gemm_accepts_fp32_output_with_n_a_multiple_of_4(alias):
    # An fp32 row of 4 elements is 16 bytes: N=12 is legal for an fp32 D, not for a bf16 one.
    a, b, d = problem(alias, m=16, n=12, k=16, d_dtype=torch.float32)
    assert_reaches_dispatch(alias, a, b, d)


# --- rejections --------------------------------------------------------------------------------

@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("arg", ["a", "b", "d", "c"])
def test_bf16_gemm_rejects_argument_that_is_not_a_tensor(alias, arg):
    a, b, d, c = replace(alias, arg, lambda t: t.tolist())
    assert_rejected(alias, arg, a, b, d, c)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("arg", ["a", "b", "d", "c"])
@pytest.mark.parametrize("reshape", ["1d", "3d"])
def test_bf16_gemm_rejects_tensor_that_is_not_2d(alias, arg, reshape):
    a, b, d, c = replace(alias, arg, (lambda t: t.flatten()) if reshape == "1d" else (lambda t: t.unsqueeze(0)))
    assert_rejected(alias, arg, a, b, d, c)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("arg", ["a", "b"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float8_e4m3fn])
def test_bf16_gemm_rejects_operand_that_is_not_bf16(alias, arg, dtype):
    a, b, d, c = replace(alias, arg, lambda t: t.to(dtype))
    assert_rejected(alias, arg, a, b, d, c=None)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.int32])
def test_bf16_gemm_rejects_output_that_is_not_bf16_or_fp32(alias, dtype):
    a, b, d = problem(alias)
    assert_rejected(alias, "d", a, b, d.to(dtype))


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("d_dtype,c_dtype", [(torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)])
def test_bf16_gemm_rejects_c_whose_dtype_differs_from_d(alias, d_dtype, c_dtype):
    a, b, d = problem(alias, d_dtype=d_dtype)
    assert_rejected(alias, "c", a, b, d, torch.randn(d.shape).to(c_dtype))


@pytest.mark.parametrize("alias", ALIASES)
def test_bf16_gemm_rejects_k_that_differs_between_a_and_b(alias):
    a, _, d = problem(alias)
    _, b, _ = problem(alias, k=K + 8)
    # Either side may be blamed: neither K is more right than the other.
    assert_rejected(alias, "b", a, b, d, args=("a", "b"))


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("dim", ["m", "n"])
def test_bf16_gemm_rejects_d_whose_shape_differs_from_the_problem(alias, dim):
    a, b, _ = problem(alias)
    d = matrix(M + 8, N) if dim == "m" else matrix(M, N + 8)
    assert_rejected(alias, "d", a, b, d)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("c_shape", [(M + 8, N), (M, N + 8), (N, M)])
def test_bf16_gemm_rejects_c_whose_shape_differs_from_d(alias, c_shape):
    a, b, d = problem(alias)
    assert_rejected(alias, "c", a, b, d, matrix(*c_shape))


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("arg", ["a", "b"])
def test_bf16_gemm_rejects_operand_with_no_unit_stride_in_last_two_dims(alias, arg):
    a, b, d, _ = replace(alias, arg, lambda t: matrix(t.shape[0], 2 * t.shape[1])[:, ::2])
    assert (arg == "a" and 1 not in a.stride()) or (arg == "b" and 1 not in b.stride())
    assert_rejected(alias, arg, a, b, d)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("arg", ["d", "c"])
def test_bf16_gemm_rejects_output_that_is_not_n_major(alias, arg):
    a, b, d, c = replace(alias, arg, lambda t: matrix(N, M, t.dtype).T)  # [M, N], stride (1, M)
    assert_rejected(alias, arg, a, b, d, c)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("arg,d_dtype", [("a", torch.bfloat16), ("b", torch.bfloat16),
                                         ("d", torch.bfloat16), ("d", torch.float32)])
def test_bf16_gemm_rejects_data_pointer_not_16_byte_aligned(alias, arg, d_dtype):
    a, b, d = problem(alias, d_dtype=d_dtype, misaligned=(arg,))
    assert {"a": a, "b": b, "d": d}[arg].data_ptr() % 16 != 0
    assert_rejected(alias, arg, a, b, d)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("arg,d_dtype", [("a", torch.bfloat16), ("b", torch.bfloat16),
                                         ("d", torch.bfloat16), ("d", torch.float32)])
def test_bf16_gemm_rejects_row_stride_not_a_multiple_of_16_bytes(alias, arg, d_dtype):
    # A padded row stride that is legal in every other respect (larger than the row).
    a_shape, b_shape = physical_shapes(alias, M, N, K)
    cols = {"a": a_shape[1], "b": b_shape[1], "d": N}[arg]
    a, b, d = problem(alias, d_dtype=d_dtype, row_strides={arg: cols + 1})
    assert_rejected(alias, arg, a, b, d)


@pytest.mark.parametrize("alias", ("nt",))
def test_bf16_gemm_rejects_k_major_operands_with_k_not_a_multiple_of_8(alias):
    # K=12 bf16 is a 24-byte row stride in both a and b; either may be reported first.
    a, b, d = problem(alias, m=16, n=16, k=12)
    assert_rejected(alias, "a", a, b, d, args=("a", "b"))


@pytest.mark.parametrize("alias", ("nn", "tn"))
def test_bf16_gemm_rejects_mn_major_b_with_n_not_a_multiple_of_8(alias):
    # b is [K, N]: N=12 bf16 is a 24-byte row stride. D is fp32 so that only b is at fault.
    a, b, d = problem(alias, m=16, n=12, k=16, d_dtype=torch.float32)
    assert_rejected(alias, "b", a, b, d)


@pytest.mark.parametrize("alias", ("tn", "tt"))
def test_bf16_gemm_rejects_mn_major_a_with_m_not_a_multiple_of_8(alias):
    a, b, d = problem(alias, m=12, n=16, k=16)
    assert_rejected(alias, "a", a, b, d)


@pytest.mark.parametrize("alias", ("nt", "tt"))
def test_bf16_gemm_rejects_bf16_output_with_n_not_a_multiple_of_8(alias):
    a, b, d = problem(alias, m=16, n=12, k=16)
    assert_rejected(alias, "d", a, b, d)


@pytest.mark.parametrize("alias", ALIASES)
def test_bf16_gemm_rejects_output_rows_that_overlap(alias):
    a, b, _ = problem(alias)
    d = matrix(M, N, row_stride=N - 8)  # 16-byte multiple, but each row runs into the next
    assert_rejected(alias, "d", a, b, d)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("arg", ["b", "d", "c"])
def test_bf16_gemm_rejects_tensors_on_different_devices(alias, arg):
    # This machine may have no second real device; a meta tensor is a tensor on another device.
    a, b, d, c = replace(alias, arg, lambda t: t.to("meta"))
    # With d moved, a and b disagree with it: either side may be blamed (d's device may be the
    # one the others are held to).
    assert_rejected(alias, arg, a, b, d, c, args=("d", "a", "b") if arg == "d" else None)


# --- empty problems (API.md 1.3): no kernel, so they complete on CPU tensors -----------------------

@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("zero_dim", ["m", "n"])
@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("c_mode", C_MODES)
def test_bf16_gemm_with_m_or_n_zero_touches_nothing(alias, zero_dim, d_dtype, c_mode):
    m, n = (0, N) if zero_dim == "m" else (M, 0)
    a, b, _ = problem(alias, m=m, n=n)
    # d is an empty view into a NaN buffer: nothing of the buffer may change.
    buffer = torch.full((M, N), float("nan"), dtype=d_dtype)
    d = buffer[:m, :n]
    c = with_c(d, c_mode)
    c_before = None if c is None else c.clone()
    assert gemm(alias)(a, b, d, c) is None
    assert torch.isnan(buffer).all()
    if c is not None:
        assert torch.equal(c, c_before)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("c_mode", C_MODES)
def test_bf16_gemm_with_k_zero_writes_c_or_zeros(alias, d_dtype, c_mode):
    a, b, d = problem(alias, k=0, d_dtype=d_dtype)
    if c_mode == "in_place":
        d.copy_(torch.randn(M, N) * 32)
        c = d
    else:
        d.fill_(float("nan"))
        c = None if c_mode == "none" else (torch.randn(M, N) * 32).to(d_dtype)
    expected = torch.zeros(M, N, dtype=d_dtype) if c is None else c.clone()
    gemm(alias)(a, b, d, c)
    assert torch.equal(d, expected)


@pytest.mark.parametrize("alias", ALIASES)
def test_bf16_gemm_checks_arguments_before_the_empty_problem_shortcut(alias):
    # API.md 1.3: the checks come first, the M/N/K == 0 early returns after them.
    a, b, d = problem(alias, m=0)
    assert_rejected(alias, "d", a, b, d.to(torch.float16))
    a, b, d = problem(alias, k=0)
    assert_rejected(alias, "c", a, b, d, torch.zeros(M, N, dtype=torch.float32))
