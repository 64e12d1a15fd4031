"""Layout helpers of ``deep_gemm.utils.layout`` (API.md 2.5, 3.13), re-exported at the top level.

The m/k alignment of the contiguous grouped layouts is process-wide state like the settings in
``dg_triton.settings``; it lives here because DeepGEMM exports it from ``utils.layout``.
"""
from ..errors import reject
from ..settings import current_arch_major, int_argument
from .math import align

__all__ = [
    "get_tma_aligned_size",
    "set_mk_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_k_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
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
