"""Dense FP8 GEMMs: D = C + dequant(A) @ dequant(B)^T (API.md 3.1), and fp8_gemm_nt_skip_head_mid
(API.md 3.3).

Every alias rewrites its physical operands into the logical NT problem (A [M, K], B [N, K]) with
views, data and scale factors alike (API.md 1.1), never copies. The NT core then: checks the
operands, d and c (validation_fp8.operands); applies the empty-problem rules of API.md 1.3 (no
kernel); resolves the recipe and checks the scale factors and what the recipe's kernel needs of d
and c (validation_fp8.scaling); dispatches (the SM90 CUDA kernel -- or for M up to
heuristics.sm90.FP8_GEMV_MAX_M (1) at K from FP8_GEMV_MIN_K, the CUDA-core GEMV of dg_triton/triton/gemv.py --
or the portable Triton kernel: dispatch.py); brings the SFs into the layouts the kernel reads with
transform_sf_into_required_layout (the portable kernel reads the same layouts through their
strides); copies c into d; launches.

``fp8_gemm_*`` are the same callables as ``fp8_fp4_gemm_*`` (API.md 3), so messages name the
``fp8_fp4_gemm_*`` function.
"""
import torch

from dg_triton import dispatch, settings, validation_fp8
from dg_triton.heuristics import sm90 as heuristics
from dg_triton.kernels import sm90_fp8_gemm
from dg_triton.kernels.sm90_fp8_gemm import Fp8GemmProblem
from dg_triton.reference_sf_layout import is_mn_major_tma_aligned
from dg_triton.utils.layout import get_mn_major_tma_aligned_tensor, transform_sf_into_required_layout
from dg_triton.validation_fp8 import KIND_1D2D

__all__ = [
    "fp8_fp4_gemm_nn",
    "fp8_fp4_gemm_nt",
    "fp8_fp4_gemm_tn",
    "fp8_fp4_gemm_tt",
    "fp8_gemm_nn",
    "fp8_gemm_nt",
    "fp8_gemm_nt_skip_head_mid",
    "fp8_gemm_tn",
    "fp8_gemm_tt",
]


def _launch(function: str, rules, ops, scaling, d, c, compiled_dims: str, disable_ue8m0_cast: bool,
            head_splits) -> None:
    """A validated, non-empty problem: SF layouts, then the SM90 or the portable kernel."""
    # refuse before touching d or the SFs
    backend = dispatch.backend_of(function, d, ops.device_index, (dispatch.SM90,))
    m, n, k = ops.m, ops.n, ops.k
    if rules is validation_fp8.SM90_RULES:
        # What transform_sf_into_required_layout does with SFs the SM90 rules have already
        # checked (fp32, exact shapes, per-block SFB strides), without checking them again: that
        # re-check was ~20 us of a ~60 us host call on the CI machine. Per-token SFs go to the
        # TMA-aligned MN-major layout (no copy when they are in it); a per-block SFB stays.
        sfa = ops.sfa if is_mn_major_tma_aligned(ops.sfa) else get_mn_major_tma_aligned_tensor(ops.sfa)
        sfb = ops.sfb
        if scaling.kind != KIND_1D2D and not is_mn_major_tma_aligned(sfb):
            sfb = get_mn_major_tma_aligned_tensor(sfb)
    else:
        sfa = transform_sf_into_required_layout(ops.sfa, m, k, scaling.gran_a,
                                                disable_ue8m0_cast=disable_ue8m0_cast)
        sfb = transform_sf_into_required_layout(ops.sfb, n, k, scaling.gran_b,
                                                disable_ue8m0_cast=disable_ue8m0_cast)
    if scaling.kind == KIND_1D2D and not sfb.is_contiguous():
        # DeepGEMM takes the per-block SFB row-major or transpose-contiguous; the kernel reads
        # row-major, and the copy is ceil(N/128) * ceil(K/128) floats.
        sfb = sfb.contiguous()
    validation_fp8.transformed_sf_layout(function, scaling.kind, sfa, sfb)
    if c is not None and c is not d:
        d.copy_(c)
    if backend == dispatch.PORTABLE:
        from dg_triton.triton import gemm_portable  # imports Triton: only when used
        gemm_portable.fp8_gemm(function, ops.a, sfa, ops.b, sfb, d, scaling.kind, c is not None,
                               head_splits)
        return
    if heuristics.takes_gemv(m, k, fp8=True) and head_splits is None:
        from dg_triton.triton import gemv  # imports Triton: only when used
        gemv.fp8_gemv(function, ops.a, sfa, ops.b, sfb, d, scaling.kind, c is not None)
        return
    problem = Fp8GemmProblem(m, n, k, scaling.kind, ops.device_index, head_splits,
                             ops.layout + (sfa.stride(), sfb.stride()))
    sm90_fp8_gemm.run(function, ops.a, sfa, ops.b, sfb, d, problem, c is not None, compiled_dims)


def _fp8_gemm(function: str, a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims: str,
              disable_ue8m0_cast, transposed=(False, False)) -> None:
    recipe, recipe_a, recipe_b, disable_ue8m0_cast = validation_fp8.arguments(
        function, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)
    rules = validation_fp8.rules_for_arch(function, settings.current_arch_major())
    ops = validation_fp8.operands(function, rules, a, b, d, c, transposed)
    # Empty problems (API.md 1.3): nothing to multiply, no kernel, scale factors not read.
    if ops.m == 0 or ops.n == 0:
        return
    if ops.k == 0:
        if c is None:
            d.zero_()
        elif c is not d:
            d.copy_(c)
        return
    scaling = validation_fp8.scaling(function, rules, ops, d, c, recipe, recipe_a, recipe_b, transposed)
    _launch(function, rules, ops, scaling, d, c, compiled_dims, disable_ue8m0_cast, None)


def _transpose(t):
    # Only tensors are transposed; anything else reaches validation as it came.
    return t.transpose(0, 1) if isinstance(t, torch.Tensor) and t.dim() == 2 else t


def _transpose_pair(pair):
    """(data, sf) -> (data.T, sf.T): an alias passes both in the transposed orientation."""
    if isinstance(pair, (tuple, list)) and len(pair) == 2:
        return _transpose(pair[0]), _transpose(pair[1])
    return pair


def fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None,
                    compiled_dims: str = "nk", disable_ue8m0_cast: bool = False) -> None:
    """d = c + dequant(a) @ dequant(b).T with a = (A [M, K], sfa), b = (B [N, K], sfb); d (and c)
    [M, N] N-major. On SM90: FP8 E4M3 K-major operands, fp32 SFs; recipe (1, 128, 128) (sfa per
    token, sfb per 128x128 block) with a bf16 d and no c, or (1, 1, 128) (both per token) with an
    fp32 d and c (c may be d)."""
    _fp8_gemm("fp8_fp4_gemm_nt", a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims,
              disable_ue8m0_cast)


def fp8_fp4_gemm_nn(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None,
                    compiled_dims: str = "nk", disable_ue8m0_cast: bool = False) -> None:
    """d = c + a @ b with a = (A [M, K], sfa), b = (B [K, N], sfb [ceil(K/gk), ceil(N/gn)])."""
    _fp8_gemm("fp8_fp4_gemm_nn", a, _transpose_pair(b), d, c, recipe, recipe_a, recipe_b,
              compiled_dims, disable_ue8m0_cast, (False, True))


def fp8_fp4_gemm_tn(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None,
                    compiled_dims: str = "mn", disable_ue8m0_cast: bool = False) -> None:
    """d = c + a.T @ b with a = (A [K, M], sfa [ceil(K/gk), ceil(M/gm)]), b = (B [K, N], sfb
    transposed likewise)."""
    _fp8_gemm("fp8_fp4_gemm_tn", _transpose_pair(a), _transpose_pair(b), d, c, recipe, recipe_a,
              recipe_b, compiled_dims, disable_ue8m0_cast, (True, True))


def fp8_fp4_gemm_tt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None,
                    compiled_dims: str = "mn", disable_ue8m0_cast: bool = False) -> None:
    """d = c + a.T @ b.T with a = (A [K, M], sfa [ceil(K/gk), ceil(M/gm)]), b = (B [N, K], sfb)."""
    _fp8_gemm("fp8_fp4_gemm_tt", _transpose_pair(a), b, d, c, recipe, recipe_a, recipe_b,
              compiled_dims, disable_ue8m0_cast, (True, False))


fp8_gemm_nt = fp8_fp4_gemm_nt
fp8_gemm_nn = fp8_fp4_gemm_nn
fp8_gemm_tn = fp8_fp4_gemm_tn
fp8_gemm_tt = fp8_fp4_gemm_tt


def fp8_gemm_nt_skip_head_mid(a, b, d, head_splits, recipe=None, compiled_dims: str = "nk",
                              disable_ue8m0_cast: bool = False) -> None:
    """fp8_gemm_nt whose output skips the middle of each head (API.md 3.3): with head_splits
    (left, mid, right), N = H * (left + right) and d is [M, H * (left + mid + right)]; column
    h * (left + right) + j of the product lands at h * (left + mid + right) + j (j < left) or
    + mid + j (j >= left). The mid columns of d are not written. No c; FP8 operands only."""
    function = "fp8_gemm_nt_skip_head_mid"
    recipe, _, _, disable_ue8m0_cast = validation_fp8.arguments(
        function, recipe, None, None, compiled_dims, disable_ue8m0_cast)
    head_splits = validation_fp8.head_splits_argument(function, head_splits)
    rules = validation_fp8.rules_for_arch(function, settings.current_arch_major())
    ops = validation_fp8.operands(function, rules, a, b, d, None, head_splits=head_splits)
    if ops.m == 0:
        return
    scaling = validation_fp8.scaling(function, rules, ops, d, None, recipe, None, None, skip_head_mid=True)
    _launch(function, rules, ops, scaling, d, None, compiled_dims, disable_ue8m0_cast, head_splits)
