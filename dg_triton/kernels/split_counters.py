"""Zeroed per-launch counters for split-K reductions that captured launches can take without a
kernel (the SM90 split-K epilogue, cuda_kernels/sm90/splitk_epilogue.cuh, and the GEMV's,
dg_triton/triton/gemv.py): the last K slice to arrive at a tile sums the partials and resets the
tile's counter, so counters only need zeroing once, when they are made.

Eager launches zero theirs with torch.zeros. Under CUDA-graph capture torch.zeros would become a
fill kernel in the graph that every replay runs (a second kernel beside each small-M split-K GEMM:
1.1-1.6 us of replay time on the H200, 2026-12-02, benchmarks/results/probe_latency-h200.txt), so
captured launches take slices of a reserve that an eager launch zeroed and waited for.
"""
import threading
import warnings

import torch

RESERVE_COUNTERS = 1 << 16
# Slices start at multiples of 128 bytes: Triton specializes a pointer argument on 16-byte
# alignment, and a captured launch must not need a kernel the eager warm-up did not build.
SLICE_ALIGNMENT = 32
_zeroed_reserve: dict = {}   # device index -> [zeroed int32 tensor, its first unused element]
_lock = threading.Lock()     # two threads capturing at once must not take the same slice
_warned: set = set()


def refill_zeroed_reserve(device: torch.device) -> None:
    """(Eager launches only.) A new reserve when there is none or less than half of one is left,
    zeroed and waited for, so that no capture can take it before its zeros are written; the
    views already taken from the old one keep it alive."""
    entry = _zeroed_reserve.get(device.index)
    if entry is not None and entry[0].numel() - entry[1] >= RESERVE_COUNTERS // 2:
        return
    reserve = torch.zeros(RESERVE_COUNTERS, dtype=torch.int32, device=device)
    if reserve.is_cuda:
        torch.cuda.current_stream(device).synchronize()
    with _lock:
        _zeroed_reserve[device.index] = [reserve, 0]


def zeroed_counters(device: torch.device, elements: int) -> torch.Tensor:
    """(Captured launches.) `elements` zeroed counters of their own, 128-byte aligned, from the
    reserve without a kernel; from torch.zeros (a fill in the graph, with a warning) where no
    eager launch made a reserve with room. The caller keeps the tensor for as long as a graph
    may replay the launch."""
    taken = -(-elements // SLICE_ALIGNMENT) * SLICE_ALIGNMENT
    with _lock:
        entry = _zeroed_reserve.get(device.index)
        if entry is not None and entry[0].numel() - entry[1] >= taken:
            start = entry[1]
            entry[1] += taken
            return entry[0][start:start + elements]
    if device.index not in _warned:
        _warned.add(device.index)
        warnings.warn(f"dg_triton: no zeroed split-K counters reserved on {device} (an eager split-K "
                      "call before the capture makes them): the graph zeroes its own with a fill "
                      "kernel at every replay", RuntimeWarning, stacklevel=3)
    return torch.zeros(elements, dtype=torch.int32, device=device)


def capture_id(stream: int) -> int | None:
    """The id of the CUDA-graph capture under way on `stream` (unique over the process, from
    cuStreamGetCaptureInfo), or None where the driver does not say."""
    try:
        from cuda.bindings import driver
        result = driver.cuStreamGetCaptureInfo(driver.CUstream(stream))
        if result[0] == driver.CUresult.CUDA_SUCCESS \
                and result[1] == driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
            return int(result[2])
    except Exception:  # a cuda-bindings without this query: the caller allocates per launch
        pass
    return None
