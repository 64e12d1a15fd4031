"""Config choice of the portable Triton GEMMs (dg_triton/triton/gemm_portable.py): tuned files
written by ``python -m dg_triton.tune``, else a built-in default.

A tuned file is ``autotune_configs/<arch>/<family>_portable.json`` (arch ``sm90``, ``sm80``,
``sm120``, ...; family one of FAMILIES), in the format of dg_triton/tuned_files.py (the one the
CUDA path's heuristics overrides use) with backend "portable", no key fields beyond m, n, k, and
configs like ``{"block_m": 128, "block_n": 128, "block_k": 128, "group_m": 8, "num_warps": 8,
"num_stages": 3, "split_k": 1}``.

Each entry is the winner of a sweep at one problem size (the bucket). A problem takes the entry
nearest to it in log2 space over (M, N, K): the same weights are the common case, and a different
M (tokens) is what moves between calls. No file, or no entry, gives the default table below. The
choice is cached per problem, so the per-call cost is one dict look-up.

The defaults are starting points, not measurements: tile shapes that suit the tensor cores of
each generation and compile without register spills (tests/test_compile_triton_gemm_portable.py),
with the pipeline depth cut to what the device's shared memory holds.
"""
import functools
import math
from pathlib import Path
from typing import NamedTuple

import torch

from dg_triton import tuned_files

BF16_GEMM, FP8_GEMM_1D2D, FP8_GEMM_1D1D = "bf16_gemm", "fp8_gemm_1d2d", "fp8_gemm_1d1d"
FAMILIES = (BF16_GEMM, FP8_GEMM_1D2D, FP8_GEMM_1D1D)
_FP8_FAMILIES = (FP8_GEMM_1D2D, FP8_GEMM_1D1D)
# The FP8 kernels step K by the scale-factor granularity.
FP8_BLOCK_K = 128
# More K slices than this only add partial planes to sum: the decode shapes fill the GPU before.
MAX_SPLIT_K = 32
# Up to this M a problem's output tiles alone do not fill a GPU: the sweep offers split-K there
# (dg_triton.tune), and a tuned entry serves only problems of its own side of it (nearest_entry).
DECODE_MAX_M = 256


class PortableGemmConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    # K slices computed by separate programs and summed by a second kernel (split-K), for
    # problems with too few output tiles to fill the GPU (decode M); 1 = no split.
    split_k: int = 1


def config_name(config: PortableGemmConfig) -> str:
    """A short readable name: 64x128x128w4s3 (block M x N x K, warps, stages), +k4 for split-K."""
    name = f"{config.block_m}x{config.block_n}x{config.block_k}w{config.num_warps}s{config.num_stages}"
    return name + (f"k{config.split_k}" if config.split_k > 1 else "")


def _config(block_m, block_n, block_k, num_warps, num_stages, group_m=8) -> PortableGemmConfig:
    return PortableGemmConfig(block_m, block_n, block_k, group_m, num_warps, num_stages)


# (largest M, config) per family, first match wins, per tensor-core generation: "async" for SM90
# (wgmma) and SM100 (tcgen05), whose MMA reads B from shared memory, so big tiles fit in
# registers; "mma" for the mma.sync GPUs (SM80, SM86, SM89, SM120), which hold both operand
# slices in registers: their tiles are smaller (64 x 128 x 128 FP8 on 4 warps spills there, on
# 8 warps it does not). M <= 32 (decode) takes narrow tiles so that N alone spreads the work.
# Larger M takes what the H200 sweep picked most (autotune_configs/sm90/*_portable.json): FP8
# 64 x 128 on one warpgroup, 3 stages (151 registers and 74 KB: three CTAs share an SM, so one's
# promotion FMAs overlap another's wgmma; 844 TFLOPS at 4096x2112x7168 where 64 x 256 on 8 warps
# gave 558), BF16 128 x 128 on 8 warps, 4 stages (572 vs 445 for 128 x 256, benchmarks/NOTES.md).
_DEFAULTS = {
    ("async", BF16_GEMM): ((32, _config(16, 64, 128, 4, 4)),
                           (64, _config(64, 128, 64, 4, 4)),
                           (None, _config(128, 128, 64, 8, 4))),
    ("mma", BF16_GEMM): ((32, _config(16, 64, 128, 4, 4)),
                         (64, _config(64, 128, 64, 4, 4)),
                         (None, _config(128, 128, 64, 8, 3))),
    ("async", FP8_GEMM_1D2D): ((32, _config(16, 64, 128, 4, 4)),
                               (128, _config(64, 128, 128, 4, 4)),
                               (None, _config(64, 128, 128, 4, 3))),
    ("mma", FP8_GEMM_1D2D): ((32, _config(16, 64, 128, 4, 4)),
                             (None, _config(64, 128, 128, 8, 3))),
}
_DEFAULTS["async", FP8_GEMM_1D1D] = _DEFAULTS["async", FP8_GEMM_1D2D]
_DEFAULTS["mma", FP8_GEMM_1D1D] = _DEFAULTS["mma", FP8_GEMM_1D2D]

# Under the interpreter the cost is per operation, not per element, so tiles are mid-sized; they
# still leave several tiles (and a partial GROUP_M band) on the test shapes.
_INTERPRETER_DEFAULTS = {
    BF16_GEMM: _config(32, 64, 64, 4, 1, group_m=2),
    FP8_GEMM_1D2D: _config(32, 64, FP8_BLOCK_K, 4, 1, group_m=2),
    FP8_GEMM_1D1D: _config(32, 64, FP8_BLOCK_K, 4, 1, group_m=2),
}

# Shared memory kept free of pipeline stages, for Triton's epilogue layout conversion.
_EPILOGUE_SHARED_MEMORY = 8 * 1024


# ---------------------------------------------------------------------------------------------
# Device facts


@functools.cache
def device_capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


@functools.cache
def _shared_memory_bytes(device: torch.device) -> int:
    properties = torch.cuda.get_device_properties(device)
    return getattr(properties, "shared_memory_per_block_optin", 0) or 48 * 1024


def arch_name(capability: tuple[int, int]) -> str:
    """The autotune_configs/ folder of a compute capability: (9, 0) -> 'sm90', (12, 0) -> 'sm120'."""
    return f"sm{capability[0]}{capability[1]}"


# ---------------------------------------------------------------------------------------------
# Tuned files


def check_config(family: str, config: PortableGemmConfig, where: str = "config") -> PortableGemmConfig:
    """ValueError naming `where` unless the config can compile: power-of-two blocks of at least
    16 (tl.dot's minimum), FP8 block_k 128, 1-16 warps (a power of two), at least one stage,
    1 to MAX_SPLIT_K K slices."""
    if family not in FAMILIES:
        raise ValueError(f"{where}: family must be one of {FAMILIES}, got {family!r}")
    for name in PortableGemmConfig._fields:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{where}: {name} must be a positive int, got {value!r}")
    for name in ("block_m", "block_n", "block_k"):
        value = getattr(config, name)
        if value < 16 or value & (value - 1):
            raise ValueError(f"{where}: {name} must be a power of two >= 16, got {value}")
    if family in _FP8_FAMILIES and config.block_k != FP8_BLOCK_K:
        raise ValueError(f"{where}: block_k must be {FP8_BLOCK_K} for {family} (the scale-factor "
                         f"granularity), got {config.block_k}")
    if config.num_warps > 16 or config.num_warps & (config.num_warps - 1):
        raise ValueError(f"{where}: num_warps must be a power of two <= 16, got {config.num_warps}")
    if config.split_k > MAX_SPLIT_K:
        raise ValueError(f"{where}: split_k must be at most {MAX_SPLIT_K}, got {config.split_k}")
    return config


def tuned_file_path(arch: str, family: str, root: Path | None = None) -> Path:
    if root is None:
        from dg_triton.paths import autotune_configs_dir
        root = autotune_configs_dir()
    return Path(root) / arch / f"{family}_portable.json"


def make_tuned_document(family: str, arch: str, gpu: str, entries: list[dict]) -> dict:
    """A tuned file's content (dg_triton.tuned_files, backend "portable"); `entries` are dicts
    with m, n, k, config (PortableGemmConfig or dict) and the measurements (time_us, tflops, ...)."""
    return tuned_files.make_document(family, "portable", arch, gpu, entries)


def write_tuned_file(path: Path, document: dict) -> None:
    tuned_files.write_document(path, document)


def read_tuned_file(path: Path) -> list[tuple[tuple[int, int, int], PortableGemmConfig]]:
    """((m, n, k), config) per entry; ValueError naming the file if it is malformed. A missing
    file is no entries."""
    document = tuned_files.read_document(path, "portable")
    if document is None:
        return []
    entries = []
    for index, entry in enumerate(document["entries"]):
        where = f"{path}: entries[{index}]"
        try:
            config = PortableGemmConfig(**entry["config"])
        except TypeError as error:
            raise ValueError(f"{where}: not a portable GEMM config ({error})") from None
        entries.append(((entry["m"], entry["n"], entry["k"]), check_config(document["family"], config, where)))
    return entries


def nearest_entry(entries, m: int, n: int, k: int):
    """The config of the entry nearest to (m, n, k): least sum of |log2| ratios, the first entry
    on ties; None without entries. Entries of the other M regime (decode M <= DECODE_MAX_M, whose
    winners are narrow tiles with split-K, versus larger M) are taken only when the file has none
    of this problem's regime."""
    decode = m <= DECODE_MAX_M
    same_regime = [entry for entry in entries if (entry[0][0] <= DECODE_MAX_M) == decode]
    best, best_distance = None, math.inf
    for (em, en, ek), config in same_regime or entries:
        distance = abs(math.log2(m / em)) + abs(math.log2(n / en)) + abs(math.log2(k / ek))
        if distance < best_distance:
            best, best_distance = config, distance
    return best


@functools.cache
def _tuned_entries(arch: str, family: str) -> tuple:
    try:
        path = tuned_file_path(arch, family)
    except FileNotFoundError:  # an install without the autotune_configs folder: defaults only
        return ()
    return tuple(read_tuned_file(path))


# ---------------------------------------------------------------------------------------------
# Choice


def _input_bytes(family: str) -> int:
    return 1 if family in _FP8_FAMILIES else 2


def default_config(family: str, m: int, capability: tuple[int, int], shared_memory_bytes: int) -> PortableGemmConfig:
    """The built-in config for `family` at M = `m` on a GPU of that compute capability and shared
    memory per block, its stages cut so that the operand tiles of every stage fit."""
    generation = "async" if capability[0] in (9, 10) else "mma"
    for largest_m, config in _DEFAULTS[generation, family]:
        if largest_m is None or m <= largest_m:
            break
    stage_bytes = (config.block_m + config.block_n) * config.block_k * _input_bytes(family)
    stages = max(1, min(config.num_stages, (shared_memory_bytes - _EPILOGUE_SHARED_MEMORY) // stage_bytes))
    return config._replace(num_stages=stages)


def config_for_accumulation(config: PortableGemmConfig) -> PortableGemmConfig:
    """The config an accumulating call (D read as c) runs: its epilogue holds D's tile beside the
    FP32 sum, so a tile of more than 64 FP32 values per thread (the BF16 sweep's 256 x 128 on 8
    warps) is halved along M, which would otherwise leave a stack frame (the compile tests hold
    the shipped configs to none)."""
    while config.block_m > 16 and config.block_m * config.block_n > 64 * 32 * config.num_warps:
        config = config._replace(block_m=config.block_m // 2)
    return config


_chosen: dict = {}


def choose_config(family: str, m: int, n: int, k: int, device: torch.device) -> PortableGemmConfig:
    """The config of one problem: under the interpreter (a CPU device) the interpreter default;
    on a GPU the nearest tuned entry of its arch, else the default. Cached per problem."""
    key = (family, m, n, k, device)
    config = _chosen.get(key)
    if config is None:
        if device.type != "cuda":
            config = _INTERPRETER_DEFAULTS[family]
        else:
            config = nearest_entry(_tuned_entries(arch_name(device_capability(device)), family), m, n, k)
            if config is None:
                config = default_config(family, m, device_capability(device), _shared_memory_bytes(device))
        _chosen[key] = config
    return config


def clear_caches() -> None:
    """Forget loaded tuned files and cached choices (after a sweep wrote a file, and in tests)."""
    _chosen.clear()
    _tuned_entries.cache_clear()
