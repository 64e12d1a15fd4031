"""CUDA C++ -> cubin, with NVRTC (default) or nvcc, through the disk cache.

NVRTC is reached through ``cuda.bindings.nvrtc``: no toolkit install is needed, only the pip
wheels (nvidia-cuda-nvrtc and the header wheels). ``DG_JIT_USE_NVRTC=0`` (DeepGEMM's switch) or
``DG_JIT_NVCC_COMPILER`` selects nvcc instead. Both produce real-architecture cubins
(``sm_90a`` / ``sm_100a``); neither needs a GPU, so the compile-only tests run in CI.

The cache key (API.md section 6) covers everything that determines the binary: the kernel name and
source, a digest of every header the source includes transitively (ours and CUTLASS's), the flags,
the compiler and its version, the architecture, and which dumps the entry must hold.
"""
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dg_triton.env import env_flag, get_env
from dg_triton.jit import cache, sass_yield
from dg_triton.paths import cuda_kernels_dir

SUPPORTED_ARCHS = ("sm_90a", "sm_100a")


class JitCompileError(RuntimeError):
    """The compiler failed, or a resource check (spills, local memory) rejected the kernel."""


@dataclass(frozen=True)
class ResourceUsage:
    registers: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int


@dataclass(frozen=True)
class CompiledKernel:
    name: str
    entry_dir: Path
    cubin: bytes
    ptxas_log: str

    @property
    def resources(self) -> ResourceUsage:
        return resource_usage(self.name, self.ptxas_log, self.cubin)


# ---- include paths and the header digest ---------------------------------------------------------

def _located_header_dir(library: str) -> Path | None:
    try:
        from cuda.pathfinder import locate_nvidia_header_directory
        located = locate_nvidia_header_directory(library)
        return Path(located.abs_path) if located is not None else None
    except Exception:  # pathfinder missing, too old, or the library not installed
        return None


@functools.cache
def cuda_include_dirs() -> tuple[Path, ...]:
    """CUDA headers for NVRTC (and nvcc): cuda_bf16.h and libcu++ (cuda/std/...), from the pip
    wheels if present, else from the toolkit next to nvcc. The two may come from different places
    (a machine with the runtime wheel but only the toolkit's CCCL)."""
    nvcc = _nvcc_path(required=False)
    toolkit = Path(nvcc).resolve().parent.parent / "include" if nvcc else None
    runtime_dirs = [_located_header_dir("cudart"), toolkit]
    cccl_dirs = [_located_header_dir("cccl")] + [d / "cccl" for d in runtime_dirs if d] + runtime_dirs
    runtime = next((d for d in runtime_dirs if d and (d / "cuda_bf16.h").is_file()), None)
    cccl = next((d for d in cccl_dirs if d and (d / "cuda" / "std" / "cstdint").is_file()), None)
    if runtime is None or cccl is None:
        raise JitCompileError("dg_triton JIT: CUDA headers not found (need cuda_bf16.h and "
                              "cuda/std/cstdint); pip install nvidia-cuda-runtime nvidia-cuda-cccl, "
                              "or put a CUDA toolkit's nvcc on PATH")
    return (runtime,) if cccl == runtime else (runtime, cccl)


@functools.cache
def cutlass_include_dir() -> Path | None:
    import importlib.util
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    include = Path(list(spec.submodule_search_locations)[0]) / "source" / "include"
    return include if include.is_dir() else None


def include_dirs() -> tuple[Path, ...]:
    dirs = [cuda_kernels_dir()]
    if cutlass_include_dir() is not None:
        dirs.append(cutlass_include_dir())
    return tuple(dirs) + cuda_include_dirs()


_INCLUDE_RE = re.compile(rb'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def header_digest(source: str, roots: tuple[Path, ...] | None = None) -> str:
    """sha256 over every header under `roots` (default: our kernels and CUTLASS) that `source`
    includes, transitively. Toolkit headers are left out: the compiler version stands for them."""
    if roots is None:
        roots = (cuda_kernels_dir(),) + ((cutlass_include_dir(),) if cutlass_include_dir() else ())
    search = tuple(roots)
    seen: dict[Path, str] = {}

    def visit(text: bytes, including_dir: Path | None) -> None:
        for match in _INCLUDE_RE.finditer(text):
            name = match.group(1).decode()
            for base in ((including_dir,) if including_dir else ()) + search:
                path = (base / name).resolve()
                if path.is_file():
                    if path not in seen:
                        seen[path] = _file_sha256(path)
                        visit(path.read_bytes(), path.parent)
                    break

    visit(source.encode(), None)
    # Names and contents only, in an order that does not depend on where the headers live, so a
    # cache built on one machine serves another with the same sources and compiler (a prebuilt
    # cache carried to a GPU host, a container image).
    digest = hashlib.sha256()
    for name, sha in sorted((path.name, sha) for path, sha in seen.items()):
        digest.update(f"{name}:{sha};".encode())
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    stat = path.stat()
    return _file_sha256_cached(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _file_sha256_cached(path: Path, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- compilers -----------------------------------------------------------------------------------

def _nvcc_path(required: bool = True) -> str | None:
    explicit = get_env("DG_JIT_NVCC_COMPILER")
    if explicit:
        return explicit
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found is None and required:
        raise JitCompileError("dg_triton JIT: nvcc was asked for (DG_JIT_USE_NVRTC=0 or "
                              "DG_JIT_NVCC_COMPILER) but none was found; set DG_JIT_NVCC_COMPILER")
    return found


def use_nvcc() -> bool:
    choice = get_env("DG_JIT_USE_NVRTC")
    if choice is not None and choice.strip() != "":
        return not env_flag("DG_JIT_USE_NVRTC")
    return bool(get_env("DG_JIT_NVCC_COMPILER"))


def common_flags(arch: str) -> list[str]:
    if arch not in SUPPORTED_ARCHS:
        raise JitCompileError(f"dg_triton JIT: arch must be one of {SUPPORTED_ARCHS}, got {arch!r}")
    # -DNDEBUG: a device assert makes ptxas serialize every wgmma (warning C7510, TOOLCHAIN.md).
    flags = [f"-std=c++{get_env('DG_JIT_CPP_STANDARD', '17')}", "-DNDEBUG",
             "--ptxas-options=--verbose", "--ptxas-options=--warn-on-local-memory-usage"]
    if env_flag("DG_JIT_WITH_LINEINFO"):
        flags.append("-lineinfo")
    return flags


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc
    err, major, minor = nvrtc.nvrtcVersion()
    _check_nvrtc(err, "nvrtcVersion")
    return major, minor


@functools.cache
def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else out.strip().splitlines()[-1]


def compiler_signature() -> str:
    if use_nvcc():
        return f"NVCC{nvcc_version(_nvcc_path())}"
    major, minor = nvrtc_version()
    return f"NVRTC{major}.{minor}"


def _check_nvrtc(err, what: str, log: str = "") -> None:
    from cuda.bindings import nvrtc
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise JitCompileError(f"dg_triton JIT: {what} failed: {err}\n{log}")


def _compile_nvrtc(name: str, source: str, arch: str, flags: list[str], want_ptx: bool
                   ) -> tuple[bytes, str, bytes | None, str]:
    from cuda.bindings import nvrtc
    options = [f"--gpu-architecture={arch}", "-default-device"] + flags
    options += [f"-I{d}" for d in include_dirs()]
    command = "nvrtc " + " ".join(options)
    _debug_print_command(command)
    err, program = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    _check_nvrtc(err, "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in options]
        (compile_err,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        err, size = nvrtc.nvrtcGetProgramLogSize(program)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log)
        log_text = log.rstrip(b"\x00 ").decode(errors="replace")
        _check_nvrtc(compile_err, f"compiling kernel {name}", log_text)
        err, size = nvrtc.nvrtcGetCUBINSize(program)
        _check_nvrtc(err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(program, cubin)
        _check_nvrtc(err, "nvrtcGetCUBIN")
        ptx = None
        if want_ptx:
            err, size = nvrtc.nvrtcGetPTXSize(program)
            ptx = b" " * size
            nvrtc.nvrtcGetPTX(program, ptx)
            ptx = ptx.rstrip(b"\x00")
        return cubin, log_text, ptx, command
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _compile_nvcc(name: str, source: str, arch: str, flags: list[str], want_ptx: bool
                  ) -> tuple[bytes, str, bytes | None, str]:
    nvcc = _nvcc_path()
    code = arch.replace("sm_", "compute_")
    with tempfile.TemporaryDirectory(prefix="dg_nvcc_") as tmp:
        src = Path(tmp) / f"{name}.cu"
        src.write_text(source)
        base = [nvcc, f"-gencode=arch={code},code={arch}", "-O3", "--expt-relaxed-constexpr"]
        base += flags + [f"-I{d}" for d in include_dirs()]
        command = base + ["-cubin", str(src), "-o", str(Path(tmp) / "kernel.cubin")]
        _debug_print_command(" ".join(command))
        result = subprocess.run(command, capture_output=True, text=True)
        log = result.stdout + result.stderr
        if result.returncode != 0:
            raise JitCompileError(f"dg_triton JIT: nvcc failed compiling kernel {name}:\n{log}")
        cubin = (Path(tmp) / "kernel.cubin").read_bytes()
        ptx = None
        if want_ptx:
            ptx_command = [nvcc, f"-arch={code}", "-ptx"] + flags + [f"-I{d}" for d in include_dirs()]
            ptx_command += [str(src), "-o", str(Path(tmp) / "kernel.ptx")]
            subprocess.run(ptx_command, capture_output=True, check=True)
            ptx = (Path(tmp) / "kernel.ptx").read_bytes()
        return cubin, log, ptx, " ".join(command)


def _debug_print_command(command: str) -> None:
    if env_flag("DG_JIT_DEBUG") or env_flag("DG_JIT_PRINT_COMPILER_COMMAND"):
        print(f"[dg_triton JIT] compile: {command}", file=sys.stderr)


# ---- ptxas report --------------------------------------------------------------------------------

_STACK_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS_RE = re.compile(r"Used (\d+) registers")


def parse_ptxas_log(log: str) -> ResourceUsage | None:
    """The ptxas resource report, or None when the log has none (seen on the H200's NVRTC for a
    program it had already compiled in the same process: an empty log, a good cubin)."""
    stack = _STACK_RE.findall(log)
    registers = _REGISTERS_RE.findall(log)
    if not stack or not registers:
        return None
    return ResourceUsage(registers=max(int(r) for r in registers),
                         stack_frame_bytes=max(int(s[0]) for s in stack),
                         spill_store_bytes=max(int(s[1]) for s in stack),
                         spill_load_bytes=max(int(s[2]) for s in stack))


_RES_USAGE_RE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)")


def cubin_resource_usage(cubin: bytes) -> ResourceUsage | None:
    """The same facts from the cubin itself (cuobjdump -res-usage). It does not split spills from
    other local memory, so any local memory counts as spills here: a conservative reading."""
    tool = cuobjdump_path()
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        out = subprocess.run([tool, "-res-usage", file.name], capture_output=True, text=True).stdout
    found = _RES_USAGE_RE.findall(out)
    if not found:
        return None
    local = max(int(f[2]) for f in found)
    return ResourceUsage(registers=max(int(f[0]) for f in found),
                         stack_frame_bytes=max(max(int(f[1]), int(f[2])) for f in found),
                         spill_store_bytes=local, spill_load_bytes=local)


def resource_usage(name: str, log: str, cubin: bytes) -> ResourceUsage:
    usage = parse_ptxas_log(log) or cubin_resource_usage(cubin)
    if usage is None:
        raise JitCompileError(f"dg_triton JIT: no resource report for kernel {name}: the ptxas log "
                              "has none and cuobjdump is not available to read the cubin")
    return usage


def check_resources(name: str, log: str, cubin: bytes) -> None:
    """DG_JIT_CHECK_NO_SPILLS / DG_JIT_CHECK_NO_LOCAL_MEMORY (and DeepGEMM's DG_JIT_PTXAS_CHECK)."""
    check_spills = env_flag("DG_JIT_CHECK_NO_SPILLS")
    check_local = env_flag("DG_JIT_CHECK_NO_LOCAL_MEMORY") or env_flag("DG_JIT_PTXAS_CHECK")
    if not (check_spills or check_local):
        return
    usage = resource_usage(name, log, cubin)
    spills = usage.spill_store_bytes + usage.spill_load_bytes
    if check_spills and spills:
        raise JitCompileError(f"dg_triton JIT: kernel {name} spills registers "
                              f"({usage.spill_store_bytes} B stores, {usage.spill_load_bytes} B loads)")
    if check_local and (spills or usage.stack_frame_bytes or "Local memory used" in log):
        raise JitCompileError(f"dg_triton JIT: kernel {name} uses local memory "
                              f"({usage.stack_frame_bytes} B stack frame, {spills} B spills)")


# ---- disassembly ---------------------------------------------------------------------------------

@functools.cache
def cuobjdump_path() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    import importlib.util
    for package, relative in (("nvidia", "cu13/bin/cuobjdump"),
                              ("triton", "backends/nvidia/bin/cuobjdump")):
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            path = Path(location) / relative
            if path.is_file():
                return str(path)
    return None


def disassemble(cubin_path: Path) -> str:
    tool = cuobjdump_path()
    if tool is None:
        raise JitCompileError("dg_triton JIT: cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    return subprocess.run([tool, "-sass", str(cubin_path)], capture_output=True, text=True,
                          check=True).stdout


# ---- the entry point -----------------------------------------------------------------------------

def _dumps() -> tuple[bool, bool]:
    both = env_flag("DG_JIT_DUMP_ASM")
    return both or env_flag("DG_JIT_DUMP_PTX"), both or env_flag("DG_JIT_DUMP_SASS")


def cache_key(name: str, source: str, arch: str, ffma_yield: str | None = None) -> str:
    dump_ptx, dump_sass = _dumps()
    parts = [name, source, header_digest(source), " ".join(common_flags(arch)),
             compiler_signature(), arch, f"ptx={dump_ptx},sass={dump_sass}"]
    if ffma_yield is not None:
        parts.append(f"ffma_yield={ffma_yield}")
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


def compile_kernel(name: str, source: str, arch: str = "sm_90a",
                   ffma_yield: str | None = None) -> CompiledKernel:
    """The cubin for `source`, from the disk cache or freshly compiled into it.

    ffma_yield: a sass_yield policy applied to the compiled cubin before it is cached (None: the
    cubin as the compiler wrote it)."""
    flags = common_flags(arch)
    key = cache_key(name, source, arch, ffma_yield)
    dump_ptx, dump_sass = _dumps()
    compiled_now = []

    def build(directory: Path) -> None:
        start = time.perf_counter()
        compile_fn = _compile_nvcc if use_nvcc() else _compile_nvrtc
        cubin, log, ptx, command = compile_fn(name, source, arch, flags, dump_ptx)
        check_resources(name, log, cubin)
        if ffma_yield is not None:
            if arch != "sm_90a":   # the encoding facts sass_yield uses were checked on sm_90a only
                raise JitCompileError(f"dg_triton JIT: ffma_yield applies to sm_90a cubins, not {arch}")
            cubin = sass_yield.set_ffma_yield(cubin, ffma_yield)
        (directory / "kernel.cu").write_text(source)
        (directory / "kernel.cubin").write_bytes(cubin)
        (directory / "ptxas.log").write_text(log)
        (directory / "command.txt").write_text(command + "\n")
        if ptx is not None:
            (directory / "kernel.ptx").write_bytes(ptx)
        if dump_sass:
            (directory / "kernel.sass").write_text(disassemble(directory / "kernel.cubin"))
        compiled_now.append(time.perf_counter() - start)
        if env_flag("DG_JIT_DEBUG"):
            print(f"[dg_triton JIT] source of {name}:\n{source}", file=sys.stderr)

    entry = cache.get_or_build(name, key, build)
    log = (entry / "ptxas.log").read_text() if (entry / "ptxas.log").is_file() else ""
    cubin = (entry / "kernel.cubin").read_bytes()
    if not compiled_now:
        check_resources(name, log, cubin)  # a cached kernel built before a check was switched on
    if compiled_now and (env_flag("DG_JIT_DEBUG") or env_flag("DG_JIT_PTXAS_VERBOSE")):
        print(f"[dg_triton JIT] {name}: compiled in {compiled_now[0]:.2f} s\n{log}", file=sys.stderr)
    if dump_ptx or dump_sass:
        for dump in ("kernel.ptx", "kernel.sass"):
            if (entry / dump).is_file():
                print(f"[dg_triton JIT] {name}: {dump} at {entry / dump}", file=sys.stderr)
    if env_flag("DG_JIT_DEBUG"):
        print(f"[dg_triton JIT] {name}: cubin {entry / 'kernel.cubin'}", file=sys.stderr)
    return CompiledKernel(name=name, entry_dir=entry, cubin=cubin, ptxas_log=log)
