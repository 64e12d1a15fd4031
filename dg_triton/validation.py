"""Argument checks shared by every public function.

Each check raises DGArgumentError ("{function}: {argument} must be {expected}, got {actual}") before
any kernel work. They run on every call, so each is a few attribute reads; the messages are built
only on failure. TMA rules (API.md 1.2, 10) are checked here, up front, instead of surfacing later
as a driver error: 16-byte aligned base addresses and every non-unit stride a multiple of 16 bytes
(a dimension of size 1 has no stride that matters and is exempt).
"""
import torch

from dg_triton.errors import reject

_ELEMENT_SIZE = {torch.bfloat16: 2, torch.float32: 4, torch.float8_e4m3fn: 1, torch.int8: 1,
                 torch.int32: 4, torch.float16: 2}


def tensor_2d(function: str, argument: str, t, dtypes: tuple) -> None:
    if not isinstance(t, torch.Tensor):
        raise reject(function, argument, "a torch.Tensor", type(t).__name__)
    if t.dim() != 2:
        raise reject(function, argument, "a 2-D tensor", f"{t.dim()}-D shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        expected = " or ".join(str(d) for d in dtypes)
        raise reject(function, argument, expected, t.dtype)


def operand_major(function: str, argument: str, t: torch.Tensor, logical: str) -> bool:
    """True when the logical [MN, K] operand `t` is K-major (stride(-1) == 1), False when MN-major.
    `logical` names the logical shape for messages, e.g. "[M, K]"."""
    rows, cols = t.shape
    row_stride, col_stride = t.stride()
    if col_stride == 1 or cols == 1:
        k_major = True
    elif row_stride == 1 or rows == 1:
        k_major = False
    else:
        raise reject(function, argument, f"a {logical} view with a unit stride in one of its dims "
                     "(K-major or MN-major)", f"strides {tuple(t.stride())}")
    tma_strides(function, argument, t, k_major)
    return k_major


def tma_strides(function: str, argument: str, t: torch.Tensor, inner_is_last: bool) -> None:
    """The outer (non-unit) stride: a multiple of 16 bytes, and no shorter than a row."""
    element = _ELEMENT_SIZE[t.dtype]
    if t.data_ptr() % 16:
        raise reject(function, argument, "16-byte aligned (TMA)", f"data_ptr {t.data_ptr():#x}")
    outer_dim, inner_dim = (0, 1) if inner_is_last else (1, 0)
    if t.shape[outer_dim] > 1:
        stride = t.stride(outer_dim)
        if (stride * element) % 16:
            raise reject(function, argument,
                         f"a tensor whose stride({outer_dim}) is a multiple of 16 bytes (TMA)",
                         f"stride {stride} ({stride * element} bytes) for shape {tuple(t.shape)}")
        if stride < t.shape[inner_dim]:
            raise reject(function, argument, f"a tensor with stride({outer_dim}) >= "
                         f"size({inner_dim}) = {t.shape[inner_dim]}", f"stride {stride}")


def n_major_output(function: str, argument: str, t: torch.Tensor) -> None:
    if t.stride(1) != 1 and t.shape[1] > 1:
        raise reject(function, argument, "N-major (stride(-1) == 1)", f"strides {tuple(t.stride())}")
    tma_strides(function, argument, t, inner_is_last=True)


def same_size(function: str, argument: str, what: str, actual: int, expected: int, source: str) -> None:
    if actual != expected:
        raise reject(function, argument, f"of {what} {expected} (from {source})", actual)


def same_device(function: str, named_tensors) -> None:
    first_name, first = named_tensors[0]
    for name, t in named_tensors[1:]:
        if t is not None and t.device != first.device:
            raise reject(function, name, f"on {first.device} like {first_name}", t.device)


def bf16_gemm(function: str, a, b, d, c) -> tuple[int, int, int]:
    """Checks the logical NT problem (A [M, K], B [N, K], D/C [M, N]); returns (m, n, k).
    Only shapes and dtypes are checked here; strides after the empty-problem early exit."""
    tensor_2d(function, "a", a, (torch.bfloat16,))
    tensor_2d(function, "b", b, (torch.bfloat16,))
    tensor_2d(function, "d", d, (torch.bfloat16, torch.float32))
    m, k = a.shape
    n = b.shape[0]
    same_size(function, "b", "K (size along K)", b.shape[1], k, "a")
    same_size(function, "d", "M rows", d.shape[0], m, "a")
    same_size(function, "d", "N columns", d.shape[1], n, "b")
    if c is not None and c is not d:
        if not isinstance(c, torch.Tensor):
            raise reject(function, "c", "a torch.Tensor or None", type(c).__name__)
        if c.dtype != d.dtype:
            raise reject(function, "c", f"of d's dtype {d.dtype}", c.dtype)
        if tuple(c.shape) != (m, n):
            raise reject(function, "c", f"of shape {(m, n)} like d", tuple(c.shape))
        if c.dim() == 2 and c.stride(1) != 1 and n > 1:
            raise reject(function, "c", "N-major (stride(-1) == 1)", f"strides {tuple(c.stride())}")
    same_device(function, (("d", d), ("a", a), ("b", b), ("c", c)))
    return m, n, k
