"""Compile-only checks of the portable Triton GEMMs (dg_triton.triton.gemm_portable), no GPU needed
(TOOLCHAIN.md "Triton without a GPU").

Each kernel is compiled with the specialization a real launch gets (unit strides as constants,
16-divisible pointers, sizes and strides marked so, as Triton's launcher does) for the default
configs of dg_triton.portable, and checked: a cubin for the target, no local memory (no spills,
no stack), and in the SASS the tensor-core instruction of the target: HGMMA (bf16) / QGMMA (fp8)
on sm_90a, UTCHMMA / UTCQMMA on sm_100a, HMMA on sm_80 (FP8 decoded from bytes and multiplied as
bf16: that GPU has no FP8 type in Triton). SASS checks need cuobjdump (skipped without it).

Runs in its own pytest process without TRITON_INTERPRET: once that is set, triton.compile no longer
works in the process.
"""
import os
import tempfile

import pytest

pytestmark = pytest.mark.compile

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("triton.compile does not work with TRITON_INTERPRET=1 in the process", allow_module_level=True)

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dg_triton import portable
from dg_triton.jit import compiler
from dg_triton.triton import gemm_portable

# Shared memory per block of the targets (what dg_triton.portable cuts the stages to).
_SHARED_MEMORY = {80: 163 * 1024, 90: 227 * 1024, 100: 227 * 1024}
_MMA = {(90, "bf16"): "HGMMA", (90, "fp8"): "QGMMA", (100, "bf16"): "UTCHMMA", (100, "fp8"): "UTCQMMA",
        (80, "bf16"): "HMMA", (80, "fp8"): "HMMA"}
# Triton's wgmma / tcgen05 need 64 rows per warpgroup; narrower (decode) tiles take mma.sync.
_NARROW_TILE_MMA = "HMMA"


def _compile(fn, signature: dict, constexprs: dict, divisible: tuple, arch: int, config):
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name in divisible}
    return triton.compile(ASTSource(fn, signature, constexprs, attrs),
                          target=GPUTarget("cuda", arch, 64 if arch >= 90 else 32),
                          options={"num_warps": config.num_warps, "num_stages": config.num_stages})


def _operand_descriptor_type(dtype: str, k_major: bool, block_rows: int, block_k: int) -> str:
    """The signature type of a TMA descriptor argument, in the orientation the launcher builds."""
    block = (block_rows, block_k) if k_major else (block_k, block_rows)
    return f"tensordesc<{dtype}[{block[0]}, {block[1]}]>"


def _bf16_kernel(arch: int, config, a_k_major: bool, b_k_major: bool, out: str, accumulate: bool,
                 split: bool = False):
    # SM90 / SM100 launches take the TMA operand path, SM80 the pointer one (gemm_portable).
    tma = arch >= 90
    signature = {"a_ptr": "*bf16", "b_ptr": "*bf16", "d_ptr": f"*{out}", "ws_ptr": "*fp32",
                 "a_desc": _operand_descriptor_type("bf16", a_k_major, config.block_m, config.block_k)
                 if tma else "*bf16",
                 "b_desc": _operand_descriptor_type("bf16", b_k_major, config.block_n, config.block_k)
                 if tma else "*bf16",
                 "m": "i32", "n": "i32", "k": "i32", "k_blocks_per_split": "i32",
                 "stride_am": "i32", "stride_ak": "i32", "stride_bn": "i32", "stride_bk": "i32",
                 "stride_dm": "i32", "ACCUMULATE": "constexpr", "EVEN_K": "constexpr",
                 "DOT_IN_FP32": "constexpr", "USE_TMA": "constexpr", "A_K_MAJOR": "constexpr",
                 "B_K_MAJOR": "constexpr", "SPLIT": "constexpr", "BLOCK_M": "constexpr",
                 "BLOCK_N": "constexpr", "BLOCK_K": "constexpr", "GROUP_M": "constexpr"}
    # The unit stride of each operand is a constant in a real launch (Triton specializes 1).
    unit = {"stride_ak" if a_k_major else "stride_am": 1, "stride_bk" if b_k_major else "stride_bn": 1}
    for name in unit:
        signature[name] = "constexpr"
    constexprs = {**unit, "ACCUMULATE": accumulate, "EVEN_K": True, "DOT_IN_FP32": False, "USE_TMA": tma,
                  "A_K_MAJOR": a_k_major, "B_K_MAJOR": b_k_major, "SPLIT": split,
                  "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                  "GROUP_M": config.group_m}
    divisible = ("a_ptr", "b_ptr", "d_ptr", "ws_ptr", "m", "n", "k", "stride_dm",
                 *(s for s in ("stride_am", "stride_ak", "stride_bn", "stride_bk") if s not in unit))
    return _compile(gemm_portable._bf16_gemm_kernel, signature, constexprs, divisible, arch, config)


def _fp8_kernel(arch: int, config, kind: str, out: str, accumulate: bool, skip_head_mid: bool = False,
                split: bool = False):
    as_bits = arch < 89
    tma = arch >= 90
    data = "*u8" if as_bits else "*fp8e4nv"
    signature = {"a_ptr": data, "sfa_ptr": "*fp32", "b_ptr": data, "sfb_ptr": "*fp32", "d_ptr": f"*{out}",
                 "ws_ptr": "*fp32",
                 "a_desc": _operand_descriptor_type("fp8e4nv", True, config.block_m, 128) if tma else data,
                 "b_desc": _operand_descriptor_type("fp8e4nv", True, config.block_n, 128) if tma else data,
                 "m": "i32", "n": "i32", "k": "i32", "k_blocks_per_split": "i32",
                 "stride_am": "i32", "stride_ak": "constexpr",
                 "stride_bn": "i32", "stride_bk": "constexpr", "stride_dm": "i32",
                 "stride_sfa_m": "constexpr", "stride_sfa_k": "i32", "stride_sfb_n": "i32",
                 "stride_sfb_k": "i32", "head_left": "i32", "head_mid": "i32", "head_right": "i32",
                 "SFB_PER_BLOCK": "constexpr", "ACCUMULATE": "constexpr", "SKIP_HEAD_MID": "constexpr",
                 "FP8_AS_BITS": "constexpr", "DOT_IN_FP32": "constexpr", "USE_TMA": "constexpr",
                 "SPLIT": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "GROUP_M": "constexpr"}
    # K-major data; sfa TMA-aligned MN-major (unit row stride); sfb row-major per block (unit K
    # stride) for 1D2D, MN-major like sfa for 1D1D.
    unit = {"stride_ak": 1, "stride_bk": 1, "stride_sfa_m": 1}
    if kind == "1d2d":
        unit["stride_sfb_k"] = 1
    else:
        unit["stride_sfb_n"] = 1
    for name in unit:
        signature[name] = "constexpr"
    constexprs = {**unit, "SFB_PER_BLOCK": kind == "1d2d", "ACCUMULATE": accumulate,
                  "SKIP_HEAD_MID": skip_head_mid, "FP8_AS_BITS": as_bits, "DOT_IN_FP32": False,
                  "USE_TMA": tma, "SPLIT": split,
                  "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "GROUP_M": config.group_m}
    divisible = ("a_ptr", "sfa_ptr", "b_ptr", "sfb_ptr", "d_ptr", "ws_ptr", "k", "stride_am", "stride_bn",
                 "stride_dm", "stride_sfa_k", *(s for s in ("stride_sfb_n", "stride_sfb_k") if s not in unit))
    return _compile(gemm_portable._fp8_gemm_kernel, signature, constexprs, divisible, arch, config)


def checked_sass(compiled, arch: int) -> str | None:
    """A Triton kernel's cubin for `arch`, checked: an ELF, the target in the PTX, no local memory
    (PTX), no spills or stack frame (ptxas's report); its SASS, or None without cuobjdump."""
    cubin = compiled.asm["cubin"]
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"
    ptx = compiled.asm["ptx"]
    assert f".target sm_{arch}{'a' if arch >= 90 else ''}" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
    if compiler.cuobjdump_path() is None:
        return None
    usage = compiler.cubin_resource_usage(cubin)
    assert usage is not None
    assert usage.spill_store_bytes == 0 and usage.stack_frame_bytes == 0, usage
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "kernel.cubin")
        with open(path, "wb") as file:
            file.write(cubin)
        return compiler.disassemble(path)


def _check(compiled, arch: int, family: str, config):
    sass = checked_sass(compiled, arch)
    if sass is None:
        return  # the PTX checks still ran; registers and SASS need cuobjdump
    mma = _MMA[arch, family] if config.block_m >= 64 else _NARROW_TILE_MMA
    assert mma in sass, f"no {mma} in the SASS"
    assert "CALL.ABS" not in sass


def _default_configs(family: str, arch: int):
    """The distinct default configs over decode to prefill M."""
    configs = []
    for m in (1, 64, 128, 4096):
        config = portable.default_config(family, m, (arch // 10, arch % 10), _SHARED_MEMORY[arch])
        if config not in configs:
            configs.append(config)
    return configs


BF16_CASES = [(arch, config, a_k, b_k, out, acc)
              for arch in (90, 100, 80)
              for i, config in enumerate(_default_configs(portable.BF16_GEMM, arch))
              # every major-ness / out / accumulate combination once per arch, rotated over the tiles
              for (a_k, b_k, out, acc) in ([(True, True, "bf16", False), (False, False, "fp32", True),
                                            (True, False, "bf16", True), (False, True, "fp32", False)][i % 4],)]


@pytest.mark.parametrize("arch,config,a_k_major,b_k_major,out,accumulate", BF16_CASES)
def test_bf16_portable_kernel_compiles_with_tensor_cores_and_no_spills(arch, config, a_k_major, b_k_major,
                                                                        out, accumulate):
    _check(_bf16_kernel(arch, config, a_k_major, b_k_major, out, accumulate), arch, "bf16", config)


@pytest.mark.parametrize("arch", [90, 100])
@pytest.mark.parametrize("a_k_major,b_k_major", [(True, True), (False, False), (True, False), (False, True)])
def test_bf16_portable_kernel_compiles_for_every_major_ness(arch, a_k_major, b_k_major):
    config = portable.default_config(portable.BF16_GEMM, 4096, (arch // 10, 0), _SHARED_MEMORY[arch])
    _check(_bf16_kernel(arch, config, a_k_major, b_k_major, "bf16", False), arch, "bf16", config)


FP8_CASES = [(arch, kind, config)
             for arch in (90, 100, 80)
             for kind in ("1d2d", "1d1d")
             for config in _default_configs(portable.FP8_GEMM_1D2D if kind == "1d2d" else portable.FP8_GEMM_1D1D,
                                            arch)]


@pytest.mark.parametrize("arch,kind,config", FP8_CASES)
def test_fp8_portable_kernel_compiles_with_tensor_cores_and_no_spills(arch, kind, config):
    out, accumulate = ("bf16", False) if kind == "1d2d" else ("fp32", True)
    _check(_fp8_kernel(arch, config, kind, out, accumulate), arch, "fp8", config)


@pytest.mark.parametrize("arch", [90, 100])
def test_fp8_portable_skip_head_mid_kernel_compiles(arch):
    config = portable.default_config(portable.FP8_GEMM_1D2D, 4096, (arch // 10, 0), _SHARED_MEMORY[arch])
    _check(_fp8_kernel(arch, config, "1d2d", "bf16", False, skip_head_mid=True), arch, "fp8", config)


def _shipped_configs():
    """(family, config) of every distinct config in the shipped sm90 tuned files (the H200 sweep's
    winners), which the sweep admitted only without spills on the H200's Triton: this holds them
    to the same rules with the Triton CI runs."""
    cases = []
    for family in portable.FAMILIES:
        for _, config in portable.read_tuned_file(portable.tuned_file_path("sm90", family)):
            if (family, config) not in cases:
                cases.append((family, config))
    return cases


def test_tuned_files_are_shipped_for_sm90():
    shipped = {family for family, _ in _shipped_configs()}
    assert shipped == set(portable.FAMILIES), f"sm90 tuned files missing for {set(portable.FAMILIES) - shipped}"


@pytest.mark.parametrize("family,config", _shipped_configs(), ids=lambda v: str(v))
def test_shipped_sm90_tuned_configs_compile_without_spills(family, config):
    split = config.split_k > 1
    if family == portable.BF16_GEMM:
        _check(_bf16_kernel(90, config, True, True, "bf16", False, split=split), 90, "bf16", config)
        # the entry also serves wgrad (A and B MN-major, fp32 D accumulated: the launcher runs
        # config_for_accumulation's tile) and dgrad shapes
        accumulating = portable.config_for_accumulation(config)
        _check(_bf16_kernel(90, accumulating, False, False, "fp32", True, split=split), 90, "bf16", accumulating)
    else:
        kind, out = ("1d2d", "bf16") if family == portable.FP8_GEMM_1D2D else ("1d1d", "fp32")
        if kind == "1d1d":
            config = portable.config_for_accumulation(config)
        _check(_fp8_kernel(90, config, kind, out, kind == "1d1d", split=split), 90, "fp8", config)
