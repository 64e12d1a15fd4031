"""fp32 helpers for the casts, whose scale factors must be bitwise equal to the torch reference:
correctly rounded divisions cheaper than ``tl.math.div_rn`` (``sf = amax / 448`` or ``amax / 6``,
then ``1 / sf``), and a max that keeps NaN as ``torch.amax`` does.

``tl.math.div_rn`` lowers to ``div.rn.f32``: on sm_90a a reciprocal estimate, four FMAs, an
``FCHK`` range test and a call to a slow-path subroutine, whose calling convention costs register
moves and registers around every division. In the per-channel FP8 cast, where every thread
repeats the divisions of the columns it holds, they were a third of the SASS; in the FP4 cast the
slow-path call held 117 registers at 8192 elements a program (71 without it).

- ``div_rn_by_odd(a, B, RECIP_B, POW2)`` = RN(a / (B * POW2)), B odd, POW2 a power of two:
  q = RN(a * RN(1/B)), the exact residual r = a - q * B (an FMA), RN(q + r * RN(1/B)) (an FMA),
  then the exact scaling by 1/POW2. Inf stays Inf (its residual would be NaN, hence the select),
  NaN stays NaN.
- ``reciprocal_rn(x)`` = RN(1 / x): ``1.0 / x`` (div.full.f32, within 2 ulp) refined by two
  Newton steps, each an FMA residual and an FMA update; +Inf gives 0, NaN NaN.

Checked on the H200 (benchmarks/probe_prologue.py, results/probe_prologue-h200.txt), bitwise
against ``div_rn`` for every fp32 from 2^-100 to +Inf: no mismatch for ``a / 448`` and ``a / 6``,
none for ``1 / x`` below 2^126 * 1.58 (five above, where 1 / x is subnormal; the casts' scale
factors stay below 3.4e38 / 6). tests/test_exact_math.py replays the division's arithmetic in
numpy for every significand (one binade decides every normal one).

The Triton interpreter's ``tl.fma`` is a numpy multiply then add (two roundings), so under it
these helpers are not exact: launchers ask ``fused_fma()`` and fall back to ``div_rn`` (the same
bits, by the check above).
"""
import triton
import triton.language as tl

from dg_triton.env import env_flag


def fused_fma() -> bool:
    """Whether tl.fma rounds once (on a GPU; not under TRITON_INTERPRET=1)."""
    return not env_flag("TRITON_INTERPRET")


@triton.jit
def div_rn_by_odd(a, B: tl.constexpr, RECIP_B: tl.constexpr, POW2: tl.constexpr):
    """RN(a / (B * POW2)) for a >= 2^-100; RECIP_B is 1/B as a Python float (rounded to fp32)."""
    q = a * RECIP_B
    residual = tl.fma(-q, B, a)
    q = tl.fma(residual, RECIP_B, q)
    return tl.where(a == float("inf"), a, q * (1.0 / POW2))


@triton.jit
def div_rn_by_448(a):
    """RN(a / 448), the FP8 E4M3 scale's division (448 = 7 * 2^6)."""
    return div_rn_by_odd(a, 7.0, 0.14285714285714285, 64.0)


@triton.jit
def div_rn_by_6(a):
    """RN(a / 6), the FP4 E2M1 scale's division (6 = 3 * 2)."""
    return div_rn_by_odd(a, 3.0, 0.3333333333333333, 2.0)


@triton.jit
def reciprocal_rn(x):
    """RN(1 / x) for x in [2^-100, 1.3e38], +Inf -> 0, NaN -> NaN."""
    y = 1.0 / x
    y = tl.fma(tl.fma(-x, y, 1.0), y, y)
    y = tl.fma(tl.fma(-x, y, 1.0), y, y)
    return tl.where(x == float("inf"), 0.0, y)


@triton.jit
def max_keeping_nan(a, b):
    """Max whose result is NaN if either operand is, on the GPU (max.NaN) as in the interpreter,
    like torch.amax; ``tl.max`` on floats drops a NaN (maxnum on NVIDIA, ``np.nanmax`` in the
    interpreter). One FMNMX per value, an abs folded into it as an operand modifier."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
