"""Reference math of the dense FP8 / FP8xFP4 GEMMs (API.md 3.1) and of fp8_gemm_nt_skip_head_mid
(API.md 3.3), in plain torch on any device.

Each operand is dequantized on its own, every value times the scale factor of its group (the SF
broadcast over ``gran_mn`` rows and ``gran_k`` columns), then multiplied in FP32, ``c`` added and the
sum cast to d's dtype:

    A = dequant(a, sfa, (gran_m, gran_k_a)); B = dequant(b, sfb, (gran_n, gran_k_b))
    D = (C.float() if c is not None else 0) + A @ B.T ; d[:] = D.to(d.dtype)

The kernels round differently (SM90 promotes raw FP8 partial sums per 128 of K by ``sfa * sfb``),
so they are compared with this by ``calc_diff`` thresholds (API.md 8), not bitwise. No argument
checks beyond what the math needs: the public functions validate. FP32 matmuls follow torch's global
precision setting, as in reference.py.
"""
import torch

from .reference import _TRANSPOSED_OPERANDS, bf16_gemm_reference
from .reference_quant import (
    dequantize_from_fp4_e2m1,
    unpack_fp4_codes,
    unpack_ue8m0_from_int,
)

__all__ = [
    "dequantize_operand",
    "fp8_gemm_nt_skip_head_mid_reference",
    "fp8_gemm_reference",
    "resolve_recipe",
]


def _ceil_div(x: int, y: int) -> int:
    return (x + y - 1) // y


def resolve_recipe(sfb: torch.Tensor, recipe=None, recipe_a=None, recipe_b=None):
    """((gran_m, gran_k_a), (gran_n, gran_k_b)) of API.md 1.5. With no recipe: (1, 128, 128) for an
    fp32 sfb (per-block weights), (1, 1, 128) for an int32 (packed UE8M0, per-token) sfb."""
    if recipe_a is not None or recipe_b is not None:
        return tuple(recipe_a), tuple(recipe_b)
    if recipe is None:
        recipe = (1, 128, 128) if sfb.dtype == torch.float32 else (1, 1, 128)
    return (recipe[0], recipe[2]), (recipe[1], recipe[2])


def _unpacked_fp4(data: torch.Tensor, mn: int) -> torch.Tensor:
    """E2M1 values (fp32 [mn, k]) of int8 data packed along its K dim ([mn, k/2]) or along its MN
    dim ([mn/2, k], API.md 1.4). The row count tells which: mn rows mean packed along K."""
    if data.size(0) == mn:
        return dequantize_from_fp4_e2m1(unpack_fp4_codes(data))
    return dequantize_from_fp4_e2m1(unpack_fp4_codes(data.T)).T


def dequantize_operand(data: torch.Tensor, sf: torch.Tensor, mn: int, gran_mn: int, gran_k: int) -> torch.Tensor:
    """fp32 [mn, k] values of a logical [mn, k] operand: FP8 E4M3 data [mn, k], or FP4 int8 packed
    along K ([mn, k/2]) or along MN ([mn/2, k]); sf fp32 [ceil(mn/gran_mn), ceil(k/gran_k)] or int32
    packed UE8M0 [mn, ceil(ceil(k/gran_k)/4)] (gran_mn 1), any strides."""
    values = _unpacked_fp4(data, mn) if data.dtype == torch.int8 else data.float()
    k = values.size(1)
    if sf.dtype == torch.int32:
        sf = unpack_ue8m0_from_int(sf)[:, :_ceil_div(k, gran_k)]
    rows = torch.arange(mn, device=sf.device) // gran_mn
    cols = torch.arange(k, device=sf.device) // gran_k
    return values * sf.float()[rows][:, cols]


def _logical_k(data: torch.Tensor, mn: int) -> int:
    if data.dtype == torch.int8 and data.size(0) == mn:
        return 2 * data.size(1)
    return data.size(1)


def fp8_gemm_reference(a, b, d: torch.Tensor, c: torch.Tensor | None = None, recipe=None,
                       recipe_a=None, recipe_b=None, layout: str = "nt") -> torch.Tensor:
    """The D that ``fp8_fp4_gemm_<layout>(a, b, d, c, recipe, recipe_a, recipe_b)`` must leave
    behind, as a new tensor of d's dtype and shape; ``a`` = (data, sf) and ``b`` as the caller
    passes them to that alias (transposed operands with transposed SFs, API.md 1.1).

    Empty problems follow API.md 1.3: M == 0 or N == 0 leaves d as it was; K == 0 gives c (or zeros).
    """
    a_transposed, b_transposed = _TRANSPOSED_OPERANDS[layout]
    a_data, sfa = (t.transpose(0, 1) for t in a) if a_transposed else a
    b_data, sfb = (t.transpose(0, 1) for t in b) if b_transposed else b
    m, n = d.shape
    k = _logical_k(a_data, m)
    if m == 0 or n == 0:
        return d.clone()
    if k == 0:
        return c.to(d.dtype).clone() if c is not None else torch.zeros_like(d)
    gran_a, gran_b = resolve_recipe(sfb, recipe, recipe_a, recipe_b)
    a_values = dequantize_operand(a_data, sfa, m, *gran_a)
    b_values = dequantize_operand(b_data, sfb, n, *gran_b)
    return bf16_gemm_reference(a_values, b_values, c, d.dtype)


def fp8_gemm_nt_skip_head_mid_reference(a, b, d: torch.Tensor, head_splits, recipe=None) -> torch.Tensor:
    """The D that ``fp8_gemm_nt_skip_head_mid(a, b, d, head_splits, recipe)`` must leave behind, as
    a new contiguous tensor: the product ``P = dequant(a) @ dequant(b).T`` [M, N] in d's dtype,
    viewed [M, H, left + right] (H = N / (left + right)), written to d viewed [M, H, left + mid +
    right] as ``out[:, :, :left] = P[:, :, :left]`` and ``out[:, :, left + mid:] = P[:, :, left:]``;
    the mid columns keep d's values. M == 0 leaves d as it was."""
    left, mid, right = head_splits
    out = d.clone(memory_format=torch.contiguous_format)
    m = d.size(0)
    if m == 0:
        return out
    n = b[0].size(0)
    heads = n // (left + right)
    product = fp8_gemm_reference(a, b, torch.empty(m, n, dtype=d.dtype, device=d.device), None, recipe)
    product = product.view(m, heads, left + right)
    out_heads = out.view(m, heads, left + mid + right)
    out_heads[:, :, :left] = product[:, :, :left]
    out_heads[:, :, left + mid:] = product[:, :, left:]
    return out
