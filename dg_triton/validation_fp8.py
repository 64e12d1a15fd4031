"""Argument checks of the dense FP8 GEMMs and of fp8_gemm_nt_skip_head_mid (API.md 1.2-1.5, 2.4,
3.1, 3.3, 4).

Conventions as in validation.py: every rejection is a DGArgumentError "{function}: {argument} must be
{expected}, got {actual}", each tensor attribute is read once, messages are built on failure only.
Arguments are named as the caller passed them: ``a[0]`` / ``b[0]`` (data), ``a[1] (sfa)`` /
``b[1] (sfb)`` (scale factors), ``d``, ``c``, ``recipe``, ``recipe_a``, ``recipe_b``, ``head_splits``.
Shapes in messages are those of the logical NT problem (A [M, K], B [N, K]); where an alias passed
an operand transposed (API.md 1.1) the message says so.

The checks come in DeepGEMM's order, which decides what an empty problem gets away with
(API.md 3.1 "Checks"): first the operands, d and c (types, shapes, majors, devices), then the
early returns of API.md 1.3, and only then the recipes and scale factors (`scaling`). So the
scale factors of an empty problem are not looked at, as in DeepGEMM. The types of the non-tensor
arguments (`arguments`) are checked first of all, where DeepGEMM's Python binding checks them.

Rules that differ by architecture (operand dtypes and majors, the default recipe, allowed
granularities, SF dtypes and layouts, which kernel serves the recipe and what it needs of d and c)
live in one `Fp8ArchRules` per arch. DeepGEMM reads the arch of the current device and takes its
SM90 path on anything but SM100; `rules_for_arch` does the same, so a host without a GPU gets the
SM90 rules. The SM100 rules (FP4 operands, either major, packed UE8M0 SFs, gran_k 32) come with the
SM100 kernel.
"""
from collections.abc import Callable
from typing import NamedTuple

import torch

from dg_triton.errors import reject
from dg_triton.settings import bool_argument, int_argument
from dg_triton.utils.math import ceil_div
from dg_triton.validation import (
    _ELEMENT_SIZE,
    _operand_major,
    _same_device,
    _tma_layout,
    check_c,
    compiled_dims_argument,
)

_Tensor = torch.Tensor
_FP8, _FP4_PACKED = torch.float8_e4m3fn, torch.int8
_BF16, _FP32, _INT32 = torch.bfloat16, torch.float32, torch.int32

SFA, SFB = "a[1] (sfa)", "b[1] (sfb)"
_DATA = {"a": "a[0]", "b": "b[0]"}
_LOGICAL = {"a": "[M, K]", "b": "[N, K]"}

# The SM90 kernels (API.md 1.5, 9).
KIND_1D2D, KIND_1D1D = "1d2d", "1d1d"
_SM90_GRAN_K = 128


# ---------------------------------------------------------------------------------------------
# Messages


def _view_note(function: str, operand: str, transposed: bool) -> str:
    """Where an alias passed the operand transposed, the shapes named are of its transpose."""
    if not transposed:
        return ""
    alias = function.rsplit("_", 1)[-1]
    physical = "[K, M]" if operand == "a" else "[K, N]"
    return (f" ({alias} passes {operand} as {physical}, data and SF alike, and reads its transpose, "
            f"the logical {_LOGICAL[operand]})")


def _describe(t) -> str:
    if isinstance(t, _Tensor):
        return f"a {t.dim()}-D {t.dtype} tensor of shape {tuple(t.shape)}"
    return type(t).__name__


# ---------------------------------------------------------------------------------------------
# Non-tensor arguments (DeepGEMM's binding checks these types before anything else)


def _granularity(function: str, argument: str, value, length: int):
    if value is None:
        return None
    # Common path: a tuple of positive Python ints, taken as is (bool is not an int here).
    if type(value) is tuple and len(value) == length:
        for v in value:
            if type(v) is not int or v <= 0:
                break
        else:
            return value
    if not isinstance(value, (tuple, list)) or len(value) != length:
        form = "(gran_m, gran_n, gran_k)" if length == 3 else "(gran_mn, gran_k)"
        raise reject(function, argument, f"None or a tuple of {length} ints {form}", repr(value))
    values = tuple(int_argument(function, f"{argument}[{i}]", v) for i, v in enumerate(value))
    if min(values) <= 0:
        raise reject(function, argument, "positive granularities", repr(value))
    return values


def arguments(function: str, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast):
    """The recipes as tuples of ints (or None) and the flag as a bool."""
    compiled_dims_argument(function, compiled_dims)
    if disable_ue8m0_cast is not False:
        disable_ue8m0_cast = bool_argument(function, "disable_ue8m0_cast", disable_ue8m0_cast)
    if recipe is None and recipe_a is None and recipe_b is None:
        return None, None, None, disable_ue8m0_cast
    return (_granularity(function, "recipe", recipe, 3), _granularity(function, "recipe_a", recipe_a, 2),
            _granularity(function, "recipe_b", recipe_b, 2), disable_ue8m0_cast)


def head_splits_argument(function: str, head_splits) -> tuple[int, int, int]:
    """(left, mid, right): non-negative ints with left + right > 0 (N is split by it)."""
    if not isinstance(head_splits, (tuple, list)) or len(head_splits) != 3:
        raise reject(function, "head_splits", "a tuple of 3 ints (left, mid, right)", repr(head_splits))
    splits = tuple(int_argument(function, f"head_splits[{i}]", v) for i, v in enumerate(head_splits))
    if min(splits) < 0 or splits[0] + splits[2] == 0:
        raise reject(function, "head_splits", "non-negative (left, mid, right) with left + right > 0",
                     repr(head_splits))
    return splits


# ---------------------------------------------------------------------------------------------
# Per-arch rules


class Fp8ArchRules(NamedTuple):
    """What one architecture's FP8 kernels accept.

    operand(function, operand, dtype, shape, strides, transposed) -> (mn, k), the logical size of
        a checked data tensor (FP4 doubling goes here).
    default_recipe(function, sfa, sfb) -> (gran_m, gran_n, gran_k) when no recipe is given.
    scaling(function, ...) -> Fp8Scaling: granularities, SF dtypes, shapes and layouts, the kernel
        kind and what that kernel needs of d and c.
    """
    name: str
    operand: Callable
    default_recipe: Callable
    scaling: Callable


class Fp8Scaling(NamedTuple):
    kind: str
    gran_a: tuple[int, int]   # (gran_m, gran_k) of sfa
    gran_b: tuple[int, int]   # (gran_n, gran_k) of sfb


def _sm90_operand(function: str, operand: str, dtype, shape, strides, transposed: bool):
    argument = _DATA[operand]
    if dtype is not _FP8:
        if dtype is _FP4_PACKED:
            raise reject(function, argument, "torch.float8_e4m3fn on SM90 (FP4 operands, torch.int8 "
                         "with two E2M1 codes per byte, are SM100-only)", dtype)
        raise reject(function, argument, "torch.float8_e4m3fn (FP8 E4M3)", dtype)
    if not _operand_major(function, argument, shape, strides, _LOGICAL[operand]):
        raise reject(function, argument, f"K-major on SM90 (its FP8 GEMMs read A and B K-major only: "
                     f"the logical {_LOGICAL[operand]} operand with stride(-1) == 1)",
                     f"an MN-major {_LOGICAL[operand]} view with strides {tuple(strides)}"
                     + _view_note(function, operand, transposed)
                     + (f"; pass the transpose of a K-major {_LOGICAL[operand]} tensor, e.g. "
                        f"{operand}_{'mk' if operand == 'a' else 'nk'}.T" if transposed else ""))
    return shape


def _sm90_default_recipe(function: str, sfa, sfb):
    for argument, sf in ((SFA, sfa), (SFB, sfb)):
        if isinstance(sf, _Tensor) and sf.dtype is not _FP32:
            raise reject(function, argument, "torch.float32 with the default recipe on SM90 ((1, 128, 128): "
                         "SM90 reads fp32 scale factors; packed UE8M0 int32 SFs are SM100-only)", sf.dtype)
    return 1, 128, 128


def _sm90_kind(function: str, gran_a, gran_b, recipe_names, skip_head_mid: bool) -> str:
    """API.md 1.5: A per token (1, 128); B per 128x128 block (1D2D) or per token (1D1D)."""
    grans = gran_a + gran_b
    if recipe_names[0] == "recipe":
        recipe = (gran_a[0], gran_b[0], gran_a[1])
        if grans not in ((1, 128, 128, 128), (1, 128, 1, 128)):
            raise reject(function, "recipe", "(1, 128, 128) (1D2D: A per token, B per 128x128 block) or "
                         "(1, 1, 128) (1D1D: A and B per token) on SM90", recipe)
    else:
        if gran_a != (1, _SM90_GRAN_K):
            raise reject(function, "recipe_a", "(1, 128) on SM90 (A scaled per token, per 128 of K)", gran_a)
        if gran_b not in ((128, 128), (1, 128)):
            raise reject(function, "recipe_b", "(128, 128) (1D2D, per block) or (1, 128) (1D1D, per token) "
                         "on SM90", gran_b)
    kind = KIND_1D1D if gran_b[0] == 1 else KIND_1D2D
    if skip_head_mid and kind != KIND_1D2D:
        # DeepGEMM's head-split epilogue exists only in the SM90 1D2D kernel.
        raise reject(function, recipe_names[1], "(1, 128, 128) on SM90 (the head-split epilogue is in the "
                     "1D2D kernel only)", (gran_a[0], gran_b[0], gran_a[1]))
    return kind


def _sf_tensor(function: str, argument: str, sf, device_index: int, d):
    """A 2-D SF tensor on d's device; returns (dtype, shape)."""
    if not isinstance(sf, _Tensor):
        raise reject(function, argument, "a torch.Tensor", type(sf).__name__)
    if sf.dim() != 2:
        raise reject(function, argument, "a 2-D tensor", f"{sf.dim()}-D shape {tuple(sf.shape)}")
    _same_device(function, d, device_index, ((argument, sf),))
    return sf.dtype, sf.shape


def _sm90_sf_dtype(function: str, argument: str, dtype) -> None:
    if dtype is not _FP32:
        if dtype is _INT32:
            raise reject(function, argument, "torch.float32 on SM90 (its kernels read fp32 scale factors; "
                         "packed UE8M0 int32 SFs are SM100-only)", dtype)
        raise reject(function, argument, "torch.float32", dtype)


def _sf_shape(function: str, argument: str, shape, mn: int, k: int, gran, operand: str, transposed: bool):
    expected = (ceil_div(mn, gran[0]), ceil_div(k, gran[1]))
    if tuple(shape) != expected:
        mn_name = "M" if operand == "a" else "N"
        raise reject(function, argument, f"of shape {expected} = (ceil({mn_name} / {gran[0]}), "
                     f"ceil(K / {gran[1]})) for {mn_name}={mn}, K={k}",
                     f"{tuple(shape)}{_view_note(function, operand, transposed)}")


def _sm90_scaling(function: str, sfa, sfb, m: int, n: int, k: int, gran_a, gran_b, recipe_names,
                  d, d_dtype, c, device_index: int, transposed, skip_head_mid: bool) -> Fp8Scaling:
    kind = _sm90_kind(function, gran_a, gran_b, recipe_names, skip_head_mid)
    for argument, sf, operand, mn, gran, is_transposed in ((SFA, sfa, "a", m, gran_a, transposed[0]),
                                                           (SFB, sfb, "b", n, gran_b, transposed[1])):
        dtype, shape = _sf_tensor(function, argument, sf, device_index, d)
        _sm90_sf_dtype(function, argument, dtype)
        _sf_shape(function, argument, shape, mn, k, gran, operand, is_transposed)
    if kind == KIND_1D2D:
        # API.md 2.2: per-block SFB plain contiguous, or its transpose-contiguous (MN-major) form.
        if not (sfb.is_contiguous() or sfb.mT.is_contiguous()):
            raise reject(function, SFB, "row-major contiguous [ceil(N/128), ceil(K/128)] or its "
                         "transpose-contiguous (MN-major) form (SM90 per-block SFB)",
                         f"strides {sfb.stride()}{_view_note(function, 'b', transposed[1])}")
        if d_dtype is not _BF16:
            raise reject(function, "d", "torch.bfloat16 with the SM90 1D2D recipe (gran_n == 128); an fp32 D "
                         "needs the 1D1D recipe (1, 1, 128) and c", d_dtype)
        if c is not None:
            raise reject(function, "c", "None with the SM90 1D2D recipe (gran_n == 128), whose kernel does "
                         "not accumulate; accumulation needs the 1D1D recipe (1, 1, 128) and an fp32 D",
                         _describe(c))
    else:
        if d_dtype is not _FP32:
            raise reject(function, "d", "torch.float32 with the SM90 1D1D recipe (gran_n == 1)", d_dtype)
        if c is None:
            raise reject(function, "c", "given with the SM90 1D1D recipe (gran_n == 1), whose kernel only "
                         "accumulates: d = c + a @ b.T (c may be d itself)", "None")
    return Fp8Scaling(kind, gran_a, gran_b)


SM90_RULES = Fp8ArchRules("SM90", _sm90_operand, _sm90_default_recipe, _sm90_scaling)


def rules_for_arch(function: str, arch_major: int | None) -> Fp8ArchRules:
    """SM90's rules on SM90, on any arch but SM100 and on a host without a GPU (as DeepGEMM, whose
    SM90 path is taken whenever the arch is not SM100)."""
    if arch_major == 10:
        raise NotImplementedError(
            f"{function}: the SM100 FP8 GEMM path (FP4 operands, either major, packed UE8M0 scale factors) "
            f"is not built yet; dg_triton's FP8 GEMMs run on SM90 GPUs only")
    return SM90_RULES


# ---------------------------------------------------------------------------------------------
# Operands, d and c (before the early returns)


def _pair(function: str, operand: str, value):
    if type(value) is tuple and len(value) == 2:
        return value
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise reject(function, operand, "a pair (data, sf) of tensors", _describe(value))
    return tuple(value)


def _data_tensor(function: str, argument: str, t) -> None:
    if not isinstance(t, _Tensor):
        raise reject(function, argument, "a torch.Tensor", type(t).__name__)
    if t.dim() != 2:
        raise reject(function, argument, "a 2-D tensor", f"{t.dim()}-D shape {tuple(t.shape)}")


class Fp8Operands(NamedTuple):
    """Checked operands of the logical NT problem, with the attributes the launch needs."""
    a: _Tensor
    sfa: object          # not checked yet (see `scaling`)
    b: _Tensor
    sfb: object
    m: int
    n: int
    k: int
    d_dtype: torch.dtype
    device_index: int
    layout: tuple | None  # (d.dtype, a.stride(), b.stride(), d.stride()); None for an empty problem


def operands(function: str, rules: Fp8ArchRules, a, b, d, c, transposed=(False, False),
             head_splits: tuple | None = None) -> Fp8Operands:
    """Operands a = (A [M, K], sfa), b = (B [N, K], sfb) of the logical NT problem and d (and c)
    [M, N] bf16/fp32 N-major; with head_splits (left, mid, right) d is [M, N + N/(left+right)*mid].
    Majors and dtypes per `rules`; TMA layout (alignment, strides) for a non-empty problem."""
    a_data, sfa = _pair(function, "a", a)
    b_data, sfb = _pair(function, "b", b)
    # Common path first: unpacking .shape checks type and rank at once.
    try:
        (m, k_a), (n, k_b), d_shape = a_data.shape, b_data.shape, d.shape
        ok = len(d_shape) == 2
    except (AttributeError, TypeError, ValueError):
        ok = False
    if not ok:
        _data_tensor(function, "a[0]", a_data)
        _data_tensor(function, "b[0]", b_data)
        _data_tensor(function, "d", d)
        (m, k_a), (n, k_b), d_shape = a_data.shape, b_data.shape, d.shape
    a_strides, b_strides = a_data.stride(), b_data.stride()
    m, k = rules.operand(function, "a", a_data.dtype, (m, k_a), a_strides, transposed[0])
    n, k_b = rules.operand(function, "b", b_data.dtype, (n, k_b), b_strides, transposed[1])
    d_dtype = d.dtype
    if d_dtype is not _BF16 and d_dtype is not _FP32:
        raise reject(function, "d", "torch.bfloat16 or torch.float32", d_dtype)
    if k_b != k:
        raise reject(function, "b[0]", f"of K (size along K) {k} (from a[0])",
                     f"{k_b}{_view_note(function, 'b', transposed[1])}")
    if d_shape[0] != m:
        raise reject(function, "d", f"of M rows {m} (from a[0])", d_shape[0])
    width = n
    if head_splits is not None:
        left, mid, right = head_splits
        if n % (left + right):
            raise reject(function, "head_splits", f"(left, mid, right) with left + right dividing N = {n}",
                         head_splits)
        width = n + n // (left + right) * mid
        if d_shape[1] != width:
            raise reject(function, "d", f"of N + N / (left + right) * mid = {width} columns (N = {n}, "
                         f"head_splits {head_splits})", d_shape[1])
        if n == 0 or k == 0:
            raise reject(function, "b[0]", "of positive N and K (fp8_gemm_nt_skip_head_mid)", f"N={n}, K={k}")
    elif d_shape[1] != n:
        raise reject(function, "d", f"of N columns {n} (from b[0])", d_shape[1])
    d_strides = d.stride()
    if d_strides[1] != 1 and width > 1:
        raise reject(function, "d", "N-major (stride(-1) == 1)", f"strides {tuple(d_strides)}")
    if c is not None and c is not d:
        check_c(function, c, d_dtype, d_shape, m, n)
    device_index = d.get_device()
    _same_device(function, d, device_index, (("a[0]", a_data), ("b[0]", b_data), ("c", c)))
    if m == 0 or n == 0 or k == 0:
        return Fp8Operands(a_data, sfa, b_data, sfb, m, n, k, d_dtype, device_index, None)
    # K-major operands (every arch's rules so far): TMA reads rows of K bytes.
    _tma_layout(function, "a[0]", (m, k), a_strides, 1, a_data.data_ptr(), True)
    _tma_layout(function, "b[0]", (n, k), b_strides, 1, b_data.data_ptr(), True)
    _tma_layout(function, "d", (m, width), d_strides, _ELEMENT_SIZE[d_dtype], d.data_ptr(), True)
    return Fp8Operands(a_data, sfa, b_data, sfb, m, n, k, d_dtype, device_index,
                       (d_dtype, a_strides, b_strides, d_strides))


# ---------------------------------------------------------------------------------------------
# Recipes and scale factors (after the early returns)


def granularities(function: str, rules: Fp8ArchRules, sfa, sfb, recipe, recipe_a, recipe_b):
    """The recipe of API.md 1.5 resolved: (gran_a, gran_b, names), gran_a = (gran_m, gran_k_a) and
    gran_b = (gran_n, gran_k_b), names the arguments that gave them (("recipe", "recipe") or
    ("recipe_a", "recipe_b")). Either `recipe` or both of `recipe_a`, `recipe_b`; with none, the
    arch's default (which may reject the SF dtypes). The values come from `arguments`."""
    if recipe_a is not None or recipe_b is not None:
        if recipe is not None:
            raise reject(function, "recipe", "None when recipe_a and recipe_b are given (give either recipe "
                         "or the pair recipe_a, recipe_b)", recipe)
        if recipe_a is None or recipe_b is None:
            missing, given = ("recipe_a", "recipe_b") if recipe_a is None else ("recipe_b", "recipe_a")
            raise reject(function, missing, f"given together with {given} (the per-operand recipes come as "
                         "a pair)", "None")
        gran_a, gran_b, names = recipe_a, recipe_b, ("recipe_a", "recipe_b")
    else:
        if recipe is None:
            recipe = rules.default_recipe(function, sfa, sfb)
        gran_a, gran_b, names = (recipe[0], recipe[2]), (recipe[1], recipe[2]), ("recipe", "recipe")
    return gran_a, gran_b, names


def scaling(function: str, rules: Fp8ArchRules, ops: Fp8Operands, d, c, recipe, recipe_a, recipe_b,
            transposed=(False, False), skip_head_mid: bool = False) -> Fp8Scaling:
    """Resolves the recipe (API.md 1.5) and checks the SFs and the kernel's needs of d and c."""
    gran_a, gran_b, names = granularities(function, rules, ops.sfa, ops.sfb, recipe, recipe_a, recipe_b)
    if skip_head_mid and (gran_a[1] != 128 or gran_b[1] != 128):
        raise reject(function, names[0], "a recipe with gran_k == 128 (fp8_gemm_nt_skip_head_mid)",
                     (gran_a[0], gran_b[0], gran_a[1]) if names[0] == "recipe" else gran_a)
    return rules.scaling(function, ops.sfa, ops.sfb, ops.m, ops.n, ops.k, gran_a, gran_b, names, d,
                         ops.d_dtype, c, ops.device_index, transposed, skip_head_mid)


def transformed_sf_layout(function: str, kind: str, sfa: _Tensor, sfb: _Tensor) -> None:
    """After the SF transform: TMA reads sfa (and a 1D1D sfb) from a 16-byte aligned base; an
    already-aligned user SF is passed through by the transform, so its pointer is checked here."""
    for argument, sf in ((SFA, sfa), (SFB, sfb)) if kind == KIND_1D1D else ((SFA, sfa),):
        address = sf.data_ptr()
        if address % 16:
            raise reject(function, argument, "16-byte aligned (TMA)", f"data_ptr {address:#x}")
