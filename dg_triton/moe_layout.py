"""MoE token layouts for the m-grouped GEMMs (a dg_triton extension; API.md 3.4 / 3.5 define the
layouts, not these helpers): permute routed tokens into the contiguous or masked layout, optionally
casting them to FP8 on the way, and combine the expert outputs back into token order.

Every function runs the Triton kernels of ``dg_triton.triton.moe_layout`` on CUDA tensors and the
plain-torch reference ``dg_triton.reference_moe_layout`` (the specification, read it for the exact
layouts) on any other device. On CUDA nothing synchronizes with the host: output sizes come from
host-known numbers only, so the calls can be captured in a CUDA graph.

Routing conventions shared by all three functions:

- ``topk_ids`` int32/int64 ``[T, topk]``: each slot (t, k) names an expert in ``[0, E)`` or is -1
  (unused). Ids must be in ``[-1, E)``; checking that would need a host sync, so it is not checked.
  Any other value is treated exactly like -1 (the slot is unused), and no kernel ever writes out
  of bounds because of one.
- Inside an expert, slots are placed in ascending flat index ``t * topk + k``. Every output is
  therefore deterministic, bitwise, run to run.
- ``row_of_slot`` int32 ``[T, topk]`` is the permuted row of each slot (-1 if it has none); it is
  what ``moe_unpermute_combine`` takes back.

NaN/Inf in ``x``: unquantized rows are bit copies, so they land exactly as the reference puts them.
With ``quantize`` a K-group holding NaN/Inf gets unspecified data and scale (the per-token cast
kernel promises only "no hang, same shapes" there); every other token's data and scales stay exact,
and the layout indices never depend on the data.

Host cost: each permute is three to five Triton launches (about 200-450 us of Python on the H200
host, against 250-410 us of device time at 8192 tokens x top-8, H = 7168). Capture the call in a
CUDA graph where that matters; nothing in it synchronizes.
"""
import torch

from . import reference_moe_layout
from .errors import reject
from .reference_moe_layout import (
    MoEContiguousLayout,
    MoEMaskedLayout,
    contiguous_layout_rows,
)
from .settings import bool_argument, int_argument
from .utils.layout import get_mk_alignment_for_contiguous_layout

__all__ = [
    "MoEContiguousLayout",
    "MoEMaskedLayout",
    "contiguous_layout_rows",
    "moe_permute_contiguous",
    "moe_permute_masked",
    "moe_unpermute_combine",
]

# The ranking kernels keep a one-hot tile of [slots, experts] in registers (dg_triton.triton.moe_layout).
MAX_EXPERTS = 4096
# Row indices, segment starts and psum are int32 (the GEMMs take int32 grouped layouts).
_INT32_LIMIT = 2**31 - 1
# The ranking kernel indexes slots in int32, chunk-rounded.
_MAX_SLOTS = 2**30


def _kernels():
    # Imported on first CUDA use: importing Triton costs time a CPU-only user never needs.
    from .triton import moe_layout

    return moe_layout


def _check_tensor(function: str, name: str, value, dims: int | tuple, dtypes: tuple):
    if not isinstance(value, torch.Tensor):
        raise reject(function, name, "a torch.Tensor", type(value).__name__)
    dims = (dims,) if isinstance(dims, int) else dims
    if value.dim() not in dims:
        expected = " or ".join(f"{d}-D" for d in dims)
        raise reject(function, name, expected, f"{value.dim()}-D shape {tuple(value.shape)}")
    if value.dtype not in dtypes:
        raise reject(function, f"{name}.dtype", " or ".join(str(d) for d in dtypes), value.dtype)


def _check_routing(function: str, x, topk_ids, num_experts) -> int:
    """Checks shared by both permutes; returns num_experts as an int."""
    _check_tensor(function, "x", x, 2, (torch.bfloat16,))
    _check_tensor(function, "topk_ids", topk_ids, 2, (torch.int32, torch.int64))
    if topk_ids.size(0) != x.size(0):
        raise reject(function, "topk_ids.size(0)", f"x.size(0) = {x.size(0)} (one row per token)",
                     topk_ids.size(0))
    if topk_ids.size(1) < 1:
        raise reject(function, "topk_ids.size(1)", "at least 1 (topk)", topk_ids.size(1))
    if topk_ids.device != x.device:
        raise reject(function, "topk_ids.device", f"x.device = {x.device}", topk_ids.device)
    num_experts = int_argument(function, "num_experts", num_experts)
    if not 1 <= num_experts <= MAX_EXPERTS:
        raise reject(function, "num_experts", f"in [1, {MAX_EXPERTS}]", num_experts)
    if x.size(0) * topk_ids.size(1) > _MAX_SLOTS:
        raise reject(function, "topk_ids", "at most 2**30 slots (T * topk)", x.size(0) * topk_ids.size(1))
    return num_experts


def _check_quantization(function: str, x, quantize, use_ue8m0, gran_k) -> tuple[bool, bool, int]:
    quantize = bool_argument(function, "quantize", quantize)
    use_ue8m0 = bool_argument(function, "use_ue8m0", use_ue8m0)
    gran_k = int_argument(function, "gran_k", gran_k)
    if gran_k <= 0:
        raise reject(function, "gran_k", "positive", gran_k)
    if quantize and x.is_cuda and gran_k & (gran_k - 1):
        # tl.arange needs a power-of-two extent (as per_token_cast_to_fp8 on CUDA).
        raise reject(function, "gran_k", "a power of two for CUDA tensors", gran_k)
    return quantize, use_ue8m0, gran_k


def moe_permute_contiguous(x, topk_ids, num_experts, alignment=None, use_psum_layout=False, quantize=False,
                           use_ue8m0=False, gran_k=128) -> MoEContiguousLayout:
    """Routed tokens in the m-grouped contiguous layout (API.md 3.4) the contiguous GEMMs read.

    ``x`` bf16 ``[T, H]`` (any strides), ``topk_ids`` ``[T, topk]`` (module docstring), ``E =
    num_experts``. ``alignment`` defaults to ``get_mk_alignment_for_contiguous_layout()`` at call
    time. Expert g's segment starts at a multiple of ``alignment``: its slots' token rows in flat
    order, then zero padding rows up to the next multiple (an expert with no slot takes no rows).

    The row count is fixed on the host, without looking at the routing: it is the upper bound
    ``M_pad = align(T * topk + E * (alignment - 1), alignment)``, which assumes every slot is used.
    Rows past the last segment (tail rows) are zero too, with ``m_indices`` -1.

    Returns a ``MoEContiguousLayout``:

    - ``permuted`` bf16 ``[M_pad, H]``; with ``quantize`` the float8_e4m3fn data of the 1 x gran_k
      per-token cast, with ``sf`` fp32 ``[M_pad, ceil(H/gran_k)]`` in the TMA-aligned MN-major layout
      (API.md 2.3): bitwise what ``per_token_cast_to_fp8(permuted_bf16, use_ue8m0, gran_k)`` gives,
      so padding rows are q = 0 with the SF of a zero row. The cast reads each token once.
    - ``m_indices`` int32 ``[M_pad]`` (expert of each row, -1 on padding/tail rows), or None when
      ``use_psum_layout``; ``psum`` int32 ``[E]``, the end row of each expert, always (the rows are
      the same in both forms: expert g occupies ``[align(psum[g-1], alignment), psum[g])``).
    - ``row_of_slot`` int32 ``[T, topk]``, ``expert_counts`` int32 ``[E]``.
    - ``.a`` and ``.grouped_layout`` give the GEMM's ``a`` and ``grouped_layout`` arguments.
    """
    function = "moe_permute_contiguous"
    num_experts = _check_routing(function, x, topk_ids, num_experts)
    if alignment is None:
        alignment = get_mk_alignment_for_contiguous_layout()
    alignment = int_argument(function, "alignment", alignment)
    if alignment <= 0:
        raise reject(function, "alignment", "positive", alignment)
    use_psum_layout = bool_argument(function, "use_psum_layout", use_psum_layout)
    quantize, use_ue8m0, gran_k = _check_quantization(function, x, quantize, use_ue8m0, gran_k)
    num_rows = contiguous_layout_rows(x.size(0), topk_ids.size(1), num_experts, alignment)
    if num_rows > _INT32_LIMIT:
        raise reject(function, "x", f"a layout of at most 2**31 - 1 rows (M_pad with alignment {alignment})",
                     num_rows)
    if x.is_cuda:
        return _kernels().permute_contiguous(x, topk_ids, num_experts, alignment, use_psum_layout, quantize,
                                             use_ue8m0, gran_k)
    return reference_moe_layout.moe_permute_contiguous(x, topk_ids, num_experts, alignment, use_psum_layout,
                                                       quantize, use_ue8m0, gran_k)


def moe_permute_masked(x, topk_ids, num_experts, max_m, quantize=False, use_ue8m0=False,
                       gran_k=128) -> MoEMaskedLayout:
    """Routed tokens in the m-grouped masked layout (API.md 3.5) the masked GEMMs read.

    Expert g's slots, in flat order, fill rows ``0..`` of ``permuted[g]``; rows at and past
    ``masked_m[g]`` are zero. An expert can take ``max_m`` slots: the slots after its first
    ``max_m`` are **dropped** (``row_of_slot`` -1, so the combine gives them weight 0). Nothing is
    raised, since that would need a host sync; ``expert_counts`` holds the true counts, so a caller
    detects overflow on the device with ``(expert_counts > max_m).any()``.

    Returns a ``MoEMaskedLayout``: ``permuted`` bf16 ``[E, max_m, H]`` (or, with ``quantize``,
    float8_e4m3fn with ``sf`` fp32 ``[E, max_m, ceil(H/gran_k)]`` TMA-aligned MN-major, API.md 2.3,
    bitwise the per-token cast of the bf16 layout), ``masked_m`` int32 ``[E]`` = ``min(count,
    max_m)``, ``row_of_slot`` int32 ``[T, topk]`` = ``g * max_m + r`` (-1 if unused or dropped) and
    ``expert_counts`` int32 ``[E]``. ``.a`` is the GEMM's ``a`` argument.
    """
    function = "moe_permute_masked"
    num_experts = _check_routing(function, x, topk_ids, num_experts)
    max_m = int_argument(function, "max_m", max_m)
    if max_m <= 0:
        raise reject(function, "max_m", "positive", max_m)
    if num_experts * max_m > _INT32_LIMIT:
        raise reject(function, "max_m", f"at most (2**31 - 1) // num_experts = {_INT32_LIMIT // num_experts}",
                     max_m)
    quantize, use_ue8m0, gran_k = _check_quantization(function, x, quantize, use_ue8m0, gran_k)
    if x.is_cuda:
        return _kernels().permute_masked(x, topk_ids, num_experts, max_m, quantize, use_ue8m0, gran_k)
    return reference_moe_layout.moe_permute_masked(x, topk_ids, num_experts, max_m, quantize, use_ue8m0, gran_k)


def moe_unpermute_combine(y, row_of_slot, topk_weights) -> torch.Tensor:
    """Expert outputs back in token order, weighted: bf16 ``[T, N]`` with
    ``out[t] = bf16(sum over used k, in increasing k, of float(y[row_of_slot[t, k]]) * topk_weights[t, k])``,
    accumulated in fp32 from 0, each product and each sum rounded once (no FMA). A token with no
    used slot gets 0.

    ``y`` bf16 or fp32: ``[M_pad, N]`` (contiguous layout) or ``[E, max_m, N]`` (masked; row
    ``g * max_m + r`` is ``y[g, r]``), any strides. ``row_of_slot`` int32 ``[T, topk]`` as the permutes
    return it; a slot is used when its row is in ``[0, rows of y)``, and an unused slot's weight is
    never read. ``topk_weights`` fp32 ``[T, topk]``.
    """
    function = "moe_unpermute_combine"
    _check_tensor(function, "y", y, (2, 3), (torch.bfloat16, torch.float32))
    _check_tensor(function, "row_of_slot", row_of_slot, 2, (torch.int32,))
    _check_tensor(function, "topk_weights", topk_weights, 2, (torch.float32,))
    if topk_weights.shape != row_of_slot.shape:
        raise reject(function, "topk_weights.shape", f"row_of_slot.shape = {tuple(row_of_slot.shape)}",
                     tuple(topk_weights.shape))
    for name, tensor in (("row_of_slot", row_of_slot), ("topk_weights", topk_weights)):
        if tensor.device != y.device:
            raise reject(function, f"{name}.device", f"y.device = {y.device}", tensor.device)
    if y.is_cuda:
        return _kernels().unpermute_combine(y, row_of_slot, topk_weights)
    return reference_moe_layout.moe_unpermute_combine(y, row_of_slot, topk_weights)
