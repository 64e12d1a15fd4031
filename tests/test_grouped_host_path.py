"""The warm host path of the M-grouped BF16 GEMMs (dg_triton/grouped.py): a call whose signature
passed the full checks on a CUDA device skips them, and nothing that can make a call invalid hides
behind that, on CPU with no GPU.

Meta tensors play CUDA tensors here (is_cuda reads is_meta) and the SM90 run is faked, so the
signature cache is exercised as on a GPU host; CPU tensors play the tensors of another device.
Each rejection is checked right after a valid call of the same shapes has warmed the cache.
"""
import pytest
import torch

import dg_triton
from dg_triton import dispatch, grouped
from dg_triton.errors import DGArgumentError
from dg_triton.kernels import sm90_grouped_gemm

G, M, N, K, MAX_M = 2, 64, 48, 64, 32
CONTIGUOUS, MASKED = "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked"


@pytest.fixture(autouse=True)
def fake_cuda(monkeypatch):
    """Meta tensors count as CUDA ones, SM90 serves them, and its runs are recorded."""
    monkeypatch.setattr(torch.Tensor, "is_cuda", torch._C.TensorBase.__dict__["is_meta"])
    monkeypatch.setattr(dispatch, "backend", lambda function, device, available: dispatch.SM90)
    monkeypatch.setattr(grouped, "_accepted", {})
    runs = []

    def fake_run(function, key, *args):
        runs.append((function, args))
        return True
    monkeypatch.setattr(sm90_grouped_gemm, "run_contiguous", fake_run)
    monkeypatch.setattr(sm90_grouped_gemm, "run_masked", fake_run)
    return runs


def bf16(*shape, device="meta"):
    return torch.empty(*shape, dtype=torch.bfloat16, device=device)


def int32(*shape):
    return torch.zeros(*shape, dtype=torch.int32, device="meta")


def contiguous_args():
    return {"a": bf16(M, K), "b": bf16(G, N, K), "d": bf16(M, N), "grouped_layout": int32(M)}


def masked_args():
    return {"a": bf16(G, MAX_M, K), "b": bf16(G, N, K), "d": bf16(G, MAX_M, N), "masked_m": int32(G),
            "expected_m": 16}


def misaligned(t):
    return torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:].view(t.shape)


def count_full_checks(monkeypatch):
    calls = []
    for name in ("_check_contiguous", "_check_masked"):
        check = getattr(grouped, name)
        monkeypatch.setattr(grouped, name, lambda *args, check=check: calls.append(1) or check(*args))
    return calls


@pytest.mark.parametrize("fn,make", [(CONTIGUOUS, contiguous_args), (MASKED, masked_args)])
def test_warm_call_skips_the_full_checks_and_runs_with_the_data_pointers(fn, make, fake_cuda, monkeypatch):
    checks = count_full_checks(monkeypatch)
    kwargs = make()
    for _ in range(3):
        getattr(dg_triton, fn)(**kwargs)
    assert len(checks) == 1 and len(fake_cuda) == 3
    addresses = tuple(kwargs[name].data_ptr() for name in ("a", "b", "d"))
    assert all(addresses in args for _, args in fake_cuda)
    other = make()  # new tensors, same signature: still no full check
    getattr(dg_triton, fn)(**other)
    assert len(checks) == 1 and len(fake_cuda) == 4


@pytest.mark.parametrize("fn,make", [(CONTIGUOUS, contiguous_args), (MASKED, masked_args)])
def test_tensors_off_cuda_always_take_the_full_checks(fn, make, monkeypatch):
    checks = count_full_checks(monkeypatch)
    kwargs = {name: torch.empty_like(value, device="cpu") if isinstance(value, torch.Tensor) else value
              for name, value in make().items()}
    for _ in range(2):
        getattr(dg_triton, fn)(**kwargs)
    assert len(checks) == 2 and not grouped._accepted


def contiguous_rejections():
    g = contiguous_args()
    return [
        ("a", dict(a=misaligned(g["a"]))),
        ("d", dict(d=misaligned(g["d"]))),
        ("b", dict(b=misaligned(g["b"]))),
        ("a", dict(a=bf16(M, K, device="cpu"))),
        ("b", dict(b=bf16(G, N, K, device="cpu"))),
        ("a", dict(d=bf16(M, N, device="cpu"))),  # with d elsewhere, a is the first to disagree
        ("grouped_layout", dict(grouped_layout=torch.zeros(M, dtype=torch.int32))),
        ("grouped_layout", dict(grouped_layout=torch.zeros(2 * M, dtype=torch.int32, device="meta")[::2])),
        ("grouped_layout", dict(grouped_layout=torch.zeros(M, dtype=torch.int64, device="meta"))),
        ("grouped_layout", dict(grouped_layout=[0] * M)),
        ("a", dict(a=torch.empty(M, K, dtype=torch.float16, device="meta"))),
        ("d", dict(d=bf16(N, M).t())),
        ("expected_m_for_psum_layout", dict(expected_m_for_psum_layout=32)),
    ]


@pytest.mark.parametrize("blamed,change", contiguous_rejections())
def test_contiguous_rejections_hold_after_a_warm_call(blamed, change, fake_cuda):
    dg_triton.m_grouped_bf16_gemm_nt_contiguous(**contiguous_args())
    with pytest.raises(DGArgumentError, match=rf"^{CONTIGUOUS}: {blamed} must be"):
        dg_triton.m_grouped_bf16_gemm_nt_contiguous(**{**contiguous_args(), **change})
    assert len(fake_cuda) == 1


@pytest.mark.parametrize("value", [True, 1.0])
def test_psum_expected_m_equal_as_a_key_to_an_accepted_one_is_still_rejected(value, fake_cuda):
    psum = {**contiguous_args(), "grouped_layout": int32(G), "use_psum_layout": True}
    dg_triton.m_grouped_bf16_gemm_nt_contiguous(**psum, expected_m_for_psum_layout=1)
    with pytest.raises(DGArgumentError, match=rf"^{CONTIGUOUS}: expected_m_for_psum_layout must be"):
        dg_triton.m_grouped_bf16_gemm_nt_contiguous(**psum, expected_m_for_psum_layout=value)
    assert len(fake_cuda) == 1


def test_contiguous_with_no_rows_stays_a_no_op_when_warm(fake_cuda):
    kwargs = {"a": bf16(0, K), "b": bf16(G, N, K), "d": bf16(0, N), "grouped_layout": int32(0)}
    for _ in range(2):
        dg_triton.m_grouped_bf16_gemm_nt_contiguous(**kwargs)
    assert not fake_cuda


def masked_rejections():
    g = masked_args()
    return [
        ("a", dict(a=misaligned(g["a"]))),
        ("d", dict(d=misaligned(g["d"]))),
        ("b", dict(b=misaligned(g["b"]))),
        ("b", dict(b=bf16(G, N, K, device="cpu"))),
        ("masked_m", dict(masked_m=torch.zeros(G, dtype=torch.int32))),
        ("masked_m", dict(masked_m=torch.zeros(2 * G, dtype=torch.int32, device="meta")[::2])),
        ("expected_m", dict(expected_m=True)),
        ("expected_m", dict(expected_m=16.0)),
        ("expected_m", dict(expected_m=[16])),
        ("b", dict(b=bf16(G, K, N).transpose(1, 2))),
        ("a", dict(a=bf16(G, MAX_M + 8, K)[:, :MAX_M])),
    ]


@pytest.mark.parametrize("blamed,change", masked_rejections())
def test_masked_rejections_hold_after_a_warm_call(blamed, change, fake_cuda):
    dg_triton.m_grouped_bf16_gemm_nt_masked(**{**masked_args(), "expected_m": 1})
    dg_triton.m_grouped_bf16_gemm_nt_masked(**masked_args())
    with pytest.raises(DGArgumentError, match=rf"^{MASKED}: {blamed} must be"):
        dg_triton.m_grouped_bf16_gemm_nt_masked(**{**masked_args(), **change})
    assert len(fake_cuda) == 2
