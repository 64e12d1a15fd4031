"""Scratch of the split-K reductions (the SM90 split-K epilogue, cuda_kernels/sm90/splitk_epilogue.cuh,
and the GEMV's, dg_triton/triton/gemv.py): an FP32 workspace for the K slices' partials and
per-tile arrival counters. The last K slice to arrive at a tile sums the partials and resets the
tile's counter, so counters only need zeroing once, when they are made, and launches that run one
after another (one stream's, or one capture's on one stream) can share a set: `scratch_for`.

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
    except Exception:  # a cuda-bindings without this query: a set per captured launch
        pass
    return None


class Scratch:
    """Split-K scratch that launches running one after another may share: an FP32 workspace and a
    counter buffer, grown when a launch needs more; `generation` counts the growths, so plans know
    when their cached pointers went stale. Counters are zeroed when allocated and left zeroed by
    the kernel. Eager use (one per device and stream): a buffer dropped by a growth is freed
    stream-ordered by torch's caching allocator, after the launches already queued that use it.
    Capture use (one per CUDA-graph capture, `captured`): every buffer is kept, since the graph's
    earlier launches read the old ones at each replay, and counters come from the zeroed reserve."""

    def __init__(self, device: torch.device, captured: bool = False):
        self.device = device
        self.workspace = self.counters = None
        self.generation = 0
        self.captured = captured
        self._retired = [] if captured else None

    def pointers(self, workspace_elements: int, counter_elements: int) -> tuple[int, int]:
        if not self.captured:
            refill_zeroed_reserve(self.device)   # for captures to come (a dict look-up when full)
        if self.workspace is None or self.workspace.numel() < workspace_elements \
                or self.counters.numel() < counter_elements:
            if self._retired is not None and self.workspace is not None:
                self._retired.append((self.workspace, self.counters))
            workspace_elements = max(workspace_elements, 0 if self.workspace is None else self.workspace.numel())
            counter_elements = max(counter_elements, 0 if self.counters is None else self.counters.numel())
            self.workspace = torch.empty(workspace_elements, dtype=torch.float32, device=self.device)
            self.counters = (zeroed_counters(self.device, counter_elements) if self.captured else
                             torch.zeros(counter_elements, dtype=torch.int32, device=self.device))
            self.generation += 1
        return self.workspace.data_ptr(), self.counters.data_ptr()


_stream_scratch: dict = {}    # (device index, stream handle) -> Scratch
# (device index, capture id, stream) -> Scratch, or (device index, None) -> [Scratch] when a
# capture's id is unknown; kept for as long as the process lives (a graph's lifetime is not visible
# here).
_capture_scratch: dict = {}


def scratch_for(device: torch.device, stream) -> Scratch:
    """The scratch a split-K launch on `stream` (a CUDA stream handle; None off CUDA, where
    nothing is captured) takes. Eager: its stream's, shared by every split-K launch on it. Being
    captured: its capture's and stream's, shared by those launches (they run in order at each
    replay) and kept, so a replay never shares buffers with eager launches or other graphs; per
    stream too, since a capture forked onto several streams runs their branches at once. (Should
    the driver not name the capture, each captured launch gets a set of its own.)"""
    if stream is not None and torch.cuda.is_current_stream_capturing():
        capture = capture_id(stream)
        if capture is None:
            scratch = Scratch(device, captured=True)
            _capture_scratch.setdefault((device.index, None), []).append(scratch)
            return scratch
        key = (device.index, capture, stream)
        scratch = _capture_scratch.get(key)
        if scratch is None:
            scratch = _capture_scratch[key] = Scratch(device, captured=True)
        return scratch
    scratch = _stream_scratch.get((device.index, stream))
    if scratch is None:
        scratch = _stream_scratch[device.index, stream] = Scratch(device)
    return scratch

