"""Layout helpers of ``deep_gemm.utils.layout`` (API.md 2.5, 3.13), re-exported at the top level.

The m/k alignment of the contiguous grouped layouts is process-wide state like the settings in
``dg_triton.settings``; it lives here because DeepGEMM exports it from ``utils.layout``.

The scale-factor layout helpers (API.md 2.3-2.5) run the Triton kernels of
``dg_triton.triton.sf_layout`` on CUDA tensors and the plain-torch definitions of
``dg_triton.reference_sf_layout`` on any other device (DeepGEMM's helpers work on any device).
Padding rows ``MN..align(MN, 4)-1`` of their outputs, unspecified by API.md 2.3, are written as 0.
Group boundaries given as device tensors (``psum_layout``, ``grouped_layout``) are read by the
kernels on the device, never on the host, so these helpers can be captured in a CUDA graph.
"""
import torch

from .. import reference_sf_layout
from ..errors import reject
from ..settings import bool_argument, current_arch_major, int_argument
from .math import align, ceil_div

__all__ = [
    "get_k_alignment_for_contiguous_layout",
    "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_m_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_mn_major_tma_aligned_tensor",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_tma_aligned_size",
    "set_mk_alignment_for_contiguous_layout",
    "transform_sf_into_required_layout",
]

# TMA needs every non-unit global stride to be a multiple of 16 bytes (CUDA driver API,
# cuTensorMapEncodeTiled), hence the 16 below.
_TMA_ALIGNMENT_BYTES = 16

_DEFAULT_MK_ALIGNMENT = 128
_mk_alignment = _DEFAULT_MK_ALIGNMENT


def get_tma_aligned_size(x: int, element_size: int, /) -> int:
    """``x`` elements of ``element_size`` bytes rounded up to a whole number of 16-byte units."""
    x = int_argument("get_tma_aligned_size", "x", x)
    element_size = int_argument("get_tma_aligned_size", "element_size", element_size)
    if x < 0:
        raise reject("get_tma_aligned_size", "x", "non-negative", x)
    if element_size <= 0 or _TMA_ALIGNMENT_BYTES % element_size != 0:
        raise reject("get_tma_aligned_size", "element_size", "a positive divisor of 16", element_size)
    return align(x, _TMA_ALIGNMENT_BYTES // element_size)


def set_mk_alignment_for_contiguous_layout(value: int, /) -> None:
    """Sets the BLOCK_M of m-grouped contiguous GEMMs and the k_alignment of k-grouped GEMMs."""
    global _mk_alignment
    value = int_argument("set_mk_alignment_for_contiguous_layout", "value", value)
    # A multiple of 16 keeps every group's first row on a 16-row boundary, which the WGMMA/UMMA
    # M tiles and the k-grouped SF packing (k_alignment % 32 is checked later, API.md 3.6) build on.
    if value <= 0 or value % 16 != 0:
        raise reject("set_mk_alignment_for_contiguous_layout", "value", "a positive multiple of 16", value)
    _mk_alignment = value


def get_mk_alignment_for_contiguous_layout() -> int:
    return _mk_alignment


get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: int | None = None) -> int:
    """The m/k alignment (BLOCK_M) this arch's kernels suit for groups of about ``expected_m`` rows.

    SM100 starts from its largest block (224) and steps down by 32 while the smaller block still
    covers ``expected_m``, so small groups waste fewer padding rows. SM90 always uses 128. Any other arch, and a machine without a GPU, gets
    the SM90 answer, so code that sizes buffers on a CPU host still gets a usable value.
    """
    if expected_m is not None:
        function = "get_theoretical_mk_alignment_for_contiguous_layout"
        expected_m = int_argument(function, "expected_m", expected_m)
        if expected_m < 0:
            raise reject(function, "expected_m", "None or non-negative", expected_m)
    if current_arch_major() != 10:
        return 128
    block = 224
    if expected_m is None:
        return block
    while block > 32 and block - 32 >= expected_m:
        block -= 32
    return block


# ---------------------------------------------------------------------------------------------
# Scale-factor layouts (API.md 2.3-2.5)


def _sf_kernels():
    # Imported on first CUDA use only: importing Triton costs time a CPU-only user never needs.
    from ..triton import sf_layout

    return sf_layout


def _check_sf_tensor(function: str, sf, dtypes: tuple) -> None:
    if not isinstance(sf, torch.Tensor):
        raise reject(function, "sf", "a torch.Tensor", type(sf).__name__)
    if sf.dim() not in (2, 3):
        raise reject(function, "sf", "2-D [MN, SK] or 3-D [G, MN, SK]", f"{sf.dim()}-D shape {tuple(sf.shape)}")
    if sf.dtype not in dtypes:
        expected = " or ".join(str(dtype) for dtype in dtypes)
        raise reject(function, "sf.dtype", expected, sf.dtype)


def get_mn_major_tma_aligned_tensor(sf, /):
    """fp32 ``[MN, SK]`` / ``[G, MN, SK]`` -> the same values in the TMA-aligned MN-major layout
    (API.md 2.3); ``sf`` itself when it already has that layout. Padding rows are 0."""
    _check_sf_tensor("get_mn_major_tma_aligned_tensor", sf, (torch.float32,))
    if reference_sf_layout.is_mn_major_tma_aligned(sf):
        return sf
    if sf.is_cuda:
        return _sf_kernels().mn_major_tma_aligned(sf)
    return reference_sf_layout.get_mn_major_tma_aligned_tensor(sf)


def _check_psum_layout(function: str, psum_layout, sf, packed_input_contiguous: bool) -> None:
    """API.md 2.5: int32 [G] contiguous (G >= 1), on sf's device, and only with a 2-D contiguous
    packing input (the m-grouped SFA of all tokens)."""
    if not isinstance(psum_layout, torch.Tensor):
        raise reject(function, "psum_layout", "None or a torch.Tensor", type(psum_layout).__name__)
    if psum_layout.dtype != torch.int32:
        raise reject(function, "psum_layout.dtype", "torch.int32", psum_layout.dtype)
    if psum_layout.dim() != 1:
        raise reject(function, "psum_layout", "1-D [G] (one end row per group)",
                     f"{psum_layout.dim()}-D shape {tuple(psum_layout.shape)}")
    if not psum_layout.is_contiguous():
        raise reject(function, "psum_layout", "contiguous", f"strides {psum_layout.stride()}")
    if psum_layout.numel() == 0:
        raise reject(function, "psum_layout.numel()", "positive (one end row per group)", 0)
    if psum_layout.device != sf.device:
        raise reject(function, "psum_layout.device", f"sf's device {sf.device}", psum_layout.device)
    if sf.dim() != 2 or not packed_input_contiguous:
        raise reject(function, "sf", "2-D and contiguous when psum_layout is given",
                     f"{sf.dim()}-D shape {tuple(sf.shape)}, strides {sf.stride()}")


def _packed_ue8m0(sf, mn: int | None, gran_mn: int, psum_layout):
    """The packing of API.md 2.2 / 2.5 after validation: the Triton kernel on CUDA, else the
    reference (rows broadcast by ``gran_mn`` as ``index_select`` would)."""
    mk_alignment = get_mk_alignment_for_contiguous_layout()
    if sf.is_cuda:
        return _sf_kernels().mn_major_tma_aligned_packed_ue8m0(sf, mn=mn, gran_mn=gran_mn, psum_layout=psum_layout,
                                                               mk_alignment=mk_alignment)
    if gran_mn != 1:
        sf = reference_sf_layout.broadcast_sf_rows(sf, mn, gran_mn)
    return reference_sf_layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout, mk_alignment)


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout=None):
    """fp32 ``[.., MN, SK]`` non-negative powers of two -> int32 ``[.., MN, ceil(SK/4)]`` packed
    UE8M0 (API.md 2.2) in the TMA-aligned MN-major layout. Padding rows are 0.

    ``psum_layout`` (int32 ``[G]`` contiguous, ``G >= 1``, 2-D contiguous ``sf`` only): the end rows
    of the m-grouped experts; rows outside every ``[align(psum[g-1], mk), psum[g])`` (``mk`` =
    ``get_mk_alignment_for_contiguous_layout()`` now) are not read and are written as 0. psum must
    be non-decreasing (it is a prefix sum); the kernel binary-searches it on the device.

    Values are not checked on the host (that would synchronize); a value that is not a power of two
    contributes its exponent byte, where DeepGEMM device-asserts."""
    function = "get_mn_major_tma_aligned_packed_ue8m0_tensor"
    _check_sf_tensor(function, sf, (torch.float32,))
    if psum_layout is not None:
        _check_psum_layout(function, psum_layout, sf, sf.is_contiguous())
    mn = sf.size(-2)
    # DeepGEMM's fast path takes a non-contiguous 2-D input with MN % 4 == 0 only when exactly
    # MN-major and rejects any other; kept so code that runs here runs there (API.md 2.5).
    if sf.dim() == 2 and mn % 4 == 0 and not sf.is_contiguous() and sf.stride() != (1, mn):
        raise reject(function, "sf.stride()", f"contiguous or exactly MN-major (1, {mn})", sf.stride())
    return _packed_ue8m0(sf, None, 1, psum_layout)


_K_GROUPED_MAX_GROUPS = 128


def _check_ks_cpu(function: str, ks_cpu) -> list[int]:
    if ks_cpu is None:
        return []
    if isinstance(ks_cpu, torch.Tensor) or not isinstance(ks_cpu, (list, tuple)):
        raise reject(function, "ks_cpu", "None or a list of ints (host-side K sizes)", type(ks_cpu).__name__)
    ks = [int_argument(function, f"ks_cpu[{i}]", k) for i, k in enumerate(ks_cpu)]
    for i, k in enumerate(ks):
        if k < 0:
            raise reject(function, f"ks_cpu[{i}]", "non-negative", k)
    return ks


def get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, grouped_layout, ks_cpu, gran_k, k_alignment,
                                                           use_psum_layout=False):
    """k-grouped per-channel SFs (wgrad, API.md 2.5, 3.6): fp32 ``[SFK, MN]`` contiguous, group g
    contributing ``ceil(k_g / gran_k)`` rows back to back -> int32 ``[PK, MN]`` contiguous, each
    group packed on its own (four of its SF rows per int32, its last word zero-padded), groups
    concatenated.

    ``grouped_layout`` (int32 ``[G]`` contiguous, on sf's device) gives the group sizes ``k_g``, or
    with ``use_psum_layout`` the end offsets in K (group g starts at ``align(end_{g-1},
    k_alignment)``); it is read on the device, so which rows are packed where never needs a sync.
    ``ks_cpu`` (host list) only sizes the output: ``PK = sum ceil(ks_cpu[g] / (4 gran_k))``
    (non-psum: it must describe exactly SFK rows). Without ``ks_cpu`` (psum only) PK is the bound
    ``(SFK + 3G) // 4``: rows past the groups' real content are written as 0, so the whole output
    is deterministic. ``PK == 0`` gives an empty ``[0, MN]``. A malformed layout (negative sizes,
    decreasing ends) counts those groups as empty; SF rows past SFK read as 0 and rows past PK are
    dropped, never read or written out of bounds."""
    function = "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor"
    if not isinstance(sf, torch.Tensor):
        raise reject(function, "sf", "a torch.Tensor", type(sf).__name__)
    if sf.dim() != 2:
        raise reject(function, "sf", "2-D [SFK, MN]", f"{sf.dim()}-D shape {tuple(sf.shape)}")
    if sf.dtype != torch.float32:
        raise reject(function, "sf.dtype", "torch.float32", sf.dtype)
    if not sf.is_contiguous():
        raise reject(function, "sf", "contiguous", f"strides {sf.stride()}")
    if not isinstance(grouped_layout, torch.Tensor):
        raise reject(function, "grouped_layout", "a torch.Tensor", type(grouped_layout).__name__)
    if grouped_layout.dtype != torch.int32:
        raise reject(function, "grouped_layout.dtype", "torch.int32", grouped_layout.dtype)
    if not grouped_layout.is_contiguous():
        raise reject(function, "grouped_layout", "contiguous", f"strides {grouped_layout.stride()}")
    if grouped_layout.device != sf.device:
        raise reject(function, "grouped_layout.device", f"sf's device {sf.device}", grouped_layout.device)
    gran_k = int_argument(function, "gran_k", gran_k)
    if gran_k not in (32, 128):
        raise reject(function, "gran_k", "32 or 128", gran_k)
    k_alignment = int_argument(function, "k_alignment", k_alignment)
    if k_alignment <= 0 or k_alignment % 32 != 0:
        raise reject(function, "k_alignment", "a positive multiple of 32", k_alignment)
    use_psum_layout = bool_argument(function, "use_psum_layout", use_psum_layout)
    num_groups = grouped_layout.numel()
    if not 1 <= num_groups <= _K_GROUPED_MAX_GROUPS:
        raise reject(function, "grouped_layout.numel()", f"between 1 and {_K_GROUPED_MAX_GROUPS} (the group count)",
                     num_groups)
    sf_k, mn = sf.shape
    if mn % 4 != 0:
        raise reject(function, "sf.size(1)", "a multiple of 4 (MN)", mn)
    ks = _check_ks_cpu(function, ks_cpu)
    if ks:
        if len(ks) != num_groups:
            raise reject(function, "len(ks_cpu)", f"the group count grouped_layout.numel() = {num_groups}", len(ks))
        if not use_psum_layout and sum(ceil_div(k, gran_k) for k in ks) != sf_k:
            raise reject(function, "sum(ceil(ks_cpu[g] / gran_k))", f"sf.size(0) = {sf_k}",
                         sum(ceil_div(k, gran_k) for k in ks))
    elif not use_psum_layout:
        raise reject(function, "ks_cpu", "a non-empty list when use_psum_layout is False", repr(ks_cpu))

    packed_sf_k = reference_sf_layout.k_grouped_packed_sf_k(ks, sf_k, num_groups, gran_k)
    if packed_sf_k == 0:
        return torch.empty(0, mn, dtype=torch.int32, device=sf.device)
    if sf.is_cuda:
        return _sf_kernels().k_grouped_packed_ue8m0(sf, grouped_layout, packed_sf_k, gran_k, k_alignment,
                                                    use_psum_layout)
    return reference_sf_layout.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
        sf, grouped_layout, ks, gran_k, k_alignment, use_psum_layout)


def _recipe_granularity(function: str, recipe, is_sfa) -> tuple[int, int]:
    if not isinstance(recipe, (tuple, list)) or len(recipe) not in (2, 3):
        raise reject(function, "recipe", "a tuple (gran_mn, gran_k) or (gran_m, gran_n, gran_k)", repr(recipe))
    values = tuple(int_argument(function, f"recipe[{i}]", value) for i, value in enumerate(recipe))
    if any(value <= 0 for value in values):
        raise reject(function, "recipe", "positive granularities", repr(recipe))
    if len(values) == 2:
        if is_sfa is not None:
            raise reject(function, "is_sfa", "None with a 2-tuple recipe", repr(is_sfa))
        return values
    if is_sfa is None:
        raise reject(function, "is_sfa", "True or False with a 3-tuple recipe", "None")
    is_sfa = bool_argument(function, "is_sfa", is_sfa)
    return (values[0] if is_sfa else values[1]), values[2]


def _check_sfb_sm90(function: str, sf) -> None:
    """API.md 2.2: a per-block SFB is plain contiguous or its transpose-contiguous form (batch stride
    = product of the last two sizes either way)."""
    if not (sf.is_contiguous() or sf.mT.is_contiguous()):
        raise reject(function, "sf.stride()", "contiguous or transpose-contiguous (SM90 per-block SFB)", sf.stride())


def _check_tma_aligned(function: str, sf) -> None:
    if not reference_sf_layout.is_mn_major_tma_aligned(sf):
        mn = sf.size(-2)
        raise reject(function, "sf.stride()", f"TMA-aligned MN-major (stride(-2) == 1, stride(-1) == "
                     f"{align(mn, 4)}, stride(-3) == stride(-1) * size(-1))", sf.stride())


def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None,
                                      disable_ue8m0_cast=False, psum_layout=None):
    """``sf`` in the layout the GEMMs of the current arch read (API.md 2.4 decision table).

    The arch is ``current_arch_major()``; without a GPU (None) and on any arch but SM100 the SM90
    rows apply. ``psum_layout`` is used (and checked) only by the SM100 fp32 packing row, as in
    DeepGEMM; there, rows outside every psum group are written as packed 0 (see
    ``get_mn_major_tma_aligned_packed_ue8m0_tensor``). With ``gran_mn != 1`` the psum groups index
    the broadcast rows (0..mn-1), and ``sf`` may have any strides, since the definition's
    ``index_select`` makes the packed input contiguous."""
    function = "transform_sf_into_required_layout"
    _check_sf_tensor(function, sf, (torch.float32, torch.int32))
    mn = int_argument(function, "mn", mn)
    k = int_argument(function, "k", k)
    if mn < 0:
        raise reject(function, "mn", "non-negative", mn)
    if k < 0:
        raise reject(function, "k", "non-negative", k)
    gran_mn, gran_k = _recipe_granularity(function, recipe, is_sfa)
    disable_ue8m0_cast = bool_argument(function, "disable_ue8m0_cast", disable_ue8m0_cast)

    expected_dim = 2 if num_groups is None else 3
    if sf.dim() != expected_dim:
        raise reject(function, "sf.dim()", f"{expected_dim} (num_groups={num_groups})", sf.dim())
    if num_groups is not None:
        num_groups = int_argument(function, "num_groups", num_groups)
        if sf.size(0) != num_groups:
            raise reject(function, "sf.size(-3)", f"num_groups = {num_groups}", sf.size(0))
    if sf.size(-2) != ceil_div(mn, gran_mn):
        raise reject(function, "sf.size(-2)", f"ceil(mn / gran_mn) = ceil({mn} / {gran_mn}) = {ceil_div(mn, gran_mn)}",
                     sf.size(-2))
    sk_divisor = gran_k if sf.dtype == torch.float32 else 4 * gran_k
    if sf.size(-1) != ceil_div(k, sk_divisor):
        raise reject(function, "sf.size(-1)", f"ceil(k / {sk_divisor}) = {ceil_div(k, sk_divisor)} for {sf.dtype}",
                     sf.size(-1))

    is_sm100 = current_arch_major() == 10
    if sf.dtype == torch.float32:
        if (gran_mn, gran_k) == (1, 128) and (not is_sm100 or disable_ue8m0_cast):
            return get_mn_major_tma_aligned_tensor(sf)
        if (gran_mn, gran_k) == (128, 128) and (not is_sm100 or disable_ue8m0_cast):
            _check_sfb_sm90(function, sf)
            return sf
        if is_sm100 and not disable_ue8m0_cast and gran_k in (32, 128):
            if gran_mn == 1:
                return get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout)
            if psum_layout is not None:
                # The index_select of the definition makes the packing input contiguous.
                _check_psum_layout(function, psum_layout, sf, packed_input_contiguous=True)
            # The row broadcast of the definition is fused into the CUDA packing kernel.
            return _packed_ue8m0(sf, mn, gran_mn, psum_layout)
    elif is_sm100 and gran_k in (32, 128):
        if gran_mn != 1:
            raise reject(function, "recipe", "gran_mn == 1 for an int32 (packed UE8M0) SF", f"gran_mn = {gran_mn}")
        _check_tma_aligned(function, sf)
        return sf
    arch = "none (no GPU)" if current_arch_major() is None else f"SM{current_arch_major()}0"
    raise reject(function, "sf", "a supported combination (Unknown SF transformation)",
                 f"dtype {sf.dtype}, granularity ({gran_mn}, {gran_k}), arch {arch}, "
                 f"disable_ue8m0_cast={disable_ue8m0_cast}")
