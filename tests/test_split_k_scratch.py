"""Where the SM90 split-K kernels' FP32 workspace and counters live (SplitKBuffers in
dg_triton/kernels/sm90_bf16_gemm.py, over dg_triton/kernels/split_scratch.py), on the CPU: the logic is host-side, so CPU tensors and a
faked capture state stand in for the GPU's. The GPU test (test_fp8_gemm_kernel_gpu.py) runs one
plan on two streams and in a graph at once."""
import pytest
import torch

from dg_triton.heuristics.sm90 import Bf16GemmConfig
from dg_triton.kernels import split_scratch
from dg_triton.kernels.sm90_bf16_gemm import SplitKBuffers

TEMPLATE = ("m", "n", "k", "splits", 0, 0, "ld_d")


def _buffers(m: int, n: int, splits: int = 4) -> SplitKBuffers:
    config = Bf16GemmConfig(block_m=64, block_n=64, num_stages=4, group_m=8, num_sms=132, num_splits=splits)
    return SplitKBuffers(config, m, n, torch.device("cpu"), slot=4)


@pytest.fixture(autouse=True)
def _fresh_scratch(monkeypatch):
    monkeypatch.setattr(split_scratch, "_stream_scratch", {})
    monkeypatch.setattr(split_scratch, "_capture_scratch", {})
    monkeypatch.setattr(split_scratch, "_zeroed_reserve", {})
    monkeypatch.setattr(split_scratch, "_warned", set())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)


def _pointers(scalars):
    assert scalars[:4] == TEMPLATE[:4] and scalars[6:] == TEMPLATE[6:]
    return scalars[4:6]


def test_plans_on_one_stream_share_its_scratch_and_follow_its_growth():
    small, big = _buffers(64, 128), _buffers(256, 1024)
    first = _pointers(small.scalars(TEMPLATE, 7))
    grown = _pointers(big.scalars(TEMPLATE, 7))    # needs more: the stream's scratch grows
    scratch = split_scratch._stream_scratch[None, 7]
    assert scratch.workspace.numel() >= big.workspace_elements and scratch.generation == 2
    assert _pointers(small.scalars(TEMPLATE, 7)) == grown != first   # the small plan follows
    assert (scratch.counters == 0).all()


def test_each_stream_has_its_own_scratch():
    plan = _buffers(64, 128)
    assert _pointers(plan.scalars(TEMPLATE, 1)) != _pointers(plan.scalars(TEMPLATE, 2))
    assert _pointers(plan.scalars(TEMPLATE, 1)) == _pointers(plan.scalars(TEMPLATE, 1))


def test_a_capture_shares_one_scratch_among_its_launches_and_keeps_every_buffer(monkeypatch):
    small, big = _buffers(64, 128), _buffers(256, 1024)
    eager = _pointers(small.scalars(TEMPLATE, 7))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(split_scratch, "capture_id", lambda stream: 41)
    in_capture = _pointers(small.scalars(TEMPLATE, 7))
    assert in_capture != eager
    assert _pointers(small.scalars(TEMPLATE, 7)) == in_capture      # same capture: shared
    _pointers(big.scalars(TEMPLATE, 7))                              # grows within the capture
    scratch = split_scratch._capture_scratch[None, 41, 7]
    assert len(scratch._retired) == 1 and scratch._retired[0][0].data_ptr() == in_capture[0]
    # a branch of the same capture forked onto another stream runs concurrently: its own set
    assert _pointers(small.scalars(TEMPLATE, 8)) != _pointers(big.scalars(TEMPLATE, 7))
    monkeypatch.setattr(split_scratch, "capture_id", lambda stream: 42)
    assert _pointers(small.scalars(TEMPLATE, 7)) not in (in_capture, eager)  # another capture
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert _pointers(small.scalars(TEMPLATE, 7)) == eager            # eager scratch untouched


def test_a_capture_the_driver_does_not_name_gets_a_set_per_launch(monkeypatch):
    plan = _buffers(64, 128)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(split_scratch, "capture_id", lambda stream: None)
    split_scratch.refill_zeroed_reserve(torch.device("cpu"))   # as an eager launch would
    assert _pointers(plan.scalars(TEMPLATE, 7)) != _pointers(plan.scalars(TEMPLATE, 7))
    assert len(split_scratch._capture_scratch[None, None]) == 2


def _in_reserve(pointer: int) -> bool:
    reserve = split_scratch._zeroed_reserve[None][0]
    return reserve.data_ptr() <= pointer < reserve.data_ptr() + reserve.numel() * reserve.element_size()


def test_captured_counters_come_zeroed_from_the_reserve_an_eager_launch_made(monkeypatch):
    plan, other = _buffers(64, 128), _buffers(256, 1024)
    _, eager_counters = _pointers(plan.scalars(TEMPLATE, 7))
    assert not _in_reserve(eager_counters)          # eager launches keep their own counters
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(split_scratch, "capture_id", lambda stream: 41)
    _, first = _pointers(plan.scalars(TEMPLATE, 7))
    _, second = _pointers(other.scalars(TEMPLATE, 8))   # another branch of the capture
    assert _in_reserve(first) and _in_reserve(second)
    # disjoint slices, the first as long as the plan needs
    assert second - first >= plan.counter_elements * 4 or first - second >= other.counter_elements * 4
    scratch = split_scratch._capture_scratch[None, 41, 7]
    assert scratch.counters.numel() == plan.counter_elements and (scratch.counters == 0).all()


def test_a_capture_without_a_big_enough_reserve_zeroes_its_own_counters(monkeypatch):
    plan = _buffers(64, 128)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(split_scratch, "capture_id", lambda stream: 41)
    with pytest.warns(RuntimeWarning, match="fill kernel"):
        _pointers(plan.scalars(TEMPLATE, 7))     # no eager launch yet: no reserve
    assert None not in split_scratch._zeroed_reserve
    assert (split_scratch._capture_scratch[None, 41, 7].counters == 0).all()
    monkeypatch.setattr(split_scratch, "_zeroed_reserve", {None: [torch.zeros(1, dtype=torch.int32), 0]})
    monkeypatch.setattr(split_scratch, "capture_id", lambda stream: 42)
    _, counters = _pointers(plan.scalars(TEMPLATE, 7))   # needs more than the reserve's one
    assert not _in_reserve(counters) and split_scratch._zeroed_reserve[None][1] == 0


def test_reserved_slices_start_128_bytes_apart_whatever_their_length():
    """Triton specializes pointers on 16-byte alignment: a captured GEMV must get the kernel its
    eager warm-up built, whatever the slices taken before its own."""
    split_scratch.refill_zeroed_reserve(torch.device("cpu"))
    base = split_scratch._zeroed_reserve[None][0].data_ptr()
    for elements in (66, 1, 264, 31, 33):
        counters = split_scratch.zeroed_counters(torch.device("cpu"), elements)
        assert counters.numel() == elements and (counters.data_ptr() - base) % 128 == 0


def test_an_eager_launch_refills_a_reserve_that_is_less_than_half_left():
    split_scratch.refill_zeroed_reserve(torch.device("cpu"))
    reserve = split_scratch._zeroed_reserve[None]
    first = reserve[0]
    reserve[1] = split_scratch.RESERVE_COUNTERS // 2      # exactly half left: kept
    split_scratch.refill_zeroed_reserve(torch.device("cpu"))
    assert split_scratch._zeroed_reserve[None][0] is first
    reserve[1] += 1                                         # less than half: a new one
    split_scratch.refill_zeroed_reserve(torch.device("cpu"))
    fresh = split_scratch._zeroed_reserve[None]
    assert fresh[0] is not first and fresh[1] == 0 and (fresh[0] == 0).all()


def test_capture_id_without_a_driver_is_none():
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    assert split_scratch.capture_id(0) is None
