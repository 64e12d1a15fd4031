"""dg_triton.testing (API.md 3.16): numeric helpers, test selection, output control, and the
timing helpers' behaviour without a GPU."""
import math
import os
import random

import pytest
import torch

from cupti import needs_cupti

from dg_triton import testing
from dg_triton.errors import DGArgumentError

HAS_CUDA = torch.cuda.is_available()


def _random_shape():
    return tuple(random.randint(1, 17) for _ in range(random.randint(1, 3)))


def test_calc_diff_of_identical_tensors_is_zero():
    x = torch.randn(_random_shape())
    assert abs(float(testing.calc_diff(x, x.clone()))) < 1e-12


def test_calc_diff_of_scaled_copy_matches_closed_form():
    # x vs s*x: 1 - 2s / (1 + s^2) = (1 - s)^2 / (1 + s^2), whatever x is.
    x = torch.randn(_random_shape(), dtype=torch.float64)
    s = random.uniform(0.1, 10.0)
    diff = testing.calc_diff(x, s * x)
    assert diff.dtype == torch.float64
    assert math.isclose(float(diff), (1 - s) ** 2 / (1 + s * s), rel_tol=1e-9, abs_tol=1e-12)


def test_calc_diff_of_negation_is_two_and_is_symmetric():
    x, y = torch.randn(64), torch.randn(64)
    assert math.isclose(float(testing.calc_diff(x, -x)), 2.0, rel_tol=1e-12)
    assert float(testing.calc_diff(x, y)) == float(testing.calc_diff(y, x))


def test_calc_diff_of_two_zero_tensors_is_float_zero():
    diff = testing.calc_diff(torch.zeros(8, 8), torch.zeros(8, 8))
    assert isinstance(diff, float) and diff == 0.0


def test_calc_diff_computes_in_float64():
    # In bf16 the sums below would round; float64 keeps the 1e-6 relative offset visible.
    x = torch.ones(1024, dtype=torch.float32)
    y = x * (1 + 1e-3)
    assert math.isclose(float(testing.calc_diff(x, y)), (1e-3) ** 2 / (1 + (1 + 1e-3) ** 2), rel_tol=1e-4)


def test_count_bytes_sums_nested_tensors_and_skips_none():
    dtypes = [torch.float32, torch.bfloat16, torch.int8, torch.int32, torch.float64, torch.float8_e4m3fn]
    tensors = [torch.empty(_random_shape(), dtype=random.choice(dtypes)) for _ in range(6)]
    expected = sum(t.numel() * t.element_size() for t in tensors)
    nested = (tensors[0], None, (tensors[1], [tensors[2], None, (tensors[3],)]), [tensors[4]], tensors[5])
    assert testing.count_bytes(*nested) == expected
    assert testing.count_bytes() == 0 and testing.count_bytes(None, (None,)) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.int8, torch.float64])
def test_assert_bitwise_equal_passes_on_copies_and_fails_on_one_flipped_bit(dtype):
    x = torch.randn(_random_shape()).to(dtype)
    testing.assert_bitwise_equal(x, x.clone(), "copy")
    y = x.clone()
    flat_bytes = y.view(-1).view(torch.uint8)
    index, bit = random.randrange(flat_bytes.numel()), random.randrange(8)
    flat_bytes[index] ^= 1 << bit
    with pytest.raises(AssertionError, match="my-label: 1 of"):
        testing.assert_bitwise_equal(x, y, "my-label")


def test_assert_bitwise_equal_tells_signed_zeros_apart_and_accepts_same_nan():
    nan = torch.tensor([float("nan"), 1.0])
    testing.assert_bitwise_equal(nan, nan.clone())
    with pytest.raises(AssertionError):
        testing.assert_bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))


def test_assert_bitwise_equal_rejects_shape_or_dtype_mismatch():
    x = torch.randn(4, 4)
    with pytest.raises(AssertionError, match="shape"):
        testing.assert_bitwise_equal(x, x.reshape(16))
    with pytest.raises(AssertionError, match="dtype"):
        testing.assert_bitwise_equal(x, x.double())


def test_test_filter_runs_only_when_condition_holds(capsys):
    calls = []

    @testing.test_filter(lambda: False)
    def skipped():
        calls.append("skipped")

    @testing.test_filter(lambda: True)
    def ran(value):
        calls.append(value)
        return value

    skipped()
    assert ran(7) == 7
    assert calls == [7]
    assert "skipped" in capsys.readouterr().out


def test_ignore_env_hides_the_variable_only_when_condition_holds(monkeypatch):
    monkeypatch.setenv("DG_TESTING_PROBE", "1")
    seen = []

    def probe():
        seen.append(os.environ.get("DG_TESTING_PROBE"))
        raise KeyError("probe")

    for condition in (True, False):
        with pytest.raises(KeyError):
            testing.ignore_env("DG_TESTING_PROBE", lambda: condition)(probe)()
        assert os.environ["DG_TESTING_PROBE"] == "1", "must be restored even when the test raises"
    assert seen == [None, "1"]


def test_suppress_stdout_stderr_silences_descriptors_and_python_streams(capfd):
    print("before")
    with testing.suppress_stdout_stderr():
        os.write(1, b"fd1-hidden\n")
        os.write(2, b"fd2-hidden\n")
        print("print-hidden")
    os.write(1, b"after\n")
    with testing.empty_suppress():
        print("shown")
    captured = capfd.readouterr()
    assert "hidden" not in captured.out + captured.err
    assert captured.out.split() == ["before", "after", "shown"]


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU behaviour")
@pytest.mark.parametrize("call", [
    lambda: testing.bench(lambda: None),
    lambda: testing.bench_graph(lambda: None),
    lambda: testing.host_overhead_us(lambda: None),
    lambda: testing.device_us_per_call(lambda: None),
    lambda: testing.get_arch_major(),
])
def test_gpu_only_helpers_raise_runtime_error_without_cuda(call):
    with pytest.raises(RuntimeError, match="CUDA device"):
        call()


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU behaviour")
def test_bench_kineto_needs_cuda_unless_nvidia_tools_are_on(monkeypatch):
    monkeypatch.delenv("DG_USE_NVIDIA_TOOLS", raising=False)
    with pytest.raises(RuntimeError, match="CUDA device"):
        testing.bench_kineto(lambda: None, "gemm")


@pytest.mark.parametrize("value", ["1", "yes"])
def test_cupti_readers_refuse_under_nvidia_tools(monkeypatch, value):
    monkeypatch.setenv("DG_USE_NVIDIA_TOOLS", value)
    calls = []
    with pytest.raises(RuntimeError, match="DG_USE_NVIDIA_TOOLS"):
        testing.device_us_per_call(lambda: calls.append(1))
    with pytest.raises(RuntimeError, match="DG_USE_NVIDIA_TOOLS"):
        testing.replay_kernel_names(None)   # refused before the graph is looked at
    assert calls == []


@pytest.mark.parametrize("value", ["1", "yes"])
def test_bench_kineto_returns_one_without_profiling_under_nvidia_tools(monkeypatch, value):
    monkeypatch.setenv("DG_USE_NVIDIA_TOOLS", value)
    calls = []
    assert testing.bench_kineto(lambda: calls.append(1), ("gemm", "transpose")) == (1, 1)
    assert testing.bench_kineto(lambda: calls.append(1), "gemm") == 1
    assert calls == []


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_timing_helpers_return_positive_figures_on_gpu():
    x = torch.randn(1024, 1024, device="cuda")
    y = torch.empty_like(x)
    assert testing.bench(lambda: torch.mul(x, 2, out=y)) > 0
    assert testing.bench_graph(lambda: torch.mul(x, 2, out=y), warmup_ms=5, rep_ms=20) > 0
    assert testing.host_overhead_us(lambda: torch.mul(x, 2, out=y), calls=20, repeats=3) > 0


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_host_overhead_rejects_non_positive_counts():
    with pytest.raises(DGArgumentError, match="calls"):
        testing.host_overhead_us(lambda: None, calls=0)


@needs_cupti
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_bench_kineto_times_named_kernels_and_refuses_ambiguous_names():
    x = torch.randn(16 << 20, device="cuda")           # 64 MB: tens of microseconds a pass
    y, z = torch.empty_like(x), torch.empty_like(x)
    one = testing.bench_kineto(lambda: torch.mul(x, 2, out=y), "elementwise", num_tests=10)
    assert 5e-6 < one < 1e-3
    both = lambda: (torch.mul(x, 2, out=y), torch.add(x, 1, out=z))  # noqa: E731
    with pytest.raises(RuntimeError, match="with_multiple_kernels"):    # mul and add, not the flush
        testing.bench_kineto(both, "elementwise", num_tests=5)
    mean_of_two = testing.bench_kineto(both, "elementwise", num_tests=5, with_multiple_kernels=True)
    assert 0.5 * one < mean_of_two < 2 * one             # a mean per launch, not a sum
    names = tuple(testing.device_us_per_call(both, num_tests=2)[1])
    assert len(names) == 2
    first, second = testing.bench_kineto(both, names, num_tests=5)
    assert first > 0 and second > 0
    # A name no kernel carries took no time (upstream's convention), alone or beside others.
    assert testing.bench_kineto(both, "no_such_kernel", num_tests=2) == 0
    assert testing.bench_kineto(both, (names[0], "no_such_kernel"), num_tests=2)[1] == 0
    with pytest.raises(DGArgumentError, match="kernel_names"):
        testing.bench_kineto(both, ["elementwise"], num_tests=2)


@needs_cupti
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_device_us_per_call_sums_the_calls_kernels_and_leaves_the_flush_out():
    x = torch.randn(16 << 20, device="cuda")
    y, z = torch.empty_like(x), torch.empty_like(x)
    one, names_one = testing.device_us_per_call(lambda: torch.mul(x, 2, out=y), num_tests=10)
    two, names_two = testing.device_us_per_call(lambda: (torch.mul(x, 2, out=y), torch.mul(x, 3, out=z)),
                                                num_tests=10)
    assert len(names_one) == 1 and names_one == names_two
    assert 5 < one < 1000 and 1.6 * one < two < 2.4 * one   # two launches counted, not the flush's
    flags = torch.zeros(1024, dtype=torch.uint8, device="cuda")
    with pytest.raises(RuntimeError, match="flush"):
        testing.device_us_per_call(flags.bitwise_not_)
    with pytest.raises(RuntimeError, match="flush"):
        testing.bench_kineto(flags.bitwise_not_, "bitwise_not", num_tests=2)
