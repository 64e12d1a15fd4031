"""K-grouped GEMMs (API.md 3.6), the MoE weight gradient: G groups share M and N and each has its
own K, the groups' K rows concatenated; ``d[g] = c[g] + A_g @ B_g^T`` with an fp32 (BF16: or bf16)
``d`` of shape [G, M, N].

- ``k_grouped_fp8_gemm_nt_contiguous`` (SM90's FP8 form): a and b are flat FP8 buffers holding
  group g's row-major [M, k_g] / [N, k_g] block at element offset M * start_g / N * start_g; sfa
  fp32 [M, sum(ks)/128] and sfb fp32 [N, sum(ks)/128], per token and 128 of K (recipe (1, 1, 128)).
- ``k_grouped_bf16_gemm_tn_contiguous``: a [sum(ks), M], b [sum(ks), N] bf16, group g's rows
  ``[start_g, start_g + k_g)``; ``d[g] = c[g] + a[rows_g].T @ b[rows_g]``.
- ``k_grouped_fp8_gemm_tn_contiguous`` exists upstream on SM100 only (MN-major FP8 operands, which
  SM90's FP8 tensor cores cannot read); dg_triton has no SM100 kernel, so it raises
  NotImplementedError.

Implementation: ``ks_cpu`` is on the host. On SM90 each form is one persistent launch over the
tiles of up to 16 groups at a time (FP8: the 1D1D kernel, fp32 D; BF16: the BF16 kernel with A and
B MN-major), each group's operand and D descriptors passed in the kernel's parameters
(kernels/sm90_k_grouped_gemm.py), so group g + 1's tiles fill the SMs group g's last wave leaves
idle. On other devices and under the Triton interpreter, the portable Triton GEMMs run once per
group (dispatch.py). Operands, scale factors and D are the caller's tensors or views into them
(scale factors not already in the TMA-aligned MN-major layout are transformed once per call).
Nothing reads device data on the host, so a call can be captured in a CUDA graph (after one warm
call has compiled its kernels). ``c`` is copied into ``d`` once when it is not ``d``; empty groups
then already hold ``d[g] = c[g]``. The tile is chosen for [M, N, mean k_g]: FP8 as the dense
1D1D GEMM's, BF16 with the waves counted over all the launch's tiles
(sm90_k_grouped_gemm.choose_bf16_config).

Each function is validate (validation_k_grouped) -> the empty-problem rules of API.md 1.3 ->
dispatch -> launches.
"""
import torch

from dg_triton import dispatch, validation_k_grouped
from dg_triton.errors import reject
from dg_triton.kernels import sm90_k_grouped_gemm
from dg_triton.reference_sf_layout import is_mn_major_tma_aligned
from dg_triton.utils.layout import get_mn_major_tma_aligned_tensor
from dg_triton.validation_fp8 import KIND_1D1D, SFA, SFB
from dg_triton.validation_k_grouped import FP8_GRAN_K

__all__ = [
    "k_grouped_bf16_gemm_tn_contiguous",
    "k_grouped_fp8_gemm_nt_contiguous",
    "k_grouped_fp8_gemm_tn_contiguous",
]

_SM90 = (dispatch.SM90,)


def _empty_problem(problem, d, c) -> bool:
    """API.md 1.3: M or N zero touches nothing; all groups empty leaves d = c. True if handled."""
    if problem.m == 0 or problem.n == 0:
        return True
    if problem.sum_k == 0:
        if c is not d:
            d.copy_(c)
        return True
    return False


def _kernel_scale_factor(function: str, argument: str, sf: torch.Tensor) -> torch.Tensor:
    """sf in the TMA-aligned MN-major layout (API.md 2.3), copied only if it is not in it. Column
    slices of that layout keep it, and start 16-byte aligned (align(MN, 4) floats per column), so
    each group reads its own columns in place."""
    if not is_mn_major_tma_aligned(sf):
        return get_mn_major_tma_aligned_tensor(sf)
    address = sf.data_ptr()
    if address % 16:
        raise reject(function, argument, "16-byte aligned (TMA) when given in the TMA-aligned MN-major layout",
                     f"data_ptr {address:#x}")
    return sf


# ---------------------------------------------------------------------------------------------
# FP8 nt (SM90)


def k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks_cpu, grouped_layout, c=None, recipe=(1, 1, 128),
                                     compiled_dims: str = "mn", use_psum_layout: bool = False) -> None:
    """d[g] = c[g] + dequant(A_g) @ dequant(B_g).T for each group g (API.md 3.6, SM90 form).

    a = (A, sfa): A fp8, contiguous, sum(ks) * M elements, group g's row-major [M, k_g] block at
    element offset M * start_g (start_g = sum of the earlier ks); sfa fp32 [M, sum(ks)/128], any
    strides. b = (B, sfb) likewise with N. d fp32 [G, M, N] contiguous; c required (d itself, or a
    contiguous fp32 [G, M, N]); ks_cpu the host list of the G sizes k_g, each a multiple of 128 and
    of get_mk_alignment_for_contiguous_layout(); grouped_layout int32 [G] contiguous, the same sizes
    on the device (not read). recipe must be (1, 1, 128); no psum layout.

    On SM90 one launch of the k-grouped FP8 1D1D kernel per 16 non-empty groups (module
    docstring); compiled_dims is accepted and unused there (the groups' K differ)."""
    function = "k_grouped_fp8_gemm_nt_contiguous"
    validation_k_grouped.refuse_fp8_nt_on_sm100(function)
    validation_k_grouped.fp8_recipe(function, recipe)
    ks = validation_k_grouped.arguments(function, ks_cpu, compiled_dims, use_psum_layout)
    a_data, sfa, b_data, sfb, problem = validation_k_grouped.fp8_nt(function, a, b, d, ks, grouped_layout, c)
    if _empty_problem(problem, d, c):
        return
    validation_k_grouped.fp8_scale_factors(function, sfa, sfb, problem, d)
    backend = dispatch.backend(function, d.device, _SM90)  # refuse before touching d
    sfa = _kernel_scale_factor(function, SFA, sfa)
    sfb = _kernel_scale_factor(function, SFB, sfb)
    if c is not d:
        d.copy_(c)
    m, n = problem.m, problem.n
    a_flat, b_flat = a_data.view(-1), b_data.view(-1)
    if backend != dispatch.PORTABLE:
        key = (m, n, problem.ks, problem.device_index, sfa.stride(), sfb.stride())
        sm90_k_grouped_gemm.run(function, a_flat, sfa, b_flat, sfb, d, m, n, problem.ks, problem.starts, key)
        return
    from dg_triton.triton import gemm_portable  # imports Triton: only when used
    for g, (k, start) in enumerate(zip(problem.ks, problem.starts)):
        if k == 0:
            continue
        a_g = a_flat[m * start:m * (start + k)].view(m, k)
        b_g = b_flat[n * start:n * (start + k)].view(n, k)
        sf_columns = slice(start // FP8_GRAN_K, (start + k) // FP8_GRAN_K)
        gemm_portable.fp8_gemm(function, a_g, sfa[:, sf_columns], b_g, sfb[:, sf_columns], d[g],
                               KIND_1D1D, True)


def k_grouped_fp8_gemm_tn_contiguous(a, b, d, ks_cpu, grouped_layout, c=None, recipe=(1, 1, 128),
                                     compiled_dims: str = "mn", use_psum_layout: bool = False) -> None:
    """DeepGEMM's SM100-only k-grouped FP8 GEMM (API.md 3.6: a [sum(ks), M], b [sum(ks), N] MN-major
    FP8, per-channel UE8M0 scale factors, psum layout). dg_triton has no SM100 kernel yet, and SM90's
    FP8 tensor cores cannot read MN-major operands: always NotImplementedError."""
    raise NotImplementedError(
        "k_grouped_fp8_gemm_tn_contiguous: DeepGEMM's SM100-only k-grouped FP8 GEMM (MN-major [sum(ks), MN] "
        "operands, per-channel UE8M0 scale factors); dg_triton has no SM100 kernel yet, and SM90 FP8 cannot "
        "read MN-major operands. On SM90 use k_grouped_fp8_gemm_nt_contiguous (each group's operands K-major, "
        "API.md 3.6)")


# ---------------------------------------------------------------------------------------------
# BF16 tn


def k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks_cpu, grouped_layout, c=None, compiled_dims: str = "mn",
                                      use_psum_layout: bool = False) -> None:
    """d[g] = c[g] + a[rows_g].T @ b[rows_g] for each group g (API.md 3.6): a [sum(ks), M] and
    b [sum(ks), N] bf16 contiguous, group g's rows [start_g, start_g + k_g); d fp32 (or bf16)
    [G, M, N] contiguous; c required (d itself, or a contiguous tensor of d's dtype and shape);
    ks_cpu the host list of the G sizes k_g (multiples of get_mk_alignment_for_contiguous_layout(),
    and of 128 on SM90); grouped_layout int32 [G] contiguous (not read). No psum layout.

    On SM90 one launch of the k-grouped BF16 kernel (A and B MN-major) per 16 non-empty groups
    (module docstring); compiled_dims is accepted and unused there (the groups' K differ)."""
    function = "k_grouped_bf16_gemm_tn_contiguous"
    ks = validation_k_grouped.arguments(function, ks_cpu, compiled_dims, use_psum_layout)
    problem = validation_k_grouped.bf16_tn(function, a, b, d, ks, grouped_layout, c)
    if _empty_problem(problem, d, c):
        return
    backend = dispatch.backend(function, d.device, _SM90)  # refuse before touching d
    if c is not d:
        d.copy_(c)
    m, n = problem.m, problem.n
    if backend != dispatch.PORTABLE:
        key = (m, n, problem.ks, problem.device_index, d.dtype)
        sm90_k_grouped_gemm.run_bf16(function, a, b, d, m, n, problem.ks, problem.starts, key)
        return
    from dg_triton.triton import gemm_portable  # imports Triton: only when used
    for g, (k, start) in enumerate(zip(problem.ks, problem.starts)):
        if k:
            gemm_portable.bf16_gemm(function, a.narrow(0, start, k).T, b.narrow(0, start, k).T, d[g], True)
