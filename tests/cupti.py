"""A skip marker for the GPU tests that read kernel names or durations through CUPTI
(torch.profiler): nsys, ncu and compute-sanitizer hold CUPTI while they run, which
DG_USE_NVIDIA_TOOLS says (API.md 11), and dg_triton.testing then refuses those reads."""
import pytest

from dg_triton.testing import _nvidia_tools_on

needs_cupti = pytest.mark.skipif(_nvidia_tools_on(),
                                 reason="DG_USE_NVIDIA_TOOLS: CUPTI is held by an NVIDIA tool")
