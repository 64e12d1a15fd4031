"""Integer helpers of ``deep_gemm.utils.math`` (API.md 3.15), re-exported at the top level.

The cast helpers of API.md 3.15 belong here too; whoever adds one also lists it in ``__all__`` so
``dg_triton.utils`` picks it up.
"""

__all__ = ["ceil_div", "align"]


def ceil_div(x: int, y: int) -> int:
    # Plain integer arithmetic, no checks: it runs inside every shape computation on the call path.
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    return ceil_div(x, y) * y
