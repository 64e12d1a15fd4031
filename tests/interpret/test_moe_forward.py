"""The BF16 MoE forward of tests/moe_forward.py under the Triton interpreter on CPU tensors, every
stage a Triton kernel: the permute, the portable M-grouped BF16 GEMM (twice), SwiGLU and the
combine, against the plain fp32 torch MoE (moe_forward.BF16_THRESHOLD, justified there).

The public layout, SwiGLU and combine calls run their plain-torch references on CPU tensors (only
the GEMM dispatches to the portable Triton kernel there), so this test points those fallbacks at
the Triton launchers the calls use on CUDA; the pipeline code is the one the GPU runs. Sizes are
toy ones and the mk alignment is 32 (the interpreter's cost is per program), about a second a case.
"""
import sys
import types
import zlib
from pathlib import Path

import pytest
import torch

from dg_triton import activation
from dg_triton import moe_layout as public_moe_layout
from dg_triton.testing import calc_diff
from dg_triton.triton import moe_layout as moe_layout_kernels
from dg_triton.triton import swiglu as swiglu_kernels
from dg_triton.utils import layout as mk_layout

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import moe_forward  # noqa: E402

ALIGNMENT = 32


@pytest.fixture(autouse=True)
def triton_everywhere(request, monkeypatch):
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    monkeypatch.delenv("DG_BACKEND", raising=False)
    kernels = types.SimpleNamespace(moe_permute_contiguous=moe_layout_kernels.permute_contiguous,
                                    moe_unpermute_combine=moe_layout_kernels.unpermute_combine)
    monkeypatch.setattr(public_moe_layout, "reference_moe_layout", kernels)
    monkeypatch.setattr(activation, "reference_swiglu", types.SimpleNamespace(swiglu=swiglu_kernels.swiglu_triton))
    previous = mk_layout.get_mk_alignment_for_contiguous_layout()
    mk_layout.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    yield
    mk_layout.set_mk_alignment_for_contiguous_layout(previous)


# In the psum layout linear 1 never writes the rows past the last expert (API.md 3.4), so SwiGLU
# reads whatever torch.empty left there and numpy may warn of overflow in them; those rows are
# never read back (the combine reads only rows of used slots), and the checks below would see it.
_GARBAGE_TAIL_ROWS = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                                                "ignore:invalid value encountered:RuntimeWarning")
# (tokens, hidden, intermediate, experts, topk, routing pattern, psum layout): empty experts, all
# slots on one expert, unused slots, top-1 and a top-k that is not a power of two.
CASES = [
    (24, 128, 64, 4, 2, "distinct", False),
    (17, 64, 96, 6, 1, "subset", False),
    pytest.param(9, 64, 32, 4, 3, "one", True, marks=_GARBAGE_TAIL_ROWS),
    (20, 96, 64, 5, 4, "unused", False),
]


@pytest.mark.parametrize("tokens,hidden,intermediate,experts,topk,pattern,use_psum_layout", CASES)
def test_bf16_moe_forward_of_triton_kernels_matches_torch_moe(tokens, hidden, intermediate, experts, topk,
                                                              pattern, use_psum_layout):
    x = moe_forward.random_tokens(tokens, hidden, device="cpu")
    w1 = moe_forward.random_expert_weights(experts, 2 * intermediate, hidden, device="cpu")
    w2 = moe_forward.random_expert_weights(experts, hidden, intermediate, device="cpu")
    topk_ids, topk_weights = moe_forward.random_routing(tokens, topk, experts, pattern, device="cpu")
    pipeline = moe_forward.MoEForward(w1, w2, use_psum_layout)
    layout = pipeline.permute(x, topk_ids)
    assert layout.permuted.size(0) % ALIGNMENT == 0
    y = pipeline(x, topk_ids, topk_weights)
    reference = moe_forward.fp32_reference(x, topk_ids, topk_weights, w1, w2)
    what = f"T={tokens} H={hidden} I={intermediate} E={experts} topk={topk} {pattern} psum={use_psum_layout}"
    assert y.dtype == torch.bfloat16 and y.shape == (tokens, hidden), what
    assert torch.isfinite(y.float()).all(), what
    unrouted = ((topk_ids < 0) | (topk_ids >= experts)).all(dim=1)
    assert (y[unrouted] == 0).all(), f"{what}: a token with no used slot must come out 0"
    diff = float(calc_diff(y, reference))
    assert diff < moe_forward.BF16_THRESHOLD, f"{what}: calc_diff {diff:.3g}"
    worst = float(moe_forward.per_token_calc_diff(y, reference).max())
    assert worst < moe_forward.BF16_TOKEN_THRESHOLD, f"{what}: worst token calc_diff {worst:.3g}"
