"""Argument checks shared by every public function.

Each check raises DGArgumentError ("{function}: {argument} must be {expected}, got {actual}") before
any kernel work. They run on every call but the warm ones whose argument signature passed them
before (gemm.py and grouped.py keep those signatures). On the H200's host a tensor attribute read
costs ~0.2 us, so a checker reads each attribute once and does the rest in plain integer arithmetic;
messages are built only on failure. TMA rules (API.md 1.2, 10) are checked here, up front, instead of
surfacing later as a driver error: 16-byte aligned base addresses and every non-unit stride a
multiple of 16 bytes and no shorter than a row (a dimension of size 1 has no stride that matters).
"""
import torch

from dg_triton.errors import reject

_Tensor = torch.Tensor
_BF16, _FP32 = torch.bfloat16, torch.float32
_ELEMENT_SIZE = {torch.bfloat16: 2, torch.float32: 4, torch.float8_e4m3fn: 1, torch.int8: 1,
                 torch.int32: 4, torch.float16: 2}


def compiled_dims_argument(function: str, compiled_dims) -> str:
    """compiled_dims as the GEMMs take it: a str, the dims ('m', 'n', 'k') baked into the kernel."""
    if not isinstance(compiled_dims, str):
        raise reject(function, "compiled_dims", "a str (a subset of 'mnk')",
                     f"{type(compiled_dims).__name__} {compiled_dims!r}")
    return compiled_dims


def _tensor_2d(function: str, argument: str, t, dtypes: tuple) -> None:
    if not isinstance(t, _Tensor):
        raise reject(function, argument, "a torch.Tensor", type(t).__name__)
    if t.dim() != 2:
        raise reject(function, argument, "a 2-D tensor", f"{t.dim()}-D shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        raise reject(function, argument, " or ".join(str(d) for d in dtypes), t.dtype)


def _operand_major(function: str, argument: str, shape, strides, logical: str) -> bool:
    """True when the logical [MN, K] operand is K-major (stride(-1) == 1), False when MN-major."""
    if strides[1] == 1 or shape[1] == 1:
        return True
    if strides[0] == 1 or shape[0] == 1:
        return False
    raise reject(function, argument, f"a {logical} view with a unit stride in one of its dims "
                 "(K-major or MN-major)", f"strides {tuple(strides)}")


def _tma_layout(function: str, argument: str, shape, strides, element: int, address: int,
                inner_is_last: bool) -> None:
    """The base address 16-byte aligned; the outer stride a multiple of 16 bytes, >= a row."""
    if address % 16:
        raise reject(function, argument, "16-byte aligned (TMA)", f"data_ptr {address:#x}")
    outer, inner = (0, 1) if inner_is_last else (1, 0)
    if shape[outer] > 1:
        stride = strides[outer]
        if (stride * element) % 16:
            raise reject(function, argument,
                         f"a tensor whose stride({outer}) is a multiple of 16 bytes (TMA)",
                         f"stride {stride} ({stride * element} bytes) for shape {tuple(shape)}")
        if stride < shape[inner]:
            raise reject(function, argument,
                         f"a tensor with stride({outer}) >= size({inner}) = {shape[inner]}",
                         f"stride {stride}")


def _same_device(function: str, d, device_index: int, named_tensors) -> None:
    # get_device() and is_cuda are cheap; building t.device costs ~0.8 us, so it is read only off
    # the CUDA path (a CPU or meta d) and for the message.
    d_is_cuda = d.is_cuda
    for name, t in named_tensors:
        if t is None:
            continue
        if (t.get_device() != device_index or t.is_cuda != d_is_cuda
                or (not d_is_cuda and t.device != d.device)):
            raise reject(function, name, f"on {d.device} like d", t.device)


def check_c(function: str, c, d_dtype, d_shape, m: int, n: int) -> None:
    """A `c` other than d itself (API.md 1.3): a tensor of d's dtype and shape, N-major."""
    if not isinstance(c, _Tensor):
        raise reject(function, "c", "a torch.Tensor or None", type(c).__name__)
    if c.dtype != d_dtype:
        raise reject(function, "c", f"of d's dtype {d_dtype}", c.dtype)
    if c.shape != d_shape:
        raise reject(function, "c", f"of shape {(m, n)} like d", tuple(c.shape))
    if c.stride(1) != 1 and n > 1:
        raise reject(function, "c", "N-major (stride(-1) == 1)", f"strides {tuple(c.stride())}")


def bf16_gemm(function: str, a, b, d, c):
    """Checks the logical NT problem: A [M, K], B [N, K] BF16; D (and C) [M, N] BF16/FP32, N-major.

    Returns (m, n, k, a_k_major, b_k_major, device_index, layout, addresses) where `layout` is
    (d.dtype, a.stride(), b.stride(), d.stride()) and `addresses` the three data pointers: what the
    launch path needs next, handed on so that no tensor attribute is read twice per call. For an
    empty problem (M, N or K zero) only shapes, dtypes and devices are checked; the majors, layout
    and addresses are None: nothing will be loaded.
    """
    # Common path first: unpacking .shape and comparing dtypes by identity checks type, rank and
    # dtype at once; anything unusual gets the check that names the problem.
    try:
        (m, k), (n, k_b), d_shape = a.shape, b.shape, d.shape
        ok = a.dtype is _BF16 and b.dtype is _BF16 and len(d_shape) == 2
    except (AttributeError, TypeError, ValueError):
        ok = False
    if not ok:
        _tensor_2d(function, "a", a, (_BF16,))
        _tensor_2d(function, "b", b, (_BF16,))
        _tensor_2d(function, "d", d, (_BF16, _FP32))
        (m, k), (n, k_b), d_shape = a.shape, b.shape, d.shape
    if k_b != k:
        raise reject(function, "b", f"of K (size along K) {k} (from a)", k_b)
    if d_shape[0] != m:
        raise reject(function, "d", f"of M rows {m} (from a)", d_shape[0])
    if d_shape[1] != n:
        raise reject(function, "d", f"of N columns {n} (from b)", d_shape[1])
    d_dtype = d.dtype
    if d_dtype is not _BF16 and d_dtype is not _FP32:
        _tensor_2d(function, "d", d, (_BF16, _FP32))
    if c is not None and c is not d:
        check_c(function, c, d_dtype, d_shape, m, n)
    device_index = d.get_device()
    _same_device(function, d, device_index, (("a", a), ("b", b), ("c", c)))
    if m == 0 or n == 0 or k == 0:
        return m, n, k, None, None, device_index, None, None

    a_shape, a_strides = (m, k), a.stride()
    b_shape, b_strides = (n, k), b.stride()
    d_strides = d.stride()
    addresses = (a.data_ptr(), b.data_ptr(), d.data_ptr())
    a_k_major = _operand_major(function, "a", a_shape, a_strides, "[M, K]")
    b_k_major = _operand_major(function, "b", b_shape, b_strides, "[N, K]")
    _tma_layout(function, "a", a_shape, a_strides, 2, addresses[0], a_k_major)
    _tma_layout(function, "b", b_shape, b_strides, 2, addresses[1], b_k_major)
    if d_strides[1] != 1 and n > 1:
        raise reject(function, "d", "N-major (stride(-1) == 1)", f"strides {tuple(d_strides)}")
    _tma_layout(function, "d", (m, n), d_strides, _ELEMENT_SIZE[d_dtype], addresses[2], True)
    layout = (d_dtype, a_strides, b_strides, d_strides)
    return m, n, k, a_k_major, b_k_major, device_index, layout, addresses
