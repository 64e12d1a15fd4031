"""Argument checks of the K-grouped GEMMs (API.md 1.2, 1.3, 3.6, 4): k_grouped_fp8_gemm_nt_contiguous
(SM90's FP8 form) and k_grouped_bf16_gemm_tn_contiguous.

Conventions as in validation.py: every rejection is a DGArgumentError "{function}: {argument} must be
{expected}, got {actual}", raised before any kernel work. FP8 operands are named as the caller
passed them: ``a[0]`` / ``b[0]`` (data), ``a[1] (sfa)`` / ``b[1] (sfb)``.

The checks come in DeepGEMM's order: the non-tensor arguments (recipe, psum flag, ks_cpu); then d,
c, grouped_layout and the operands (types, shapes, contiguity, devices, the TMA layout of every
group); then the caller applies API.md 1.3's early returns; only then are the FP8 scale factors
looked at (`fp8_scale_factors`), so an empty problem's SFs are not read, as in DeepGEMM.

The per-group K sizes come from ``ks_cpu`` (a host list): group g covers K rows
``[start_g, start_g + k_g)`` with ``start_g = sum_{h<g} k_h``. ``grouped_layout`` (the same sizes on
the device) is checked for type, shape and device only; its values are the caller's contract and
never read by the host, so no call syncs.

Rules by architecture follow DeepGEMM, whose SM90 path is taken on anything but SM100: a host
without a GPU gets the SM90 rules (k_g % 128, no psum layout). On SM100 the FP8 ``nt`` form does
not exist (NotImplementedError), and BF16 drops the 128 rule (only the mk alignment), while its
psum layout waits for the SM100 kernel (NotImplementedError: group sizes that exist only on the
device cannot be split into per-group launches without a sync).
"""
import operator
from typing import NamedTuple

import torch

from dg_triton import settings
from dg_triton.errors import reject
from dg_triton.grouped import _index_tensor, _positive
from dg_triton.settings import bool_argument
from dg_triton.utils.layout import _check_ks_cpu, get_mk_alignment_for_contiguous_layout
from dg_triton.validation import _operand_major, _same_device, _tma_layout, compiled_dims_argument
from dg_triton.validation_fp8 import SFA, SFB, _pair

_Tensor = torch.Tensor
_FP8, _FP4_PACKED = torch.float8_e4m3fn, torch.int8
_BF16, _FP32 = torch.bfloat16, torch.float32

# SM90's k-grouped kernels step K in blocks of 128 (and the FP8 scale factors come per 128 of K).
SM90_K_ALIGNMENT = 128
FP8_RECIPE = (1, 1, 128)
FP8_GRAN_K = 128


class KGroupedProblem(NamedTuple):
    """A checked k-grouped problem: d [G, M, N], group g's K rows [starts[g], starts[g] + ks[g])."""
    m: int
    n: int
    ks: tuple
    starts: tuple
    sum_k: int
    device_index: int

    @property
    def empty(self) -> bool:
        """Nothing to multiply (API.md 1.3): no kernel, and the scale factors are not read."""
        return self.m == 0 or self.n == 0 or self.sum_k == 0


# ---------------------------------------------------------------------------------------------
# Non-tensor arguments


def _sm100() -> bool:
    return settings.current_arch_major() == 10


def arguments(function: str, ks_cpu, compiled_dims, use_psum_layout) -> list[int]:
    """The checked per-group K sizes (ks_cpu as ints). The psum layout is refused: on SM90 as
    DeepGEMM refuses it; on SM100 until its kernel exists (module docstring)."""
    compiled_dims_argument(function, compiled_dims)
    if bool_argument(function, "use_psum_layout", use_psum_layout):
        if _sm100():
            raise NotImplementedError(
                f"{function}: the psum layout (use_psum_layout=True) needs the SM100 k-grouped kernel, which "
                f"dg_triton has not built yet; pass the per-group sizes in ks_cpu with use_psum_layout=False")
        raise reject(function, "use_psum_layout", "False on SM90 (the psum layout of k-grouped GEMMs is "
                     "SM100-only, API.md 3.6)", repr(use_psum_layout))
    ks = _check_ks_cpu(function, ks_cpu)
    if not ks:
        raise reject(function, "ks_cpu", "a non-empty list of the G per-group K sizes (required without the "
                     "psum layout)", repr(ks_cpu))
    return ks


def fp8_recipe(function: str, recipe) -> None:
    """SM90's k-grouped FP8 GEMM is the 1D1D kernel: A and B both scaled per token, per 128 of K."""
    values = None
    if isinstance(recipe, (tuple, list)) and len(recipe) == 3 and not any(isinstance(v, bool) for v in recipe):
        try:
            values = tuple(operator.index(v) for v in recipe)
        except TypeError:
            pass
    if values != FP8_RECIPE:
        raise reject(function, "recipe", "(1, 1, 128) (k-grouped FP8 on SM90: sfa and sfb per token, per 128 "
                     "of K)", repr(recipe))


def refuse_fp8_nt_on_sm100(function: str) -> None:
    if _sm100():
        raise NotImplementedError(
            f"{function}: DeepGEMM's SM90-only k-grouped FP8 form (K-major per-group operands, fp32 scale "
            f"factors); on SM100 DeepGEMM serves k-grouped FP8 through k_grouped_fp8_gemm_tn_contiguous, whose "
            f"SM100 kernel dg_triton has not built yet")


# ---------------------------------------------------------------------------------------------
# d, c, grouped_layout, ks


def _output(function: str, d, c, dtypes: tuple) -> tuple[int, int, int]:
    """d [G, M, N] contiguous with G > 0; c given (k-grouped GEMMs always accumulate), d itself or
    a contiguous tensor of d's dtype and shape. Returns (G, M, N)."""
    if not isinstance(d, _Tensor):
        raise reject(function, "d", "a torch.Tensor", type(d).__name__)
    if d.dim() != 3:
        raise reject(function, "d", "a 3-D tensor [G, M, N]", f"{d.dim()}-D shape {tuple(d.shape)}")
    if d.dtype not in dtypes:
        raise reject(function, "d", " or ".join(str(t) for t in dtypes) + " (k-grouped GEMMs accumulate in FP32)",
                     d.dtype)
    if not d.is_contiguous():
        raise reject(function, "d", "contiguous [G, M, N]", f"strides {tuple(d.stride())}")
    num_groups, m, n = d.shape
    _positive(function, "d", num_groups, "group count G = d.size(0)")
    if c is None:
        raise reject(function, "c", "given: k-grouped GEMMs accumulate, d[g] = c[g] + product of group g "
                     "(pass c=d to accumulate in place)", "None")
    if c is not d:
        if not isinstance(c, _Tensor):
            raise reject(function, "c", "a torch.Tensor", type(c).__name__)
        if c.dtype != d.dtype:
            raise reject(function, "c", f"of d's dtype {d.dtype}", c.dtype)
        if c.shape != d.shape:
            raise reject(function, "c", f"of shape {tuple(d.shape)} like d", tuple(c.shape))
        if not c.is_contiguous():
            raise reject(function, "c", "contiguous", f"strides {tuple(c.stride())}")
    return num_groups, m, n


def _group_sizes(function: str, ks: list[int], grouped_layout, num_groups: int) -> tuple[tuple, tuple, int]:
    """ks_cpu has G sizes, each a multiple of the k alignment (and of 128 under the SM90 rules);
    grouped_layout is int32 [G] contiguous. Returns (ks, starts, sum_k)."""
    if len(ks) != num_groups:
        raise reject(function, "ks_cpu", f"a list of G = {num_groups} sizes (G = d.size(0))", f"{len(ks)} sizes")
    _index_tensor(function, "grouped_layout", grouped_layout, num_groups, "G, from d")
    k_alignment = get_mk_alignment_for_contiguous_layout()
    if k_alignment % 32:
        raise reject(function, "get_mk_alignment_for_contiguous_layout()", "a multiple of 32 for k-grouped GEMMs "
                     "(their k alignment, API.md 3.6)", k_alignment)
    sm90 = not _sm100()
    for g, k in enumerate(ks):
        if k % k_alignment:
            raise reject(function, f"ks_cpu[{g}]", f"a multiple of the k alignment "
                         f"get_mk_alignment_for_contiguous_layout() = {k_alignment}", k)
        if sm90 and k % SM90_K_ALIGNMENT:
            raise reject(function, f"ks_cpu[{g}]", f"a multiple of {SM90_K_ALIGNMENT} on SM90 (its k-grouped kernels "
                         f"step K by {SM90_K_ALIGNMENT})", k)
    starts, start = [], 0
    for k in ks:
        starts.append(start)
        start += k
    return tuple(ks), tuple(starts), start


def _d_tma(function: str, d, problem: KGroupedProblem) -> None:
    """Each non-empty group's D [M, N] (fp32 or bf16, rows of N) is one TMA store target."""
    m, n = problem.m, problem.n
    element = d.element_size()
    address = d.data_ptr()
    for g, k in enumerate(problem.ks):
        if k:
            _tma_layout(function, "d", (m, n), (n, 1), element, address + g * m * n * element, True)


# ---------------------------------------------------------------------------------------------
# FP8 nt (SM90)


def _fp8_data(function: str, argument: str, t, rows: int, rows_name: str, sum_k: int) -> None:
    """A flat buffer of sum_k * rows FP8 values: group g's [rows, k_g] row-major block at element
    offset rows * start_g (API.md 3.6). Any shape, contiguous."""
    if not isinstance(t, _Tensor):
        raise reject(function, argument, "a torch.Tensor", type(t).__name__)
    if t.dtype is not _FP8:
        if t.dtype is _FP4_PACKED:
            raise reject(function, argument, "torch.float8_e4m3fn on SM90 (FP4 operands, torch.int8 with two "
                         "E2M1 codes per byte, are SM100-only)", t.dtype)
        raise reject(function, argument, "torch.float8_e4m3fn (FP8 E4M3)", t.dtype)
    if not t.is_contiguous():
        raise reject(function, argument, "contiguous (a flat buffer of the groups' row-major blocks)",
                     f"strides {tuple(t.stride())}")
    if t.numel() != sum_k * rows:
        raise reject(function, argument, f"of sum(ks_cpu) * {rows_name} = {sum_k} * {rows} = {sum_k * rows} "
                     "elements (group g's row-major [" + rows_name + ", k_g] blocks back to back)", t.numel())


def fp8_nt(function: str, a, b, d, ks: list[int], grouped_layout, c):
    """a = (A, sfa), b = (B, sfb) as API.md 3.6's SM90 FP8 form; d fp32 [G, M, N]. Returns
    (a_data, sfa, b_data, sfb, problem); the SFs are checked later by `fp8_scale_factors`."""
    a_data, sfa = _pair(function, "a", a)
    b_data, sfb = _pair(function, "b", b)
    num_groups, m, n = _output(function, d, c, (_FP32,))
    ks, starts, sum_k = _group_sizes(function, ks, grouped_layout, num_groups)
    _fp8_data(function, "a[0]", a_data, m, "M", sum_k)
    _fp8_data(function, "b[0]", b_data, n, "N", sum_k)
    device_index = d.get_device()
    _same_device(function, d, device_index, (("a[0]", a_data), ("b[0]", b_data), ("c", c),
                                             ("grouped_layout", grouped_layout)))
    problem = KGroupedProblem(m, n, ks, starts, sum_k, device_index)
    if problem.empty:
        return a_data, sfa, b_data, sfb, problem
    a_address, b_address = a_data.data_ptr(), b_data.data_ptr()
    for k, start in zip(ks, starts):
        if k:
            # Group g's blocks are K-major [M, k_g] / [N, k_g] matrices: rows of k_g bytes.
            _tma_layout(function, "a[0]", (m, k), (k, 1), 1, a_address + m * start, True)
            _tma_layout(function, "b[0]", (n, k), (k, 1), 1, b_address + n * start, True)
    _d_tma(function, d, problem)
    return a_data, sfa, b_data, sfb, problem


def _scale_factor(function: str, argument: str, sf, mn: int, mn_name: str, sum_k: int, d,
                  device_index: int) -> None:
    """fp32 [MN, sum(ks)/128] on d's device, any strides."""
    expected = (mn, sum_k // FP8_GRAN_K)
    if not isinstance(sf, _Tensor):
        raise reject(function, argument, "a torch.Tensor", type(sf).__name__)
    if sf.dim() != 2:
        raise reject(function, argument, f"a 2-D tensor [{mn_name}, sum(ks_cpu) / 128]",
                     f"{sf.dim()}-D shape {tuple(sf.shape)}")
    _same_device(function, d, device_index, ((argument, sf),))
    if sf.dtype is not _FP32:
        raise reject(function, argument, "torch.float32 on SM90 (per-token scale factors; packed UE8M0 int32 "
                     "SFs are SM100-only)", sf.dtype)
    if tuple(sf.shape) != expected:
        raise reject(function, argument, f"of shape {expected} = ({mn_name}, sum(ks_cpu) / 128) for "
                     f"{mn_name}={mn}, sum(ks_cpu)={sum_k}", tuple(sf.shape))


def fp8_scale_factors(function: str, sfa, sfb, problem: KGroupedProblem, d) -> None:
    _scale_factor(function, SFA, sfa, problem.m, "M", problem.sum_k, d, problem.device_index)
    _scale_factor(function, SFB, sfb, problem.n, "N", problem.sum_k, d, problem.device_index)


# ---------------------------------------------------------------------------------------------
# BF16 tn


def _bf16_operand(function: str, argument: str, t, cols: int, cols_name: str, sum_k: int) -> None:
    """bf16 [sum(ks), MN] contiguous: rows are K, so each group's rows are its MN-major operand."""
    if not isinstance(t, _Tensor):
        raise reject(function, argument, "a torch.Tensor", type(t).__name__)
    if t.dim() != 2:
        raise reject(function, argument, f"a 2-D tensor [sum(ks_cpu), {cols_name}]",
                     f"{t.dim()}-D shape {tuple(t.shape)}")
    if t.dtype is not _BF16:
        raise reject(function, argument, str(_BF16), t.dtype)
    if t.shape[0] != sum_k:
        raise reject(function, argument, f"of sum(ks_cpu) = {sum_k} rows (K)", t.shape[0])
    if t.shape[1] != cols:
        raise reject(function, argument, f"of {cols_name} = {cols} columns (from d)", t.shape[1])
    if not t.is_contiguous():
        raise reject(function, argument, f"contiguous [sum(ks_cpu), {cols_name}] (tn: rows of {cols_name}, one per K)",
                     f"strides {tuple(t.stride())}")


def bf16_tn(function: str, a, b, d, ks: list[int], grouped_layout, c) -> KGroupedProblem:
    """a [sum(ks), M], b [sum(ks), N] bf16 contiguous; d bf16 or fp32 [G, M, N] (API.md 1.3: only
    bf16/fp32 is checked for BF16, fp32 is what upstream uses)."""
    num_groups, m, n = _output(function, d, c, (_FP32, _BF16))
    ks, starts, sum_k = _group_sizes(function, ks, grouped_layout, num_groups)
    _bf16_operand(function, "a", a, m, "M", sum_k)
    _bf16_operand(function, "b", b, n, "N", sum_k)
    device_index = d.get_device()
    _same_device(function, d, device_index, (("a", a), ("b", b), ("c", c), ("grouped_layout", grouped_layout)))
    problem = KGroupedProblem(m, n, ks, starts, sum_k, device_index)
    if problem.empty:
        return problem
    a_address, b_address = a.data_ptr(), b.data_ptr()
    for k, start in zip(ks, starts):
        if k:
            # Group g's operands are the logical [M, k_g] / [N, k_g] transposes of its rows.
            for argument, address, mn in (("a", a_address, m), ("b", b_address, n)):
                shape, strides = (mn, k), (1, mn)
                k_major = _operand_major(function, argument, shape, strides, "[MN, K] per group")
                _tma_layout(function, argument, shape, strides, 2, address + 2 * mn * start, k_major)
    _d_tma(function, d, problem)
    return problem
