"""``deep_gemm.testing`` (API.md 3.16) plus the project's own measurement helpers.

DeepGEMM-compatible: ``calc_diff``, ``count_bytes``, ``assert_bitwise_equal``, ``bench``,
``bench_kineto``, ``get_arch_major``, ``test_filter``, ``ignore_env``, ``suppress_stdout_stderr``,
``empty_suppress``.

Ours: ``bench_graph`` (device time, the method of ANCHORS.md), ``host_overhead_us`` (CPU cost
per call, ANCHORS.md "Host overhead") and ``device_us_per_call`` (the summed duration of a call's
kernels, for calls so short that a graph replay's ~4 us launch cost would dominate them).

The numeric helpers run anywhere; the timing helpers need a CUDA device and raise RuntimeError
without one. Triton is imported only inside ``bench_graph``, since importing it is slow.
"""
import functools
import os
import statistics
import sys
import time

import torch

from .env import env_flag
from .errors import reject
from .settings import current_arch_major

__all__ = [
    "calc_diff",
    "count_bytes",
    "assert_bitwise_equal",
    "get_arch_major",
    "test_filter",
    "ignore_env",
    "suppress_stdout_stderr",
    "empty_suppress",
    "bench",
    "bench_kineto",
    "bench_graph",
    "device_us_per_call",
    "capture_graph",
    "host_overhead_us",
]

# Larger than the L2 of every target (H200: 50 MB, B200: 126 MB), so zeroing it evicts the inputs.
_L2_FLUSH_BYTES = 256 * 1024 * 1024
# bench_kineto's flush size, as API.md 3.16 gives it.
_KINETO_FLUSH_BYTES = 8 * 10**9


def _require_cuda(function: str) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(f"{function}: needs a CUDA device, and none is available")


def _positive_int(function: str, argument: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise reject(function, argument, "a positive int", repr(value))
    return value


# ---------------------------------------------------------------------------------------------
# Numerics


def calc_diff(x: torch.Tensor, y: torch.Tensor):
    """``1 - 2*sum(x*y) / sum(x*x + y*y)`` in float64: 0 for identical tensors, scale-sensitive.

    As upstream, returns a 0-d float64 tensor, or the Python float 0.0 when both are all zeros.
    """
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if denominator == 0:
        return 0.0
    return 1 - 2 * (x * y).sum() / denominator


def count_bytes(*tensors) -> int:
    """Bytes of all tensors given, looking into tuples and lists (e.g. ``(data, sf)``); None adds 0."""
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total


# Same-width integer views, so one bit flipped anywhere in an element makes that element differ
# (and NaN payloads or -0.0 vs 0.0 count as differences, which == on floats would hide).
_BITS_VIEW_DTYPES = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def assert_bitwise_equal(x: torch.Tensor, y: torch.Tensor, label: str = "") -> None:
    """AssertionError unless x and y have the same shape, dtype and bits in every element."""
    prefix = f"{label}: " if label else ""
    assert x.shape == y.shape, f"{prefix}shapes differ: {tuple(x.shape)} vs {tuple(y.shape)}"
    assert x.dtype == y.dtype, f"{prefix}dtypes differ: {x.dtype} vs {y.dtype}"
    if x.numel() == 0:
        return
    view_dtype = _BITS_VIEW_DTYPES.get(x.element_size(), torch.uint8)
    x_bits = x.contiguous().reshape(-1).view(view_dtype)
    y_bits = y.to(x.device).contiguous().reshape(-1).view(view_dtype)
    differ = x_bits != y_bits
    if bool(differ.any()):
        num_differ = int(differ.sum())
        first = int(differ.nonzero()[0, 0])
        raise AssertionError(
            f"{prefix}{num_differ} of {x.numel()} elements differ bitwise; first at flat index {first}: "
            f"{x.reshape(-1)[first].item()!r} vs {y.reshape(-1)[first].item()!r}")


# ---------------------------------------------------------------------------------------------
# Test selection and output control


def get_arch_major() -> int:
    """Compute-capability major of the current device (9 = SM90, 10 = SM100)."""
    major = current_arch_major()
    if major is None:
        raise RuntimeError("get_arch_major: needs a CUDA device, and none is available")
    return major


def test_filter(condition):
    """Decorator: run the test only when ``condition()`` is true, else print that it was filtered."""
    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if condition():
                return func(*args, **kwargs)
            print(f"{func.__name__}:\n > Filtered by {condition}\n")
        return wrapper
    return decorator


# pytest would collect the decorator itself as a test because of its name.
test_filter.__test__ = False


def ignore_env(name: str, condition):
    """Decorator: when ``condition()`` is true, run with environment variable ``name`` removed
    (restored afterwards, also on error)."""
    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if not condition():
                return func(*args, **kwargs)
            saved = os.environ.pop(name, None)
            try:
                return func(*args, **kwargs)
            finally:
                if saved is not None:
                    os.environ[name] = saved
        return wrapper
    return decorator


class suppress_stdout_stderr:
    """Silences fd 1 and 2 and ``sys.stdout``/``sys.stderr``. The descriptors, because compilers,
    ptxas and the CUDA driver write from C/C++ straight to them; the Python objects too, because
    they need not be fd 1/2 (pytest capture, notebooks)."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self._devnull = open(os.devnull, "w")
        self._saved_fds = (os.dup(1), os.dup(2))
        self._saved_streams = (sys.stdout, sys.stderr)
        os.dup2(self._devnull.fileno(), 1)
        os.dup2(self._devnull.fileno(), 2)
        sys.stdout = sys.stderr = self._devnull
        return self

    def __exit__(self, *exc_info):
        self._devnull.flush()
        sys.stdout, sys.stderr = self._saved_streams
        for fd, saved in zip((1, 2), self._saved_fds):
            os.dup2(saved, fd)
            os.close(saved)
        self._devnull.close()
        return False


class empty_suppress:
    """The no-op stand-in for ``suppress_stdout_stderr`` (chosen by a flag at the call site)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


# ---------------------------------------------------------------------------------------------
# Timing (CUDA only)


def bench(fn, num_warmups: int = 5, num_tests: int = 10, high_precision: bool = False) -> float:
    """Mean seconds per call of ``fn`` (DeepGEMM's helper), each call timed by its own CUDA events
    after a 256 MB L2 flush, so the flush is not counted and every call starts with a cold L2."""
    _require_cuda("bench")
    _positive_int("bench", "num_tests", num_tests)
    cache = torch.empty(_L2_FLUSH_BYTES // 4, dtype=torch.int, device="cuda")
    for _ in range(num_warmups):
        fn()
    if high_precision:
        # A long kernel in front lets the CPU queue the timed calls before the GPU reaches them,
        # so launch latency does not leak into the events (upstream's trick).
        x = torch.randn((8192, 8192), dtype=torch.float, device="cuda")
        x @ x
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(num_tests)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(num_tests)]
    for start, end in zip(starts, ends):
        cache.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return sum(s.elapsed_time(e) for s, e in zip(starts, ends)) / num_tests / 1e3


def capture_graph(fn) -> "torch.cuda.CUDAGraph":
    """A CUDA graph of one call of ``fn``, which must be capturable (no host syncs, no allocations
    whose address must change per call).

    The first call compiles, autotunes and fills the caching allocator; none of that may happen
    during capture. It runs on a side stream, as the PyTorch CUDA-graph notes advise, so lazily
    created per-stream state (cuBLAS workspaces) is set up the way the capture stream will use it.
    """
    _require_cuda("capture_graph")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def _nvidia_tools_on() -> bool:
    """Whether DG_USE_NVIDIA_TOOLS says an NVIDIA tool (nsys, ncu, compute-sanitizer) holds CUPTI."""
    return env_flag("DG_USE_NVIDIA_TOOLS")


def _refuse_under_nvidia_tools(function: str, what: str) -> None:
    if _nvidia_tools_on():
        raise RuntimeError(f"{function}: DG_USE_NVIDIA_TOOLS is set, so CUPTI belongs to nsys, ncu or "
                           f"compute-sanitizer and {what} can be read")


def replay_kernel_names(graph: "torch.cuda.CUDAGraph") -> list[str]:
    """The names of the kernels (and memset / memcpy nodes) one replay of ``graph`` runs, in the
    order they start (CUPTI, through torch.profiler): what a graph costs beyond the kernels one
    meant to capture. Refused under ``DG_USE_NVIDIA_TOOLS`` (CUPTI is then the tool's)."""
    _refuse_under_nvidia_tools("replay_kernel_names", "no kernel names")
    _require_cuda("replay_kernel_names")
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return [e.name for e in sorted(kernels, key=lambda e: e.time_range.start)]


def _device_microseconds(event) -> float:
    """Total device time of a torch.profiler key_averages() row (renamed across torch versions)."""
    total = getattr(event, "device_time_total", None)
    return total if total is not None else event.cuda_time_total


def _profiled_rows(calls, suppress_output: bool = False, trace_path=None):
    """key_averages() rows with device time, of running ``calls()`` under torch.profiler's CUDA
    activity (CUPTI): kernels, memcpys and memsets, by name."""
    from torch.profiler import ProfilerActivity, profile

    suppress = suppress_stdout_stderr if suppress_output else empty_suppress
    torch.cuda.synchronize()
    with suppress(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        calls()
        torch.cuda.synchronize()
    if trace_path is not None:
        prof.export_chrome_trace(str(trace_path))
    return [row for row in prof.key_averages() if _device_microseconds(row) > 0]


def _profiled_calls(fn, num_tests: int, flush_bytes: int | None, function: str, barrier=None,
                    suppress_output: bool = False, trace_path=None):
    """Profiler rows (``_profiled_rows``) of ``num_tests`` calls of ``fn``, each after an L2 flush
    of ``flush_bytes`` (none if None) and ``barrier()`` if given; the flush's own rows left out.

    The flush is an in-place ``bitwise_not_`` on bytes, told apart by its kernel's name: a ``fn``
    that runs a kernel of that name is refused, since its time could not be told from the flush's.
    ``fn`` runs once first, outside the profile (compiles, caches, prints)."""
    fn()
    flush, flush_names = None, set()
    if flush_bytes is not None:
        flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
        flush_names = {row.key for row in _profiled_rows(flush.bitwise_not_)}
        shared = flush_names & {row.key for row in _profiled_rows(fn)}
        if shared:
            raise RuntimeError(f"{function}: fn runs the L2 flush's own kernel {sorted(shared)}; "
                               "its time cannot be told from the flush's")

    def calls():
        for _ in range(num_tests):
            if flush is not None:
                flush.bitwise_not_()
            if barrier is not None:
                barrier()
            fn()

    rows = _profiled_rows(calls, suppress_output, trace_path)
    return [row for row in rows if row.key not in flush_names]


def bench_kineto(fn, kernel_names, num_tests: int = 30, suppress_kineto_output: bool = False,
                 trace_path=None, flush_l2: bool = True, with_multiple_kernels: bool = False,
                 barrier=None):
    """Mean seconds per launch of the kernels whose names contain ``kernel_names`` (one str, or a
    tuple of them for a tuple of results), over ``num_tests`` calls of ``fn`` under torch.profiler,
    each after a pass over 8 GB that flushes the L2 (API.md 3.16, DeepGEMM's helper). The flush's
    own kernel is left out, so a broad name ("elementwise") cannot pick it up.

    A name may match at most one profiler row unless ``with_multiple_kernels`` (then every matching
    row counts: total device time over total launches); a name that matches none gives 0, as
    upstream's helper does (a kernel the call did not run took no time). ``barrier``, when given,
    is called before each call (multi-process runs). Returns 1 (one per name for a tuple) without
    profiling when ``DG_USE_NVIDIA_TOOLS`` is set (``env.env_flag``), since CUPTI cannot be shared
    with nsys, ncu or compute-sanitizer.
    """
    if _nvidia_tools_on():
        return (1,) * len(kernel_names) if isinstance(kernel_names, tuple) else 1
    _require_cuda("bench_kineto")
    _positive_int("bench_kineto", "num_tests", num_tests)
    names = kernel_names if isinstance(kernel_names, tuple) else (kernel_names,)
    if not names or not all(isinstance(name, str) and name for name in names):
        raise reject("bench_kineto", "kernel_names", "a non-empty str or a tuple of them", repr(kernel_names))
    rows = _profiled_calls(fn, num_tests, _KINETO_FLUSH_BYTES if flush_l2 else None, "bench_kineto",
                           barrier, suppress_kineto_output, trace_path)
    seconds = []
    for name in names:
        matched = [row for row in rows if name in row.key]
        if not matched:
            seconds.append(0.0)
            continue
        if len(matched) > 1 and not with_multiple_kernels:
            raise RuntimeError(f"bench_kineto: {len(matched)} profiled kernels' names contain {name!r} "
                               f"({sorted(row.key for row in matched)}); pass with_multiple_kernels=True "
                               "to average over all of them")
        total_us = sum(_device_microseconds(row) for row in matched)
        seconds.append(total_us / sum(row.count for row in matched) / 1e6)
    return tuple(seconds) if isinstance(kernel_names, tuple) else seconds[0]


def device_us_per_call(fn, num_tests: int = 30) -> tuple[float, list[str]]:
    """Mean device microseconds per call of ``fn``, summed over every kernel, memcpy and memset it
    runs (CUPTI, through torch.profiler), and their names. Each call follows a 256 MB L2 flush.

    For calls of a few microseconds, where ``bench_graph``'s figure is mostly the graph launch
    (probe_latency: ~4 us above the kernels on the H200), this is the cost the call adds to a
    stream of work already queued on the device, as inside a captured model. ``fn`` runs eagerly,
    so it may sync the host. Refused under ``DG_USE_NVIDIA_TOOLS`` (CUPTI is then the tool's): it
    has no neutral figure to return.
    """
    _refuse_under_nvidia_tools("device_us_per_call", "no kernel durations")
    _require_cuda("device_us_per_call")
    _positive_int("device_us_per_call", "num_tests", num_tests)
    rows = _profiled_calls(fn, num_tests, _L2_FLUSH_BYTES, "device_us_per_call")
    return sum(_device_microseconds(row) for row in rows) / num_tests, sorted(row.key for row in rows)


def bench_graph(fn, warmup_ms: float = 25, rep_ms: float = 100) -> float:
    """Median microseconds of one call of ``fn``, replayed from a CUDA graph (ANCHORS.md "Method").

    The graph removes Python launch cost from the figure; host cost is ``host_overhead_us``.
    ``fn`` must be capturable (capture_graph).
    """
    _require_cuda("bench_graph")
    import triton.testing

    graph = capture_graph(fn)

    # triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None,
    # return_mode="mean") in triton 3.6.0 and 3.7.1 alike: warmup/rep are milliseconds of run
    # time, it zeroes a 256 MiB buffer before every timed call (driver.clear_cache, an L2 flush
    # outside the events) and returns milliseconds.
    median_ms = triton.testing.do_bench(graph.replay, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    return median_ms * 1e3


def host_overhead_us(fn, calls: int = 200, repeats: int = 5) -> float:
    """Median over ``repeats`` bursts of the CPU microseconds per call in a burst of ``calls``
    back-to-back calls (ANCHORS.md "Host overhead").

    Each burst starts after a device sync, so the launch queue never fills and the figure is host
    cost, not GPU time; the sync that drains the burst is not timed.
    """
    _require_cuda("host_overhead_us")
    _positive_int("host_overhead_us", "calls", calls)
    _positive_int("host_overhead_us", "repeats", repeats)
    fn()  # compile and cache outside the timed bursts
    per_call_us = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call_us.append((time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(per_call_us)
