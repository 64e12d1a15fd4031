"""Zeroed per-launch counters for split-K reductions that captured launches can take without a
kernel (the SM90 split-K epilogue, cuda_kernels/sm90/splitk_epilogue.cuh, and the GEMV's,
dg_triton/triton/gemv.py): the last K slice to arrive at a tile sums the partials and resets the
tile's counter, so counters only need zeroing once, when they are made.

Eager launches zero theirs with torch.zeros. Under CUDA-graph capture torch.zeros would become a
fill kernel in the graph that every replay runs (1.3 us of GPU time and a second kernel beside
each small-M GEMM on the H200, 2026-12-02, benchmarks/probe_latency.py), so captured launches
take slices of a reserve that an eager launch zeroed. torch.cuda.graph synchronizes the device
before a capture begins, so that zeroing has run by then.
"""
import torch

RESERVE_COUNTERS = 1 << 16
_zeroed_reserve: dict = {}   # device index -> [zeroed int32 tensor, its first unused element]


def refill_zeroed_reserve(device: torch.device) -> None:
    """(Eager launches only.) A new reserve when there is none or less than half of one is left;
    the views already taken from the old one keep it alive."""
    entry = _zeroed_reserve.get(device.index)
    if entry is None or entry[0].numel() - entry[1] < RESERVE_COUNTERS // 2:
        _zeroed_reserve[device.index] = [torch.zeros(RESERVE_COUNTERS, dtype=torch.int32, device=device), 0]


def zeroed_counters(device: torch.device, elements: int) -> torch.Tensor:
    """(Captured launches.) `elements` zeroed counters of their own, from the reserve without a
    kernel; from torch.zeros (a fill in the graph) where no eager launch made a reserve big
    enough. The caller keeps the tensor for as long as a graph may replay the launch."""
    entry = _zeroed_reserve.get(device.index)
    if entry is not None and entry[0].numel() - entry[1] >= elements:
        start = entry[1]
        entry[1] += elements
        return entry[0][start:start + elements]
    return torch.zeros(elements, dtype=torch.int32, device=device)
