"""The end-to-end MoE forward built from dg_triton's kernels, and the plain-torch MoE it is checked
and timed against (issue 5). Test and benchmark code, not public API: it lives beside shapes.py,
which the tests import directly and the benchmarks through ``sys.path``.

The pipeline (``MoEForward``), for tokens ``x`` bf16 ``[T, H]`` routed by ``topk_ids [T, topk]``
with fp32 ``topk_weights``, experts of ``W1 [E, 2*I, H]`` (gate | up) and ``W2 [E, H, I]``:

1. ``permute``: ``moe_permute_contiguous`` puts each slot's token row into its expert's segment
   of the contiguous layout (API.md 3.4), FP8 1x128 per-token cast fused (scales already in the
   TMA-aligned layout the GEMM reads); it also returns ``m_indices`` (-1 on padding rows), the
   psum form and ``row_of_slot``, the map the combine reads back;
2. ``linear1``: ``m_grouped_fp8_gemm_nt_contiguous`` with W1 (128x128 block scales), bf16 ``[M_pad, 2*I]``;
3. ``activation``: ``swiglu_per_token_cast_to_fp8``: SwiGLU and the 1x128 cast for linear 2 in one
   pass (no bf16 intermediate);
4. ``linear2``: ``m_grouped_fp8_gemm_nt_contiguous`` with W2, bf16 ``[M_pad, H]``;
5. ``combine``: ``moe_unpermute_combine`` weights each slot's row by its routing weight and sums a
   token's slots in fp32.

The routing weights are applied in the combine, not in the SwiGLU: the combine must read them
anyway (a token's slots are summed there), whereas weighting in the SwiGLU would first need a
per-row weight tensor scattered from ``row_of_slot`` (one more launch). Numerically the choice
hardly matters: weighting before the 1x128 cast would scale each row's scales by its weight and
leave its FP8 codes as they are (up to the rounding of ``amax * w``).

The BF16 variant is the same pipeline with the bf16 permute, ``m_grouped_bf16_gemm_nt_contiguous``
and the bf16 ``swiglu``. Every stage is a dg_triton public call, so on CPU tensors the layout,
SwiGLU and combine run their plain-torch references and the BF16 GEMM its portable Triton kernel
under ``TRITON_INTERPRET=1``; the FP8 GEMMs exist only on SM90.

``torch_moe_forward`` is the plain MoE: per expert (a loop over the experts that received a slot),
gather its slots' tokens, ``silu(x W1g^T) * (x W1u^T)``, times ``W2^T``, weighted, summed back into
the tokens with ``index_add_``. In fp32 on the dequantized FP8 weights it is the tests' reference;
in bf16 it is the benchmark's torch baseline. Its routing (which slots each expert gets) is read on
the host once (``routing_plan``), so the loop itself has host-known sizes and fits a CUDA graph.
"""
from typing import NamedTuple

import torch

import dg_triton
from dg_triton.reference_fp8 import dequantize_operand

BLOCK = 128  # the 1x128 activation and 128x128 weight scale granularity of the SM90 FP8 GEMMs

# Accuracy against fp32_reference (calc_diff of API.md 3.16), whole output and worst token.
#
# FP8: the reference uses the same (dequantized) weights, so what separates the pipeline from it
# is the two 1x128 E4M3 casts of the activations (x before linear 1, the SwiGLU output before
# linear 2) and the bf16 roundings of h, of linear 2's output and of y. Measured with this
# module's pipeline on CPU with the reference GEMMs (dg_triton.reference_grouped) in place of the
# kernels, i.e. a pure-torch run of exactly these quantization steps (test_moe_forward_reference.py
# keeps the figure checked): calc_diff 8.7e-4 to 1.0e-3 at T >= 48, H >= 1024 (DeepSeek-V3's
# H 7168 / I 2048 included), any top-k and routing; 7.3e-4 to 1.1e-3 at toy sizes (T 16-40,
# H 128-256). Of that, the cast of x gives 6.8e-4 (E4M3's 3 mantissa bits: ~2.6% RMS relative
# error per element, ~3.3e-4 of calc_diff, doubled because gate and up both carry it into
# silu(gate) * up), the cast before linear 2 2.6e-4, bf16 roundings ~1e-5. It is a property of
# the format, not of the kernels, so the GPU pipeline must land on the same ~9.5e-4: 2e-3 leaves
# 2x for the GPU's accumulation order and FP8 MMA, and a real bug (a scale group, row or slot
# mixed up) costs far more. Per token (fewer elements average less) the worst measured is 2.0e-3
# at H 1024 and 1.75e-3 at H 2048 (4000 tokens, top-1, the noisiest routing): 4e-3 per token.
FP8_THRESHOLD = 2e-3
FP8_TOKEN_THRESHOLD = 4e-3
# BF16: only the bf16 roundings of h, the activation, linear 2's output and y remain: 5e-6 to
# 8e-6 measured the same way, up to 1.2e-5 at the interpreter test's toy sizes (H 64), above
# API.md 8's 1e-5 for one GEMM, which rounds once. 3e-5 leaves 2.5x at the toy sizes and more
# elsewhere; per token the worst measured is 2.1e-5 (H 64), 1e-4 leaves 5x.
BF16_THRESHOLD = 3e-5
BF16_TOKEN_THRESHOLD = 1e-4


# ---------------------------------------------------------------------------------------------
# Weights and routing


def random_tokens(num_tokens: int, hidden: int, device="cuda") -> torch.Tensor:
    """bf16 ``[T, H]`` randn rows, each scaled by its own factor in ``[1/8, 8]``: a token whose
    scales or rows were mixed up with another's is then far off, not a few percent."""
    scale = 2.0 ** (torch.rand(num_tokens, 1, device=device) * 6 - 3)
    return (torch.randn(num_tokens, hidden, device=device) * scale).to(torch.bfloat16)


def random_expert_weights(num_experts: int, n: int, k: int, device="cuda") -> torch.Tensor:
    """bf16 ``[E, N, K]`` randn / sqrt(K), so every layer keeps activations of order 1; drawn in
    bf16 directly (DeepSeek-V3's W1 is 15 GB in bf16, 30 GB in fp32)."""
    return torch.randn(num_experts, n, k, device=device, dtype=torch.bfloat16) / k ** 0.5


def quantize_expert_weights(w: torch.Tensor):
    """bf16 ``[E, N, K]`` -> ``(q float8_e4m3fn [E, N, K], sf fp32 [E, ceil(N/128), ceil(K/128)])``,
    each expert cast per 128x128 block (``per_block_cast_to_fp8``)."""
    pairs = [dg_triton.per_block_cast_to_fp8(w[e], False) for e in range(w.size(0))]
    return torch.stack([q for q, _ in pairs]), torch.stack([sf for _, sf in pairs])


def dequantize_expert(w_fp8, expert: int) -> torch.Tensor:
    """fp32 ``[N, K]`` values of one expert of ``quantize_expert_weights``'s result."""
    q, sf = w_fp8
    return dequantize_operand(q[expert], sf[expert], q.size(1), BLOCK, BLOCK)


def random_routing(num_tokens: int, topk: int, num_experts: int, pattern: str = "distinct",
                   device="cuda"):
    """``(topk_ids int32 [T, topk], topk_weights fp32 [T, topk])``; weights a softmax over the
    token's slots. Patterns: ``distinct`` (a router's top-k: distinct experts per token),
    ``subset`` (distinct experts among half of them, at least topk: the others get nothing),
    ``one`` (every slot on expert E // 2, repeated within a token when topk > 1), ``unused``
    (distinct, with about a fifth of the slots -1, as a capacity-limited router leaves them)."""
    if pattern == "one":
        ids = torch.full((num_tokens, topk), num_experts // 2, dtype=torch.int64)
    else:
        candidates = num_experts if pattern != "subset" else max(topk, num_experts // 2)
        ids = torch.rand(num_tokens, candidates).argsort(dim=1)[:, :topk]
        if pattern == "subset":
            chosen = torch.randperm(num_experts)[:candidates]
            ids = chosen[ids]
        elif pattern == "unused":
            ids[torch.rand(num_tokens, topk) < 0.2] = -1
        elif pattern != "distinct":
            raise ValueError(f"random_routing: unknown pattern {pattern!r}")
    weights = torch.softmax(torch.randn(num_tokens, topk), dim=1)
    return ids.to(torch.int32).to(device), weights.to(device)


class RoutingPlan(NamedTuple):
    """The used slots grouped by expert, as the host-side loop of ``torch_moe_forward`` needs it.

    slots: int64 ``[S]``, flat slot indices ``t * topk + k``, expert after expert (flat order inside one);
    tokens: int64 ``[S]``, the token of each of those slots;
    counts: ``list[int]`` per expert, on the host.
    """

    slots: torch.Tensor
    tokens: torch.Tensor
    counts: list


def routing_plan(topk_ids: torch.Tensor, num_experts: int) -> RoutingPlan:
    """Groups the used slots (ids in ``[0, E)``) by expert; reads the counts on the host."""
    flat = topk_ids.reshape(-1).to(torch.int64)
    used = (flat >= 0) & (flat < num_experts)
    key = torch.where(used, flat, num_experts)
    order = torch.sort(key, stable=True).indices
    counts = torch.bincount(key, minlength=num_experts + 1)[:num_experts].tolist()
    slots = order[:sum(counts)]
    return RoutingPlan(slots, slots // topk_ids.size(1), counts)


# ---------------------------------------------------------------------------------------------
# The pipeline of dg_triton kernels


class MoEForward:
    """The five-stage pipeline of the module docstring. ``w1``/``w2`` as ``quantize_expert_weights``
    returns them select the FP8 pipeline; bf16 ``[E, 2*I, H]`` / ``[E, H, I]`` tensors the BF16 one.
    ``use_psum_layout`` feeds the GEMMs the psum form of the same layout instead of ``m_indices``.

    Each stage is a method taking the previous stage's result, so a benchmark can time them one by
    one; calling the object runs them all. Nothing synchronizes with the host: the layout's row
    count is a host-known bound, so a call can be captured in a CUDA graph and replayed with other
    tokens and routing copied into the same input tensors."""

    def __init__(self, w1, w2, use_psum_layout: bool = False):
        self.fp8 = isinstance(w1, tuple)
        self.w1, self.w2 = w1, w2
        weights1 = w1[0] if self.fp8 else w1
        self.num_experts = weights1.size(0)
        self.intermediate = weights1.size(1) // 2
        self.hidden = weights1.size(2)
        self.use_psum_layout = use_psum_layout

    def permute(self, x: torch.Tensor, topk_ids: torch.Tensor) -> dg_triton.moe_layout.MoEContiguousLayout:
        return dg_triton.moe_permute_contiguous(x, topk_ids, self.num_experts,
                                                use_psum_layout=self.use_psum_layout, quantize=self.fp8)

    def _linear(self, a, w, layout, n: int) -> torch.Tensor:
        rows = layout.permuted.size(0)
        d = torch.empty((rows, n), dtype=torch.bfloat16, device=layout.permuted.device)
        # Looked up on each call, so a CPU test can substitute the reference GEMM.
        gemm = dg_triton.m_grouped_fp8_gemm_nt_contiguous if self.fp8 else dg_triton.m_grouped_bf16_gemm_nt_contiguous
        gemm(a, w, d, layout.grouped_layout, use_psum_layout=self.use_psum_layout)
        return d

    def linear1(self, layout) -> torch.Tensor:
        return self._linear(layout.a, self.w1, layout, 2 * self.intermediate)

    def activation(self, h: torch.Tensor):
        if self.fp8:
            return dg_triton.swiglu_per_token_cast_to_fp8(h, False)
        return dg_triton.swiglu(h)

    def linear2(self, act, layout) -> torch.Tensor:
        return self._linear(act, self.w2, layout, self.hidden)

    def combine(self, out: torch.Tensor, layout, topk_weights: torch.Tensor) -> torch.Tensor:
        return dg_triton.moe_unpermute_combine(out, layout.row_of_slot, topk_weights)

    def __call__(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        layout = self.permute(x, topk_ids)
        h = self.linear1(layout)
        act = self.activation(h)
        out = self.linear2(act, layout)
        return self.combine(out, layout, topk_weights)


# ---------------------------------------------------------------------------------------------
# Plain torch


def torch_moe_forward(x: torch.Tensor, topk_weights: torch.Tensor, plan: RoutingPlan, expert_weights,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``y[t] = sum over used slots k of w[t, k] * (silu(x W1g^T) * (x W1u^T)) W2^T`` with the
    expert of slot (t, k), computed and accumulated in ``dtype``, returned in ``dtype`` ``[T, H]``.
    ``expert_weights(e)`` gives expert e's ``(W1 [2*I, H], W2 [H, I])`` in ``dtype``; it is
    called only for experts that received a slot."""
    xs = x.to(dtype)[plan.tokens]
    ws = topk_weights.reshape(-1)[plan.slots].to(dtype)
    outs = torch.empty_like(xs)
    start = 0
    for expert, count in enumerate(plan.counts):
        if count:
            w1, w2 = expert_weights(expert)
            h = xs[start:start + count] @ w1.T
            intermediate = h.size(1) // 2
            act = torch.nn.functional.silu(h[:, :intermediate]) * h[:, intermediate:]
            torch.matmul(act, w2.T, out=outs[start:start + count])
        start += count
    y = torch.zeros((x.size(0), outs.size(1)), dtype=dtype, device=x.device)
    return y.index_add_(0, plan.tokens, outs * ws[:, None])


def per_token_calc_diff(y: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """float64 ``[T]``: ``calc_diff`` of each token's row (0 where both rows are 0)."""
    y, reference = y.double(), reference.double()
    denominator = (y * y + reference * reference).sum(1)
    diff = 1 - 2 * (y * reference).sum(1) / denominator
    return torch.where(denominator > 0, diff, torch.zeros_like(diff))


def fp32_reference(x, topk_ids, topk_weights, w1, w2) -> torch.Tensor:
    """``torch_moe_forward`` in fp32 on the dequantized weights (FP8 pairs) or on the bf16 ones:
    the exact MoE of the weights the pipeline uses, with unquantized activations."""
    if isinstance(w1, tuple):
        def expert_weights(e):
            return dequantize_expert(w1, e), dequantize_expert(w2, e)
        num_experts = w1[0].size(0)
    else:
        def expert_weights(e):
            return w1[e].float(), w2[e].float()
        num_experts = w1.size(0)
    return torch_moe_forward(x, topk_weights, routing_plan(topk_ids, num_experts), expert_weights)
