"""Triton kernels under the interpreter (TRITON_INTERPRET=1) on CPU tensors.

This folder runs in its own pytest process (scripts/test.sh): the variable must be set before
Triton is imported, and once set, triton.compile no longer works in that process (TOOLCHAIN.md),
so the compile-only tests cannot share it.
"""
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
# tests/'s helper modules (e.g. fp4_ties.py, shared with the GPU tests) importable from here.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # noqa: E402


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.interpret)


# Test-only fix for the interpreter's fp32 -> fp8e4nv / bf16 cast, which truncates and mis-rounds
# (7.9 -> 4.0 in e4m3; TOOLCHAIN.md, upstream PR triton#11897): route those two conversions through
# torch's round-to-nearest-even cast. Same signature and return type as the original (a numpy array
# of the output's unsigned-integer bit type, shaped like the input); other dtype pairs and RTZ keep
# the original code. Never in the package: the GPU path does not go through this function.
import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton.language as tl  # noqa: E402
from triton._C.libtriton import ir as _triton_ir  # noqa: E402
from triton.runtime import interpreter as _interpreter  # noqa: E402

_original_convert_float = _interpreter._convert_float
_TORCH_FLOAT_TARGETS = {
    tl.float8e4nv: (torch.float8_e4m3fn, torch.uint8, np.uint8),
    tl.bfloat16: (torch.bfloat16, torch.int16, np.uint16),
}


def _convert_float_through_torch(input, input_dtype, output_dtype, rounding_mode):
    target = _TORCH_FLOAT_TARGETS.get(output_dtype)
    if input_dtype != tl.float32 or target is None or rounding_mode == _triton_ir.ROUNDING_MODE.RTZ:
        return _original_convert_float(input, input_dtype, output_dtype, rounding_mode)
    torch_dtype, torch_bits_dtype, numpy_bits_dtype = target
    values = torch.from_numpy(np.frombuffer(input.tobytes(), dtype=np.float32).copy())
    bits = values.to(torch_dtype).view(torch_bits_dtype).numpy().view(numpy_bits_dtype)
    return bits.reshape(input.shape)


_interpreter._convert_float = _convert_float_through_torch
