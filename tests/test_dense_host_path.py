"""The warm host path of the dense BF16 GEMMs (dg_triton/gemm.py): a call whose signature passed
the full checks on a CUDA device launches the cached plan after one keyed lookup and an alignment
check, and nothing that can make a call invalid hides behind that, on CPU with no GPU.

As in test_grouped_host_path.py, meta tensors play CUDA tensors (is_cuda reads is_meta) and the SM90
run is faked; CPU tensors play the tensors of another device.
"""
import pytest
import torch

import dg_triton
from dg_triton import dispatch, gemm, settings, validation
from dg_triton.errors import DGArgumentError
from dg_triton.kernels import sm90_bf16_gemm

M, N, K = 64, 48, 64


class FakePlan:
    def __init__(self, launches):
        self.launches = launches

    def launch(self, a_ptr, b_ptr, d_ptr, device_index):
        self.launches.append((a_ptr, b_ptr, d_ptr))


@pytest.fixture(autouse=True)
def fake_cuda(monkeypatch):
    """Meta tensors count as CUDA ones, SM90 serves them; runs (full path) and warm launches are
    recorded."""
    monkeypatch.setattr(torch.Tensor, "is_cuda", torch._C.TensorBase.__dict__["is_meta"])
    monkeypatch.setattr(dispatch, "backend_of", lambda function, t, index, available: dispatch.SM90)
    monkeypatch.setattr(gemm, "_warm_plans", {})
    record = {"runs": [], "launches": []}

    def fake_run(function, a, b, d, problem, addresses, accumulate, compiled_dims, config=None,
                 probe_defines=()):
        record["runs"].append((function, addresses, accumulate))
        return FakePlan(record["launches"])
    monkeypatch.setattr(sm90_bf16_gemm, "run", fake_run)
    return record


def bf16(*shape, device="meta"):
    return torch.empty(*shape, dtype=torch.bfloat16, device=device)


def misaligned(t):
    return torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:].view(t.shape)


def count_full_checks(monkeypatch):
    calls = []
    check = validation.bf16_gemm
    monkeypatch.setattr(validation, "bf16_gemm", lambda *args: calls.append(1) or check(*args))
    return calls


def at(buffer, offset, rows, cols):
    """A [rows, cols] view of `buffer` starting `offset` elements in: meta views of one buffer have
    distinct data pointers, fresh meta tensors all have 0."""
    return buffer[offset:offset + rows * cols].view(rows, cols)


def test_warm_calls_skip_the_full_checks_and_launch_with_each_calls_pointers(fake_cuda, monkeypatch):
    checks = count_full_checks(monkeypatch)
    buffer = bf16(1 << 20)
    expected = []
    for call in range(3):
        base = call * 64 * 1024  # 16-byte multiples apart
        a, b, d = at(buffer, base, M, K), at(buffer, base + 8192, N, K), at(buffer, base + 16384, M, N)
        expected.append((a.data_ptr(), b.data_ptr(), d.data_ptr()))
        dg_triton.bf16_gemm_nt(a, b, d)
    assert len(checks) == 1 and len(fake_cuda["runs"]) == 1
    assert fake_cuda["runs"][0][1] == expected[0]
    assert fake_cuda["launches"] == expected[1:]
    assert len(set(expected)) == 3


def test_tensors_off_cuda_always_take_the_full_checks(fake_cuda, monkeypatch):
    checks = count_full_checks(monkeypatch)
    a, b, d = bf16(M, K, device="cpu"), bf16(N, K, device="cpu"), bf16(M, N, device="cpu")
    for _ in range(2):
        dg_triton.bf16_gemm_nt(a, b, d)
    assert len(checks) == 2 and len(fake_cuda["runs"]) == 2 and not gemm._warm_plans


def rejections():
    return [
        ("a", lambda a, b, d: (misaligned(a), b, d)),
        ("b", lambda a, b, d: (a, misaligned(b), d)),
        ("d", lambda a, b, d: (a, b, misaligned(d))),
        ("a", lambda a, b, d: (bf16(M, K, device="cpu"), b, d)),
        ("b", lambda a, b, d: (a, bf16(N, K, device="cpu"), d)),
        ("b", lambda a, b, d: (a, bf16(N, K + 8), d)),
        ("a", lambda a, b, d: (torch.empty(M, K, dtype=torch.float16, device="meta"), b, d)),
        ("d", lambda a, b, d: (a, b, bf16(N, M).t())),
        ("d", lambda a, b, d: (a, b, bf16(M + 1, N))),
    ]


@pytest.mark.parametrize("blamed,change", rejections())
def test_rejections_hold_after_a_warm_call(blamed, change, fake_cuda):
    a, b, d = bf16(M, K), bf16(N, K), bf16(M, N)
    dg_triton.bf16_gemm_nt(a, b, d)
    dg_triton.bf16_gemm_nt(a, b, d)
    assert len(fake_cuda["launches"]) == 1
    with pytest.raises(DGArgumentError, match=f"bf16_gemm_nt: {blamed} must"):
        dg_triton.bf16_gemm_nt(*change(a, b, d))
    assert len(fake_cuda["launches"]) == 1


def test_c_and_settings_are_part_of_the_warm_signature(fake_cuda):
    a, b, d = bf16(M, K), bf16(N, K), bf16(M, N)
    dg_triton.bf16_gemm_nt(a, b, d)
    dg_triton.bf16_gemm_nt(a, b, d, d)              # in place: another plan (accumulating)
    assert [run[2] for run in fake_cuda["runs"]] == [False, True]
    dg_triton.bf16_gemm_nt(a, b, d, d)
    assert len(fake_cuda["launches"]) == 1
    with pytest.raises(DGArgumentError, match="bf16_gemm_nt: c must"):  # a distinct c: full path
        dg_triton.bf16_gemm_nt(a, b, d, bf16(M, N + 16))
    saved = settings._num_sms
    try:
        dg_triton.set_num_sms(7)
        dg_triton.bf16_gemm_nt(a, b, d)
        assert len(fake_cuda["runs"]) == 3
    finally:
        dg_triton.set_num_sms(saved)
    dispatch.clear_caches()
    dg_triton.bf16_gemm_nt(a, b, d)                 # a new dispatch generation: full path again
    assert len(fake_cuda["runs"]) == 4


def test_an_unhashable_compiled_dims_gets_the_full_paths_answer(fake_cuda):
    a, b, d = bf16(M, K), bf16(N, K), bf16(M, N)
    dg_triton.bf16_gemm_nt(a, b, d)
    with pytest.raises(DGArgumentError, match="bf16_gemm_nt: compiled_dims must be a str"):
        dg_triton.bf16_gemm_nt(a, b, d, compiled_dims=["n", "k"])
