"""Plain-torch reference math for every public function of dg_triton.

Tests compare each kernel with the function here, and the docs point here for the exact semantics.
Everything is computed in FP32 on the inputs' device with no kernel of ours involved, so the
reference cannot share a bug with the code it checks. Each family appends its section below.

FP32 matmuls here follow torch's global precision setting; its default ("highest") keeps them
out of TF32, which would otherwise make the reference coarser than the kernels under test.
"""
import torch

from .errors import reject

# ---------------------------------------------------------------------------------------------
# Dense GEMMs (API.md 1.1, 1.3, 3.2): D = C + A @ B with the logical problem A [M, K], B [N, K].

# How each alias passes the physical tensors, as (A is [K, M], B is [K, N]) (API.md 1.1 table).
_TRANSPOSED_OPERANDS = {
    "nt": (False, False),
    "nn": (False, True),
    "tn": (True, True),
    "tt": (True, False),
}


def bf16_gemm_reference(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None,
                        out_dtype: torch.dtype) -> torch.Tensor:
    """``(c or 0) + a @ b.T`` in FP32 for logical ``a [M, K]``, ``b [N, K]``, cast to ``out_dtype``."""
    acc = a.float() @ b.float().T
    if c is not None:
        acc = c.float() + acc
    return acc.to(out_dtype)


def gemm_reference(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None,
                   layout: str) -> torch.Tensor:
    """The D that ``*_gemm_<layout>(a, b, d, c)`` must leave behind, as a new tensor of d's dtype
    and shape; ``a``, ``b`` are the tensors as the caller passes them to that alias.

    Empty problems follow API.md 1.3: M == 0 or N == 0 leaves d as it was; K == 0 gives c (or zeros).
    """
    if layout not in _TRANSPOSED_OPERANDS:
        raise reject("gemm_reference", "layout", "one of 'nt', 'nn', 'tn', 'tt'", repr(layout))
    a_transposed, b_transposed = _TRANSPOSED_OPERANDS[layout]
    a = a.transpose(0, 1) if a_transposed else a
    b = b.transpose(0, 1) if b_transposed else b
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0:
        return d.clone()
    if k == 0:
        return c.to(d.dtype).clone() if c is not None else torch.zeros_like(d)
    return bf16_gemm_reference(a, b, c, d.dtype).reshape(d.shape)
