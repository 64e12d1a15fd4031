"""Test data shared by the FP4 cast tests on the GPU (tests/test_fp4_gpu.py) and under the
interpreter (tests/interpret/test_fp4.py)."""
import torch

from dg_triton import reference_quant


def fp4_tie_row() -> torch.Tensor:
    """128 values that, once scaled, sit on and next to every rounding threshold, plus small
    negatives that round to zero (no sign bit), every magnitude and a saturating 5.5. Every group
    of 32 starts with +-6, so its amax is 6 and sf is exactly 1 with or without UE8M0 (times the
    power of two the caller applies), which makes the scaled values exact."""
    thresholds = torch.tensor(reference_quant.FP4_E2M1_THRESHOLDS)
    magnitudes = torch.tensor(reference_quant.FP4_E2M1_MAGNITUDES)
    above = torch.nextafter(thresholds, torch.tensor(10.0))
    below = torch.nextafter(thresholds, torch.tensor(0.0))
    values = torch.cat([
        thresholds, -thresholds, above, below, -above, -below, magnitudes, -magnitudes,
        torch.tensor([5.5, -5.5, -0.1, -0.25, -1e-6, 0.0, -0.0, 1e-6, 0.24, -0.26]),
    ])  # 68 values
    row = torch.zeros(128)
    filler = values.repeat(2)[:124]
    for group in range(4):
        row[32 * group] = 6.0 if group % 2 == 0 else -6.0
        row[32 * group + 1:32 * group + 32] = filler[31 * group:31 * group + 31]
    return row
