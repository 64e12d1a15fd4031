"""M-grouped BF16 GEMMs (API.md 3.4, 3.5): the contiguous layout of MoE prefill (all tokens in
one [M, K] tensor, grouped by expert: per-row indices or per-group end rows, "psum") and the masked
layout of decode ([G, max_m, K] with a device-side row count per group).

Arguments are checked here (API.md 1.2, 4) before any kernel work; the group structure itself
(grouped_layout, masked_m) lives on the device and is never read by the host, so its values are
the caller's contract. On SM90 the CUDA kernels serve them (dg_triton/kernels/sm90_grouped_gemm.py:
the dense BF16 kernel with a grouped tile scheduler), except for the few layouts that kernel does not
take (an mk alignment that is not a multiple of 64, an MN-major B with K % 64 != 0), which go to the
portable Triton kernels like every other device (dispatch.py; DG_BACKEND=triton forces them).

Host cost of a warm call: the full checks below read ~40 tensor attributes (each ~0.2-0.5 us on the
H200's host). A call whose *signature* -- everything those checks read but the data pointers:
exact types, shapes, strides, dtypes, devices and the scalar arguments -- matches one that passed
them on a CUDA device cannot fail them except through the pointers, so it skips them; the 16-byte
alignment TMA needs is tested every call (a misaligned pointer re-runs the full checks, which name
the operand). CPU and meta tensors always take the full checks: get_device() and is_cuda cannot
tell them apart. The signature is also the SM90 plan key (sm90_grouped_gemm), so it holds what a
plan depends on as well (mk alignment, plan settings, compiled_dims).
"""
import torch

from dg_triton import dispatch, settings
from dg_triton.errors import reject
from dg_triton.kernels import sm90_grouped_gemm
from dg_triton.utils.layout import get_mk_alignment_for_contiguous_layout
from dg_triton.validation import _operand_major, _same_device, _tma_layout, compiled_dims_argument

_BF16, _INT32 = torch.bfloat16, torch.int32
_SM90 = (dispatch.SM90,)

# Signatures of CUDA calls that passed the full checks -> (device, rows: M, or max_m if masked).
# Dropped when full, like tma.DescriptorCache: each new M of a MoE prefill adds one.
_accepted: dict = {}
_MAX_ACCEPTED = 1024


def _tensor(function: str, argument: str, t, dims: int, dtype: torch.dtype) -> None:
    if not isinstance(t, torch.Tensor):
        raise reject(function, argument, "a torch.Tensor", type(t).__name__)
    if t.dim() != dims:
        raise reject(function, argument, f"a {dims}-D tensor", f"{t.dim()}-D shape {tuple(t.shape)}")
    if t.dtype != dtype:
        raise reject(function, argument, str(dtype), t.dtype)


def _positive(function: str, argument: str, value: int, what: str) -> None:
    if value <= 0:
        raise reject(function, argument, f"of positive {what}", value)


def _dense_groups(function: str, argument: str, t: torch.Tensor) -> None:
    """3-D operands keep their groups densely packed (API.md 1.2)."""
    if t.size(0) > 1 and t.stride(0) != t.size(1) * t.size(2):
        raise reject(function, argument, f"densely packed groups (stride(0) == {t.size(1) * t.size(2)})",
                     f"strides {tuple(t.stride())}")


def _k_major(function: str, argument: str, shape, strides, logical: str) -> None:
    if not _operand_major(function, argument, shape, strides, logical):
        raise reject(function, argument, f"K-major (stride(-1) == 1) as {logical}",
                     f"strides {tuple(strides)}")


def _n_major(function: str, argument: str, shape, strides) -> None:
    if strides[1] != 1 and shape[1] > 1:
        raise reject(function, argument, "N-major (stride(-1) == 1)", f"strides {tuple(strides)}")


def _index_tensor(function: str, argument: str, t, numel: int, numel_from: str) -> None:
    _tensor(function, argument, t, 1, _INT32)
    if not t.is_contiguous():
        raise reject(function, argument, "contiguous", f"strides {tuple(t.stride())}")
    if t.numel() != numel:
        raise reject(function, argument, f"of {numel} elements ({numel_from})", t.numel())


def _b_operand(function: str, b, num_groups_from: str | None, num_groups: int | None, k: int):
    """b [G, N, K] bf16 with G, N, K positive and G, K matching the other operands."""
    _tensor(function, "b", b, 3, _BF16)
    g, n, k_b = b.shape
    if num_groups is not None and g != num_groups:
        raise reject(function, "b", f"of {num_groups} groups (from {num_groups_from})", g)
    if k_b != k:
        raise reject(function, "b", f"of K (size along K) {k} (from a)", k_b)
    _positive(function, "b", g, "group count G")
    _positive(function, "b", n, "N")
    _positive(function, "b", k, "K")
    return g, n


def _check_contiguous(function, a, b, d, grouped_layout, use_psum_layout, expected_m_for_psum_layout):
    _tensor(function, "a", a, 2, _BF16)
    m, k = a.shape
    num_groups, n = _b_operand(function, b, None, None, k)
    _tensor(function, "d", d, 2, _BF16)
    if d.shape[0] != m:
        raise reject(function, "d", f"of M rows {m} (from a)", d.shape[0])
    if d.shape[1] != n:
        raise reject(function, "d", f"of N columns {n} (from b)", d.shape[1])
    if use_psum_layout:
        _index_tensor(function, "grouped_layout", grouped_layout, num_groups, "G, from b: psum layout")
        if expected_m_for_psum_layout is not None and (
                isinstance(expected_m_for_psum_layout, bool) or not isinstance(expected_m_for_psum_layout, int)
                or expected_m_for_psum_layout < 0):
            raise reject(function, "expected_m_for_psum_layout", "None or a non-negative int",
                         repr(expected_m_for_psum_layout))
    else:
        _index_tensor(function, "grouped_layout", grouped_layout, m, "M, from a: index layout")
        if expected_m_for_psum_layout is not None:
            raise reject(function, "expected_m_for_psum_layout", "None without use_psum_layout",
                         repr(expected_m_for_psum_layout))
    device_index = d.get_device()
    _same_device(function, d, device_index, (("a", a), ("b", b), ("grouped_layout", grouped_layout)))
    _dense_groups(function, "b", b)
    b_strides = b.stride()[1:]
    _operand_major(function, "b", (n, k), b_strides, "[N, K] per group")
    if m == 0:
        return m
    _k_major(function, "a", (m, k), a.stride(), "[M, K]")
    _n_major(function, "d", (m, n), d.stride())
    _tma_layout(function, "a", (m, k), a.stride(), 2, a.data_ptr(), True)
    _tma_layout(function, "b", (n, k), b_strides, 2, b.data_ptr(), b_strides[1] == 1 or k == 1)
    _tma_layout(function, "d", (m, n), d.stride(), 2, d.data_ptr(), True)
    return m


def _check_masked(function, a, b, d, masked_m, expected_m):
    _tensor(function, "a", a, 3, _BF16)
    num_groups, max_m, k = a.shape
    _b_operand(function, b, "a", num_groups, k)
    n = b.shape[1]
    _positive(function, "a", max_m, "max_m")
    _tensor(function, "d", d, 3, _BF16)
    if tuple(d.shape) != (num_groups, max_m, n):
        raise reject(function, "d", f"of shape {(num_groups, max_m, n)} [G, max_m, N] (from a and b)",
                     tuple(d.shape))
    _index_tensor(function, "masked_m", masked_m, num_groups, "G, from a")
    if isinstance(expected_m, bool) or not isinstance(expected_m, int):
        raise reject(function, "expected_m", "an int", type(expected_m).__name__)
    if expected_m <= 0:
        raise reject(function, "expected_m", "positive", expected_m)
    device_index = d.get_device()
    _same_device(function, d, device_index, (("a", a), ("b", b), ("masked_m", masked_m)))
    for name, t in (("a", a), ("b", b), ("d", d)):
        _dense_groups(function, name, t)
    _k_major(function, "a", (max_m, k), a.stride()[1:], "[max_m, K] per group")
    _k_major(function, "b", (n, k), b.stride()[1:], "[N, K] per group")
    _n_major(function, "d", (max_m, n), d.stride()[1:])
    _tma_layout(function, "a", (max_m, k), a.stride()[1:], 2, a.data_ptr(), True)
    _tma_layout(function, "b", (n, k), b.stride()[1:], 2, b.data_ptr(), True)
    _tma_layout(function, "d", (max_m, n), d.stride()[1:], 2, d.data_ptr(), True)


def _contiguous_signature(function, a, b, d, grouped_layout, use_psum_layout, ensure_zero_padding,
                          expected_m, compiled_dims):
    """The signature of a contiguous call (module docstring), None if an operand is not tensor-like.
    Types are part of it so that True, 1.0 and 1 (equal as dict keys) stay apart."""
    try:
        return (function, use_psum_layout, ensure_zero_padding, type(expected_m), expected_m,
                compiled_dims, get_mk_alignment_for_contiguous_layout(), settings._plan_settings,
                type(a), a.shape, a.stride(), a.dtype, a.get_device(), a.is_cuda,
                type(b), b.shape, b.stride(), b.dtype, b.get_device(), b.is_cuda,
                type(d), d.shape, d.stride(), d.dtype, d.get_device(), d.is_cuda,
                type(grouped_layout), grouped_layout.shape, grouped_layout.stride(), grouped_layout.dtype,
                grouped_layout.get_device(), grouped_layout.is_cuda)
    except (AttributeError, TypeError):
        return None


def _masked_signature(function, a, b, d, masked_m, expected_m, compiled_dims):
    """The signature of a masked call, as _contiguous_signature."""
    try:
        return (function, type(expected_m), expected_m, compiled_dims, settings._plan_settings,
                type(a), a.shape, a.stride(), a.dtype, a.get_device(), a.is_cuda,
                type(b), b.shape, b.stride(), b.dtype, b.get_device(), b.is_cuda,
                type(d), d.shape, d.stride(), d.dtype, d.get_device(), d.is_cuda,
                type(masked_m), masked_m.shape, masked_m.stride(), masked_m.dtype, masked_m.get_device(),
                masked_m.is_cuda)
    except (AttributeError, TypeError):
        return None


def _accept(key, d, rows: int) -> tuple:
    """Remembers a signature that passed the full checks, if on a CUDA device (module docstring)."""
    accepted = (d.device, rows)
    if key is not None and d.is_cuda:
        if len(_accepted) >= _MAX_ACCEPTED:
            _accepted.clear()
        _accepted[key] = accepted
    return accepted


def _lookup(key):
    try:
        return _accepted.get(key)
    except TypeError:  # an unhashable scalar argument: never accepted before, the full checks judge it
        return None


def _aligned(addresses) -> bool:
    # The one check a cached signature cannot stand for: TMA's 16-byte aligned base addresses.
    return not (addresses[0] | addresses[1] | addresses[2]) & 15


def m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims: str = "nk",
                                      use_psum_layout: bool = False, ensure_zero_padding: bool = True,
                                      expected_m_for_psum_layout: int | None = None) -> None:
    """d[r] = a[r] @ b[g].T for each row r of group g (API.md 3.4): a [M, K] bf16 K-major, b [G, N, K]
    bf16, d [M, N] bf16 N-major, grouped_layout int32 contiguous: [M] group per row (-1 padding,
    written as 0), or with use_psum_layout [G] end row per group (group g starts at
    align(end[g-1], get_mk_alignment_for_contiguous_layout())). With ensure_zero_padding the gap
    rows between groups are written as 0, else they keep their content, like rows past the last
    group. M == 0 is a no-op."""
    _contiguous("m_grouped_bf16_gemm_nt_contiguous", a, b, d, grouped_layout, compiled_dims,
                use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout)


def _contiguous(function, a, b, d, grouped_layout, compiled_dims, use_psum_layout, ensure_zero_padding,
                expected_m_for_psum_layout) -> None:
    use_psum_layout = settings.bool_argument(function, "use_psum_layout", use_psum_layout)
    ensure_zero_padding = settings.bool_argument(function, "ensure_zero_padding", ensure_zero_padding)
    key = _contiguous_signature(function, a, b, d, grouped_layout, use_psum_layout, ensure_zero_padding,
                                expected_m_for_psum_layout, compiled_dims)
    accepted = _lookup(key)
    if accepted is not None:
        device, rows = accepted
        if rows == 0:  # M == 0 loads nothing, so no pointer rule applies (_check_contiguous)
            return
        addresses = (a.data_ptr(), b.data_ptr(), d.data_ptr())
        if not _aligned(addresses):
            accepted = None  # the full checks name the misaligned operand
    if accepted is None:
        compiled_dims_argument(function, compiled_dims)
        rows = _check_contiguous(function, a, b, d, grouped_layout, use_psum_layout,
                                 expected_m_for_psum_layout)
        device, rows = _accept(key, d, rows)
        if rows == 0:
            return
        addresses = (a.data_ptr(), b.data_ptr(), d.data_ptr())
    mk_alignment = get_mk_alignment_for_contiguous_layout()
    if dispatch.backend(function, device, _SM90) == dispatch.SM90:
        if sm90_grouped_gemm.run_contiguous(function, key, a, b, d, grouped_layout, addresses,
                                            use_psum_layout, ensure_zero_padding, mk_alignment,
                                            expected_m_for_psum_layout, compiled_dims):
            return
    from dg_triton.triton import grouped_portable  # imports Triton: only when used
    grouped_portable.m_grouped_bf16_gemm_contiguous(
        function, a, b, d, grouped_layout, use_psum_layout, ensure_zero_padding, mk_alignment,
        expected_m_for_psum_layout)


def m_grouped_bf16_gemm_nn_contiguous(a, b, d, grouped_layout, compiled_dims: str = "nk",
                                      use_psum_layout: bool = False,
                                      ensure_zero_padding: bool = True) -> None:
    """m_grouped_bf16_gemm_nt_contiguous with b passed as [G, K, N] (API.md 1.1: b.mT, a view, so
    B is MN-major per group); no expected_m_for_psum_layout, as upstream."""
    if isinstance(b, torch.Tensor) and b.dim() == 3:
        b = b.transpose(1, 2)
    _contiguous("m_grouped_bf16_gemm_nn_contiguous", a, b, d, grouped_layout, compiled_dims,
                use_psum_layout, ensure_zero_padding, None)


def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m: int, compiled_dims: str = "nk") -> None:
    """d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g].T (API.md 3.5): a [G, max_m, K], b [G, N, K]
    bf16 K-major, d [G, max_m, N] bf16 N-major, masked_m int32 [G] contiguous on d's device (values
    in 0..max_m, never read by the host). Rows of d at or past masked_m[g] are not written.
    expected_m (> 0, typical rows per group) only guides the tile config."""
    function = "m_grouped_bf16_gemm_nt_masked"
    key = _masked_signature(function, a, b, d, masked_m, expected_m, compiled_dims)
    accepted = _lookup(key)
    if accepted is not None:
        device = accepted[0]
        addresses = (a.data_ptr(), b.data_ptr(), d.data_ptr())
        if not _aligned(addresses):
            accepted = None  # the full checks name the misaligned operand
    if accepted is None:
        compiled_dims_argument(function, compiled_dims)
        _check_masked(function, a, b, d, masked_m, expected_m)
        device = _accept(key, d, a.shape[1])[0]
        addresses = (a.data_ptr(), b.data_ptr(), d.data_ptr())
    if dispatch.backend(function, device, _SM90) == dispatch.SM90:
        if sm90_grouped_gemm.run_masked(function, key, a, b, d, masked_m, addresses, expected_m,
                                        compiled_dims):
            return
    from dg_triton.triton import grouped_portable  # imports Triton: only when used
    grouped_portable.m_grouped_bf16_gemm_masked(function, a, b, d, masked_m, expected_m)
