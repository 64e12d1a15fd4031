"""The arithmetic of dg_triton.triton.exact_math.div_rn_by_odd, replayed in numpy for every fp32
significand: q = RN(a * RN(1/B)), r = RN(a - q*B) (exact, an FMA on the GPU), RN(q + r * RN(1/B))
must equal the correctly rounded a / B. The quotient scales exactly with a's exponent while
everything stays normal, so one binade covers the casts' whole domain. (The kernels' own results,
and reciprocal_rn's, are checked bitwise against div_rn for every positive fp32 on the GPU:
benchmarks/probe_prologue.py; the interpreter tests run the helpers inside the casts.)
"""
import numpy as np
import pytest


def _fma_last_step_risky(q, r, y):
    """q + r*y computed in float64 (r*y is exact there) can round twice only if the float64 sum
    sits within 2^-50 (relative) of a float32 midpoint; returns those positions."""
    s = q.astype(np.float64) + r.astype(np.float64) * np.float64(y)
    q2 = s.astype(np.float32)
    up = np.nextafter(q2, np.float32(np.inf)).astype(np.float64)
    down = np.nextafter(q2, np.float32(0)).astype(np.float64)
    here = q2.astype(np.float64)
    near = lambda mid: np.abs(s - mid) <= np.abs(s) * 2.0 ** -50  # noqa: E731
    return q2, near((here + up) / 2) | near((here + down) / 2)


@pytest.mark.parametrize("divisor", [7, 3])
def test_fma_corrected_division_is_correctly_rounded_for_every_significand(divisor):
    y = np.float32(1.0) / np.float32(divisor)
    a = (np.arange(2 ** 23, 2 ** 24, dtype=np.int64).astype(np.float64) * 2.0 ** -23).astype(np.float32)
    q = a * y
    r = (a.astype(np.float64) - q.astype(np.float64) * divisor).astype(np.float32)
    q2, risky = _fma_last_step_risky(q, r, y)
    assert not risky.any(), "a float64 replay of the last FMA would be ambiguous here"
    # a / B is never a float32 midpoint (B odd > 1), so the float64 quotient rounds correctly.
    want = (a.astype(np.float64) / divisor).astype(np.float32)
    mismatches = np.nonzero(q2 != want)[0]
    assert mismatches.size == 0, f"{mismatches.size} significands differ, first a = {a[mismatches[0]]!r}"
    # The plain product is not enough on its own (this is why the correction step is there).
    assert (q != want).any()
