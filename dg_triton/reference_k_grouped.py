"""Plain-torch reference math of the K-grouped GEMMs (API.md 3.6), the spec the kernels are tested
against, and the layout helper that builds SM90's FP8 ``nt`` operands from per-channel casts.

Group g covers K rows ``[start_g, start_g + k_g)`` with ``start_g = sum_{h<g} k_h`` (``ks`` is the
host list the GEMMs take as ``ks_cpu``). Each reference returns the D the GEMM leaves behind, as a
new tensor of c's dtype: ``D[g] = C[g] + P_g`` summed in FP32, so an empty group gives ``C[g]``.
No argument checks: the public functions validate.
"""
import torch

from dg_triton.reference import bf16_gemm_reference
from dg_triton.reference_fp8 import dequantize_operand

__all__ = [
    "k_grouped_bf16_tn_reference",
    "k_grouped_fp8_nt_reference",
    "k_grouped_nt_operand",
    "k_grouped_starts",
]

_GRAN_K = 128


def k_grouped_starts(ks) -> list[int]:
    """start_g = sum of the sizes before group g."""
    starts, start = [], 0
    for k in ks:
        starts.append(start)
        start += k
    return starts


def k_grouped_bf16_tn_reference(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, ks) -> torch.Tensor:
    """``k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ..., c)``'s D: a [sum(ks), M], b [sum(ks), N];
    ``D[g] = c[g] + a[rows_g].float().T @ b[rows_g].float()``."""
    out = c.clone()
    for g, (start, k) in enumerate(zip(k_grouped_starts(ks), ks)):
        if k:
            rows = slice(start, start + k)
            out[g] = bf16_gemm_reference(a[rows].T, b[rows].T, c[g], c.dtype)
    return out


def k_grouped_fp8_nt_reference(a, b, c: torch.Tensor, ks) -> torch.Tensor:
    """``k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, ..., c)``'s D: a = (A flat fp8, sfa fp32
    [M, sum(ks)/128]), b = (B flat fp8, sfb fp32 [N, sum(ks)/128]), any SF strides; group g's A is
    the row-major [M, k_g] block at element offset M * start_g (B likewise with N), dequantized
    with sfa's columns [start_g / 128, (start_g + k_g) / 128) (per token, per 128 of K);
    ``D[g] = c[g] + A_g @ B_g.T`` in FP32."""
    (a_data, sfa), (b_data, sfb) = a, b
    m, n = c.shape[1:]
    a_flat, b_flat = a_data.reshape(-1), b_data.reshape(-1)
    out = c.clone()
    for g, (start, k) in enumerate(zip(k_grouped_starts(ks), ks)):
        if not k:
            continue
        columns = slice(start // _GRAN_K, (start + k) // _GRAN_K)
        a_g = dequantize_operand(a_flat[m * start:m * (start + k)].view(m, k), sfa[:, columns], m, 1, _GRAN_K)
        b_g = dequantize_operand(b_flat[n * start:n * (start + k)].view(n, k), sfb[:, columns], n, 1, _GRAN_K)
        out[g] = bf16_gemm_reference(a_g, b_g, c[g], c.dtype)
    return out


def k_grouped_nt_operand(data: torch.Tensor, sf: torch.Tensor, ks) -> tuple[torch.Tensor, torch.Tensor]:
    """SM90's ``nt`` operand (API.md 3.6) from a per-channel cast of a ``tn`` one: ``data`` fp8
    [sum(ks), MN] and ``sf`` fp32 [sum(ks)/128, MN] (``per_channel_cast_to_fp8``) -> (the flat
    buffer of each group's rows transposed to a row-major [MN, k_g] block, ``sf.T`` [MN, sum(ks)/128]).
    Upstream's tests build their wgrad operands the same way."""
    mn = data.shape[1]
    # Copied as bytes: a strided copy is defined for every integer dtype, on every device.
    codes = data.view(torch.uint8)
    flat = torch.empty(data.numel(), dtype=torch.uint8, device=data.device)
    for start, k in zip(k_grouped_starts(ks), ks):
        flat[mn * start:mn * (start + k)].view(mn, k).copy_(codes[start:start + k].T)
    return flat.view(data.dtype), sf.T
