"""M-grouped FP8 GEMMs (API.md 3.4, 3.5): the contiguous layout of MoE prefill (all tokens in one
[M, K] tensor grouped by expert: per-row expert indices, or per-expert end rows, "psum") and the
masked layout of decode ([G, max_m, K] with a device-side row count per expert), with FP8 E4M3
operands a = (A, sfa), b = (B [G, N, K], sfb) and a bf16 d.

On SM90 the recipe is (1, 128, 128) (API.md 1.5, the "1D2D" kernel): sfa fp32 per token and 128
of K, sfb fp32 per 128x128 block of each expert; no c; B K-major (so `nn` takes only the .mT of a
K-major [G, N, K] tensor); `disable_ue8m0_cast` changes nothing (SM90 keeps fp32 SFs) and
`ensure_zero_padding` is ignored (API.md 9). The SM90 CUDA kernels serve these calls
(dg_triton/kernels/sm90_grouped_gemm.py); there is no portable FP8 grouped kernel, so any other
device gets dispatch.backend's NotImplementedError, and SM100 validation_fp8.rules_for_arch's.

Arguments are checked (API.md 1.2, 2.2, 4) before any kernel work, in DeepGEMM's order: the types
of the scalar arguments; operands, d and the group tensor (types, shapes, majors, devices, TMA
alignment); the M == 0 early return of the contiguous layout (no kernel, scale factors not read,
as DeepGEMM); then the recipe and the scale factors. The group structure (grouped_layout,
masked_m) lives on the device and is never read by the host, so its values are the caller's
contract and every call can be captured in a CUDA graph. Then the SFs are brought into the layouts
the kernel reads, copying only when needed: sfa to the TMA-aligned MN-major layout of API.md 2.3,
a transpose-contiguous sfb to row-major.

A warm call skips the checks as grouped.py's BF16 calls do (its module docstring): the signature
of the call (every shape, stride, dtype, device and scalar argument the checks read, SFs
included) is looked up in grouped.py's cache of accepted CUDA calls; the 16-byte alignment of the
data pointers is tested on every call.

``m_grouped_fp8_gemm_*`` and the legacy ``fp8_m_grouped_gemm_nt_masked`` are the same callables
as the ``m_grouped_fp8_fp4_gemm_*`` ones (API.md 3), so messages name the latter.
"""
import torch

from dg_triton import dispatch, settings, validation_fp8
from dg_triton.errors import reject
from dg_triton.grouped import (_accept, _aligned, _dense_groups, _index_tensor, _lookup, _n_major,
                               _positive, _tensor)
from dg_triton.kernels import sm90_grouped_gemm
from dg_triton.reference_sf_layout import is_mn_major_tma_aligned
from dg_triton.utils.layout import get_mk_alignment_for_contiguous_layout, get_mn_major_tma_aligned_tensor
from dg_triton.utils.math import ceil_div
from dg_triton.validation import _operand_major, _same_device, _tma_layout
from dg_triton.validation_fp8 import SFA, SFB, SM90_RULES

__all__ = [
    "fp8_m_grouped_gemm_nt_masked",
    "m_grouped_fp8_fp4_gemm_nn_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_masked",
    "m_grouped_fp8_gemm_nn_contiguous",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
]

_Tensor = torch.Tensor
_FP8, _FP4_PACKED, _BF16 = torch.float8_e4m3fn, torch.int8, torch.bfloat16
_SM90 = (dispatch.SM90,)
_NN = "m_grouped_fp8_fp4_gemm_nn_contiguous"
# The SM90 kernel's scale granularities (API.md 1.5): A per token and 128 of K, B per 128x128 block.
_GRAN_A, _GRAN_B = (1, 128), (128, 128)


# ---------------------------------------------------------------------------------------------
# Checks


def _nn_note(function: str) -> str:
    if function != _NN:
        return ""
    return (" (nn passes b as [G, K, N] with sfb [G, ceil(K/128), ceil(N/128)] and reads their .mT; "
            "the shapes named are of that view)")


def _fp8_data(function: str, argument: str, t, dims: int, shape_name: str) -> None:
    if not isinstance(t, _Tensor):
        raise reject(function, argument, "a torch.Tensor", type(t).__name__)
    if t.dim() != dims:
        raise reject(function, argument, f"a {dims}-D tensor {shape_name}",
                     f"{t.dim()}-D shape {tuple(t.shape)}")
    if t.dtype is not _FP8:
        if t.dtype is _FP4_PACKED:
            raise reject(function, argument, "torch.float8_e4m3fn on SM90 (FP4 operands, torch.int8 with two "
                         "E2M1 codes per byte, are SM100-only)", t.dtype)
        raise reject(function, argument, "torch.float8_e4m3fn (FP8 E4M3)", t.dtype)


def _a_k_major(function: str, shape, strides, logical: str) -> None:
    if not _operand_major(function, "a[0]", shape, strides, logical):
        raise reject(function, "a[0]", f"K-major (m-grouped GEMMs read A as {logical} with stride(-1) == 1)",
                     f"an MN-major view with strides {tuple(strides)}")


def _b_operand(function: str, b, num_groups: int | None, k: int):
    """b[0] fp8 [G, N, K], K-major per group, groups densely packed; G, N, K positive and G, K
    matching the other operands. Returns (G, N)."""
    note = _nn_note(function)
    _fp8_data(function, "b[0]", b, 3, "[G, N, K]")
    g, n, k_b = b.shape
    if num_groups is not None and g != num_groups:
        raise reject(function, "b[0]", f"of {num_groups} groups (from a[0])", f"{g}{note}")
    if k_b != k:
        raise reject(function, "b[0]", f"of K (size along K) {k} (from a[0])", f"{k_b}{note}")
    _positive(function, "b[0]", g, "group count G")
    _positive(function, "b[0]", n, "N")
    _positive(function, "b[0]", k, "K")
    _dense_groups(function, "b[0]", b)
    strides = b.stride()
    if not _operand_major(function, "b[0]", (n, k), strides[1:], "[N, K] per group"):
        raise reject(function, "b[0]", "K-major on SM90 (its FP8 GEMMs read B as [G, N, K] with stride(-1) == 1)",
                     f"an MN-major [N, K]-per-group view with strides {tuple(strides)}"
                     + (f"{note}; on SM90 pass the .mT of a K-major [G, N, K] tensor (and of its sfb), "
                        f"or call m_grouped_fp8_fp4_gemm_nt_contiguous" if note else ""))
    return g, n


def _b_tma(function: str, b) -> None:
    """What the kernel's TMA needs of a checked b[0] (a non-empty problem only)."""
    if not b.is_contiguous():
        # Only possible with G == 1 (dense groups rule out padded rows otherwise); the kernel
        # reads B as one [G * N, K] TMA operand.
        raise reject(function, "b[0]", "contiguous [G, N, K] (rows of K elements back to back)",
                     f"strides {tuple(b.stride())}")
    _tma_layout(function, "b[0]", tuple(b.shape[1:]), b.stride()[1:], 1, b.data_ptr(), True)


def _psum_hint(function: str, use_psum_layout: bool, expected_m_for_psum_layout) -> None:
    if not use_psum_layout:
        if expected_m_for_psum_layout is not None:
            raise reject(function, "expected_m_for_psum_layout", "None without use_psum_layout",
                         repr(expected_m_for_psum_layout))
    elif expected_m_for_psum_layout is not None and (
            isinstance(expected_m_for_psum_layout, bool) or not isinstance(expected_m_for_psum_layout, int)
            or expected_m_for_psum_layout < 0):
        raise reject(function, "expected_m_for_psum_layout", "None or a non-negative int",
                     repr(expected_m_for_psum_layout))


def _sm90_recipe(function: str, gran_a, gran_b, names) -> None:
    """The SM90 grouped kernels are 1D2D only: no 1D1D (its fp32 d and c do not exist here)."""
    if gran_a == _GRAN_A and gran_b == _GRAN_B:
        return
    purpose = "on SM90 (m-grouped FP8 GEMMs: sfa per token x 128 of K, sfb per 128x128 block, bf16 d)"
    if names[0] == "recipe":
        raise reject(function, "recipe", f"(1, 128, 128) {purpose}", (gran_a[0], gran_b[0], gran_a[1]))
    if gran_a != _GRAN_A:
        raise reject(function, "recipe_a", f"(1, 128) {purpose}", gran_a)
    raise reject(function, "recipe_b", f"(128, 128) {purpose}", gran_b)


def _scale_factor(function: str, argument: str, sf, expected_shape: tuple, formula: str, d,
                  device_index: int, note: str = "") -> None:
    """An fp32 SF of exactly `expected_shape` on d's device; the dtype is checked before the shape,
    so a packed UE8M0 int32 SF is named as such (never reinterpreted or truncated)."""
    if not isinstance(sf, _Tensor):
        raise reject(function, argument, "a torch.Tensor", type(sf).__name__)
    if sf.dim() != len(expected_shape):
        raise reject(function, argument, f"a {len(expected_shape)}-D tensor {formula}",
                     f"{sf.dim()}-D shape {tuple(sf.shape)}{note}")
    _same_device(function, d, device_index, ((argument, sf),))
    validation_fp8._sm90_sf_dtype(function, argument, sf.dtype)
    if tuple(sf.shape) != expected_shape:
        raise reject(function, argument, f"of shape {expected_shape} = {formula}", f"{tuple(sf.shape)}{note}")


def _scale_factors(function: str, sfa, sfb, sfa_shape: tuple, sfa_formula: str, num_groups: int, n: int,
                   k: int, recipe, recipe_a, recipe_b, d, device_index: int) -> None:
    gran_a, gran_b, names = validation_fp8.granularities(function, SM90_RULES, sfa, sfb, recipe, recipe_a,
                                                          recipe_b)
    _sm90_recipe(function, gran_a, gran_b, names)
    sk = ceil_div(k, 128)
    _scale_factor(function, SFA, sfa, sfa_shape, f"{sfa_formula} for K={k}", d, device_index)
    note = _nn_note(function)
    _scale_factor(function, SFB, sfb, (num_groups, ceil_div(n, 128), sk),
                  f"(G, ceil(N / 128), ceil(K / 128)) for G={num_groups}, N={n}, K={k}", d, device_index, note)
    # API.md 2.2: a per-block SFB is row-major contiguous or its transpose-contiguous form.
    if not (sfb.is_contiguous() or sfb.mT.is_contiguous()):
        raise reject(function, SFB, "contiguous [G, ceil(N/128), ceil(K/128)] or its transpose-contiguous "
                     "(MN-major) form (SM90 per-block SFB)", f"strides {sfb.stride()}{note}")


def _check_contiguous(function, a, sfa, b, sfb, d, grouped_layout, recipe, recipe_a, recipe_b,
                      use_psum_layout: bool, expected_m_for_psum_layout) -> int:
    """The full checks of a contiguous call; returns M."""
    _fp8_data(function, "a[0]", a, 2, "[M, K]")
    m, k = a.shape
    num_groups, n = _b_operand(function, b, None, k)
    _tensor(function, "d", d, 2, _BF16)
    if d.shape[0] != m:
        raise reject(function, "d", f"of M rows {m} (from a[0])", d.shape[0])
    if d.shape[1] != n:
        raise reject(function, "d", f"of N columns {n} (from b[0])", d.shape[1])
    if use_psum_layout:
        _index_tensor(function, "grouped_layout", grouped_layout, num_groups, "G, from b[0]: psum layout")
    else:
        _index_tensor(function, "grouped_layout", grouped_layout, m, "M, from a[0]: index layout")
    _psum_hint(function, use_psum_layout, expected_m_for_psum_layout)
    device_index = d.get_device()
    _same_device(function, d, device_index, (("a[0]", a), ("b[0]", b), ("grouped_layout", grouped_layout)))
    _a_k_major(function, (m, k), a.stride(), "[M, K]")
    _n_major(function, "d", (m, n), d.stride())
    if m == 0:  # API.md 3.4: no-op; the SFs are not read (as DeepGEMM, whose SF transform comes later)
        return 0
    mk_alignment = get_mk_alignment_for_contiguous_layout()
    if not use_psum_layout and m % mk_alignment:
        raise reject(function, "a[0]", f"[M, K] with M a multiple of get_mk_alignment_for_contiguous_layout() = "
                     f"{mk_alignment} in the index layout (every expert's segment is padded to it with -1 "
                     f"rows, API.md 3.4)", f"M = {m}")
    _tma_layout(function, "a[0]", (m, k), a.stride(), 1, a.data_ptr(), True)
    _b_tma(function, b)
    _tma_layout(function, "d", (m, n), d.stride(), 2, d.data_ptr(), True)
    _scale_factors(function, sfa, sfb, (m, ceil_div(k, 128)), f"(M, ceil(K / 128)) for M={m}", num_groups, n,
                   k, recipe, recipe_a, recipe_b, d, device_index)
    return m


def _check_masked(function, a, sfa, b, sfb, d, masked_m, expected_m, recipe, recipe_a, recipe_b) -> None:
    _fp8_data(function, "a[0]", a, 3, "[G, max_m, K]")
    num_groups, max_m, k = a.shape
    _b_operand(function, b, num_groups, k)
    n = b.shape[1]
    _positive(function, "a[0]", max_m, "max_m")
    _tensor(function, "d", d, 3, _BF16)
    if tuple(d.shape) != (num_groups, max_m, n):
        raise reject(function, "d", f"of shape {(num_groups, max_m, n)} [G, max_m, N] (from a[0] and b[0])",
                     tuple(d.shape))
    _index_tensor(function, "masked_m", masked_m, num_groups, "G, from a[0]")
    if isinstance(expected_m, bool) or not isinstance(expected_m, int):
        raise reject(function, "expected_m", "an int", type(expected_m).__name__)
    if expected_m <= 0:
        raise reject(function, "expected_m", "positive", expected_m)
    device_index = d.get_device()
    _same_device(function, d, device_index, (("a[0]", a), ("b[0]", b), ("masked_m", masked_m)))
    _dense_groups(function, "a[0]", a)
    _dense_groups(function, "d", d)
    _a_k_major(function, (max_m, k), a.stride()[1:], "[max_m, K] per group")
    _n_major(function, "d", (max_m, n), d.stride()[1:])
    _tma_layout(function, "a[0]", (max_m, k), a.stride()[1:], 1, a.data_ptr(), True)
    _b_tma(function, b)
    _tma_layout(function, "d", (max_m, n), d.stride()[1:], 2, d.data_ptr(), True)
    _scale_factors(function, sfa, sfb, (num_groups, max_m, ceil_div(k, 128)),
                   f"(G, max_m, ceil(K / 128)) for G={num_groups}, max_m={max_m}", num_groups, n, k, recipe,
                   recipe_a, recipe_b, d, device_index)


# ---------------------------------------------------------------------------------------------
# Warm calls (grouped.py's signature cache)


def _tensor_signature(t) -> tuple:
    return type(t), t.shape, t.stride(), t.dtype, t.get_device(), t.is_cuda


def _signature(function: str, scalars: tuple, tensors: tuple):
    """The call's signature (module docstring), None if an argument is not tensor-like."""
    try:
        return (function, scalars) + tuple(_tensor_signature(t) for t in tensors)
    except (AttributeError, TypeError):
        return None


# ---------------------------------------------------------------------------------------------
# Launch


def _kernel_scale_factors(function: str, sfa, sfb):
    """sfa in the TMA-aligned MN-major layout (API.md 2.3), sfb row-major contiguous: what the SM90
    kernel reads. A copy only where the caller's layout differs; an sfa already in the layout is
    read in place by TMA, so its base address must be 16-byte aligned."""
    if is_mn_major_tma_aligned(sfa):
        address = sfa.data_ptr()
        if address % 16:
            raise reject(function, SFA, "16-byte aligned (TMA) when given in the TMA-aligned MN-major layout",
                         f"data_ptr {address:#x}")
    else:
        sfa = get_mn_major_tma_aligned_tensor(sfa)
    if not sfb.is_contiguous():
        sfb = sfb.contiguous()  # transpose-contiguous: G * ceil(N/128) * ceil(K/128) floats
    return sfa, sfb


def _contiguous(function, a, b, d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims,
                disable_ue8m0_cast, use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout) -> None:
    recipe, recipe_a, recipe_b, disable_ue8m0_cast = validation_fp8.arguments(
        function, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)
    use_psum_layout = settings.bool_argument(function, "use_psum_layout", use_psum_layout)
    ensure_zero_padding = settings.bool_argument(function, "ensure_zero_padding", ensure_zero_padding)
    a_data, sfa = validation_fp8._pair(function, "a", a)
    b_data, sfb = validation_fp8._pair(function, "b", b)
    if function == _NN:
        b_data, sfb = _mT(b_data), _mT(sfb)
    mk_alignment = get_mk_alignment_for_contiguous_layout()
    key = _signature(function, (use_psum_layout, ensure_zero_padding, type(expected_m_for_psum_layout),
                                expected_m_for_psum_layout, compiled_dims, recipe, recipe_a, recipe_b,
                                disable_ue8m0_cast, mk_alignment, settings._plan_settings),
                     (a_data, sfa, b_data, sfb, d, grouped_layout))
    accepted = _lookup(key)
    if accepted is not None:
        device, m = accepted
        if m == 0:
            return
        if not _aligned((a_data.data_ptr(), b_data.data_ptr(), d.data_ptr())):
            accepted = None  # the full checks name the misaligned operand
    if accepted is None:
        validation_fp8.rules_for_arch(function, settings.current_arch_major())  # SM100: not built yet
        m = _check_contiguous(function, a_data, sfa, b_data, sfb, d, grouped_layout, recipe, recipe_a,
                              recipe_b, use_psum_layout, expected_m_for_psum_layout)
        device, m = _accept(key, d, m)
        if m == 0:
            return
    dispatch.backend(function, device, _SM90)  # the SM90 kernel or NotImplementedError
    sfa, sfb = _kernel_scale_factors(function, sfa, sfb)
    sm90_grouped_gemm.run_fp8_contiguous(function, key, a_data, sfa, b_data, sfb, d, grouped_layout,
                                         b_data.shape[0], use_psum_layout, mk_alignment, compiled_dims,
                                         expected_m_for_psum_layout if use_psum_layout else None)


def _mT(t):
    # Only 3-D tensors are transposed; anything else reaches the checks as it came.
    return t.mT if isinstance(t, _Tensor) and t.dim() == 3 else t


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims: str = "nk", disable_ue8m0_cast: bool = False,
                                         use_psum_layout: bool = False, ensure_zero_padding: bool = True,
                                         expected_m_for_psum_layout: int | None = None) -> None:
    """d[r] = dequant(a)[r] @ dequant(b[g]).T for each row r of expert g (API.md 3.4): a = (A fp8
    [M, K] K-major, sfa fp32 [M, ceil(K/128)]), b = (B fp8 [G, N, K] K-major, sfb fp32
    [G, ceil(N/128), ceil(K/128)]), d bf16 [M, N] N-major. grouped_layout int32 contiguous on d's
    device: [M] expert per row (-1: padding, written as 0; M a multiple of
    get_mk_alignment_for_contiguous_layout()), or with use_psum_layout [G] end row per expert
    (expert g starts at align(end[g-1], alignment); rows past the last end are not written).
    expected_m_for_psum_layout (psum only) guides the config; ensure_zero_padding is ignored on
    SM90. M == 0 is a no-op."""
    _contiguous("m_grouped_fp8_fp4_gemm_nt_contiguous", a, b, d, grouped_layout, recipe, recipe_a, recipe_b,
                compiled_dims, disable_ue8m0_cast, use_psum_layout, ensure_zero_padding,
                expected_m_for_psum_layout)


def m_grouped_fp8_fp4_gemm_nn_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims: str = "nk", disable_ue8m0_cast: bool = False,
                                         use_psum_layout: bool = False, ensure_zero_padding: bool = True) -> None:
    """m_grouped_fp8_fp4_gemm_nt_contiguous with b = (B [G, K, N], sfb [G, ceil(K/128), ceil(N/128)]),
    read through .mT (API.md 1.1). SM90 reads B K-major only, so there B must be the .mT of a
    K-major [G, N, K] tensor; an MN-major B is rejected. No expected_m_for_psum_layout, as upstream."""
    _contiguous(_NN, a, b, d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast,
                use_psum_layout, ensure_zero_padding, None)


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m: int, recipe=None, recipe_a=None,
                                     recipe_b=None, compiled_dims: str = "nk",
                                     disable_ue8m0_cast: bool = False) -> None:
    """d[g, :masked_m[g]] = dequant(a[g, :masked_m[g]]) @ dequant(b[g]).T (API.md 3.5): a = (A fp8
    [G, max_m, K], sfa fp32 [G, max_m, ceil(K/128)]), b = (B fp8 [G, N, K], sfb fp32
    [G, ceil(N/128), ceil(K/128)]), all K-major; d bf16 [G, max_m, N] N-major; masked_m int32 [G]
    contiguous on d's device (values 0..max_m, never read by the host). Rows at or past masked_m[g]
    are unspecified (API.md 3.5). expected_m (> 0, typical rows per group) guides the config."""
    function = "m_grouped_fp8_fp4_gemm_nt_masked"
    recipe, recipe_a, recipe_b, disable_ue8m0_cast = validation_fp8.arguments(
        function, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)
    a_data, sfa = validation_fp8._pair(function, "a", a)
    b_data, sfb = validation_fp8._pair(function, "b", b)
    key = _signature(function, (type(expected_m), expected_m, compiled_dims, recipe, recipe_a, recipe_b,
                                disable_ue8m0_cast, settings._plan_settings),
                     (a_data, sfa, b_data, sfb, d, masked_m))
    accepted = _lookup(key)
    if accepted is not None:
        device = accepted[0]
        if not _aligned((a_data.data_ptr(), b_data.data_ptr(), d.data_ptr())):
            accepted = None  # the full checks name the misaligned operand
    if accepted is None:
        validation_fp8.rules_for_arch(function, settings.current_arch_major())  # SM100: not built yet
        _check_masked(function, a_data, sfa, b_data, sfb, d, masked_m, expected_m, recipe, recipe_a, recipe_b)
        device = _accept(key, d, a_data.shape[1])[0]
    dispatch.backend(function, device, _SM90)  # the SM90 kernel or NotImplementedError
    sfa, sfb = _kernel_scale_factors(function, sfa, sfb)
    sm90_grouped_gemm.run_fp8_masked(function, key, a_data, sfa, b_data, sfb, d, masked_m, expected_m,
                                     compiled_dims)


m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous
m_grouped_fp8_gemm_nn_contiguous = m_grouped_fp8_fp4_gemm_nn_contiguous
m_grouped_fp8_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
