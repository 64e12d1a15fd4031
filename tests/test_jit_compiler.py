"""The JIT front end (dg_triton/jit/compiler.py) on the CPU: cache key, compiler choice, ptxas
report and resource checks, dumps, and concurrent compiles into one cache. Real compiles here are of
tiny kernels (tens of milliseconds with NVRTC); no GPU is needed."""
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dg_triton.jit import cache, compiler

REPO_ROOT = Path(__file__).resolve().parent.parent

_JIT_VARIABLES = ("USE_NVRTC", "NVCC_COMPILER", "CHECK_NO_SPILLS", "CHECK_NO_LOCAL_MEMORY",
                  "PTXAS_CHECK", "PTXAS_VERBOSE", "DUMP_ASM", "DUMP_PTX", "DUMP_SASS",
                  "WITH_LINEINFO", "DEBUG", "PRINT_COMPILER_COMMAND", "CPP_STANDARD", "CACHE_DIR")


@pytest.fixture(autouse=True)
def _isolated_jit_env(monkeypatch, tmp_path):
    for variable in _JIT_VARIABLES:
        monkeypatch.delenv(f"DG_JIT_{variable}", raising=False)
        monkeypatch.delenv(f"DJ_JIT_{variable}", raising=False)
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "jit_cache"))
    cache.clear_memo()
    yield
    cache.clear_memo()


def _tag() -> str:
    # A fresh comment per test makes every source (and its cache key) new: nothing is shared
    # between tests through the cache or through NVRTC's in-process state.
    return uuid.uuid4().hex


def trivial_source(symbol: str = "trivial") -> str:
    return (f"// {_tag()}\n"
            f'extern "C" __global__ void {symbol}(float* out, float value) {{\n'
            f"    out[threadIdx.x] = value * threadIdx.x;\n"
            f"}}\n")


def local_array_source() -> str:
    # A runtime-indexed read-modify-write of a local array cannot live in registers: a 256-byte stack
    # frame, no spills.
    return f"""// {_tag()}
extern "C" __global__ void local_array(const float* in, float* out, int n) {{
    float buf[64];
    for (int j = 0; j < 64; ++j) buf[j] = in[j];
    for (int j = 0; j < n; ++j) buf[(j * n) & 63] += buf[(j + n) & 63];
    out[threadIdx.x] = buf[threadIdx.x & 63];
}}
"""


def spilling_source() -> str:
    # 96 live floats per thread under a 32-register cap (1024 threads x 2 blocks per SM): spills.
    return f"""// {_tag()}
extern "C" __global__ void __launch_bounds__(1024, 2) spilling(const float* in, float* out) {{
    float v[96];
#pragma unroll
    for (int j = 0; j < 96; ++j) v[j] = in[j * 1024 + threadIdx.x];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 96; ++j) s += v[j] * v[95 - j] + v[(j * 7) % 96];
#pragma unroll
    for (int j = 0; j < 96; ++j) out[j * 1024 + threadIdx.x] = v[j] * s;
}}
"""


def cache_entries() -> list[Path]:
    root = Path(os.environ["DG_JIT_CACHE_DIR"]) / "cache"
    return sorted(root.iterdir()) if root.exists() else []


# ---- cache key -----------------------------------------------------------------------------------

def _header_tree(root: Path) -> None:
    # The real layout: a kernel header includes a common one through a relative path.
    (root / "sm90").mkdir(parents=True)
    (root / "common").mkdir()
    (root / "sm90" / "a.cuh").write_text('#pragma once\n#include "../common/b.cuh"\n')
    (root / "common" / "b.cuh").write_text("#pragma once\nconstexpr int kB = 1;\n")
    (root / "common" / "unrelated.cuh").write_text("constexpr int kUnrelated = 1;\n")


def test_header_digest_follows_transitive_includes_and_ignores_other_files(tmp_path):
    root = tmp_path / "kernels"
    _header_tree(root)
    source = '#include "sm90/a.cuh"\n'
    before = compiler.header_digest(source, (root,))
    assert compiler.header_digest(source, (root,)) == before

    (root / "common" / "unrelated.cuh").write_text("constexpr int kUnrelated = 2;  // edited\n")
    assert compiler.header_digest(source, (root,)) == before

    (root / "common" / "b.cuh").write_text(f"#pragma once\nconstexpr int kB = 2;  // {_tag()}\n")
    after = compiler.header_digest(source, (root,))
    assert after != before
    # Angle brackets search the roots the same way.
    assert compiler.header_digest("#include <sm90/a.cuh>\n", (root,)) == after
    # A source that includes nothing under the roots has a digest independent of them.
    assert compiler.header_digest("int x;\n", (root,)) == compiler.header_digest("int y;\n", (root,))


def test_header_digest_does_not_depend_on_where_the_headers_live(tmp_path):
    # Our headers and a library's, placed so that their full paths sort one way on one machine
    # and the other way on another: a cache built on either must serve both.
    def tree(kernels, library):
        _header_tree(kernels)
        library.mkdir(parents=True)
        (library / "lib.h").write_text("#pragma once\nconstexpr int kLib = 1;\n")
        return (kernels, library)
    source = '#include "sm90/a.cuh"\n#include <lib.h>\n'
    here = compiler.header_digest(source, tree(tmp_path / "a" / "kernels", tmp_path / "z" / "lib"))
    there = compiler.header_digest(source, tree(tmp_path / "z2" / "kernels", tmp_path / "a2" / "lib"))
    assert here == there


def test_cache_key_changes_when_an_included_kernel_header_changes(tmp_path, monkeypatch):
    root = tmp_path / "kernels"
    _header_tree(root)
    monkeypatch.setattr(compiler, "cuda_kernels_dir", lambda: root)
    source = '#include "sm90/a.cuh"\n' + trivial_source()
    before = compiler.cache_key("k", source, "sm_90a")
    (root / "common" / "unrelated.cuh").write_text("// edited\n")
    assert compiler.cache_key("k", source, "sm_90a") == before
    (root / "common" / "b.cuh").write_text(f"#pragma once\nconstexpr int kB = 3;  // {_tag()}\n")
    assert compiler.cache_key("k", source, "sm_90a") != before


def test_cache_key_changes_with_arch_lineinfo_name_and_source(monkeypatch):
    source = trivial_source()
    base = compiler.cache_key("trivial", source, "sm_90a")
    assert len(base) == 32 and int(base, 16) >= 0
    assert compiler.cache_key("trivial", source, "sm_90a") == base
    assert compiler.cache_key("trivial", source, "sm_100a") != base
    assert compiler.cache_key("other", source, "sm_90a") != base
    assert compiler.cache_key("trivial", source + "\n", "sm_90a") != base

    monkeypatch.setenv("DG_JIT_WITH_LINEINFO", "1")
    with_lineinfo = compiler.cache_key("trivial", source, "sm_90a")
    assert with_lineinfo != base
    assert "-lineinfo" in compiler.common_flags("sm_90a")
    monkeypatch.delenv("DG_JIT_WITH_LINEINFO")
    monkeypatch.setenv("DJ_JIT_WITH_LINEINFO", "1")
    assert compiler.cache_key("trivial", source, "sm_90a") == with_lineinfo


def test_cache_key_changes_with_compiler_choice(monkeypatch):
    source = trivial_source()
    nvrtc_key = compiler.cache_key("trivial", source, "sm_90a")
    monkeypatch.setattr(compiler, "compiler_signature", lambda: "NVCC12.9")
    assert compiler.cache_key("trivial", source, "sm_90a") != nvrtc_key


# ---- compiler choice -----------------------------------------------------------------------------

@pytest.mark.parametrize("env, expect_nvcc", [
    ({}, False),
    ({"DG_JIT_USE_NVRTC": "0"}, True),
    ({"DG_JIT_USE_NVRTC": "1"}, False),
    ({"DG_JIT_USE_NVRTC": ""}, False),
    ({"DG_JIT_NVCC_COMPILER": "/opt/cuda/bin/nvcc"}, True),
    ({"DG_JIT_NVCC_COMPILER": "/opt/cuda/bin/nvcc", "DG_JIT_USE_NVRTC": "1"}, False),
    ({"DJ_JIT_USE_NVRTC": "0"}, True),
    ({"DJ_JIT_USE_NVRTC": "1", "DG_JIT_NVCC_COMPILER": "/opt/cuda/bin/nvcc"}, False),
    ({"DJ_JIT_NVCC_COMPILER": "/opt/cuda/bin/nvcc"}, True),
    ({"DJ_JIT_USE_NVRTC": "0", "DG_JIT_USE_NVRTC": "1"}, False),
    ({"DJ_JIT_USE_NVRTC": "1", "DG_JIT_USE_NVRTC": "0"}, True),
], ids=lambda value: (",".join(f"{k}={v}" for k, v in value.items()) or "unset")
   if isinstance(value, dict) else ("nvcc" if value else "nvrtc"))
def test_use_nvcc_follows_dg_then_dj_variables(monkeypatch, env, expect_nvcc):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert compiler.use_nvcc() is expect_nvcc


def test_nvcc_compiler_variable_names_the_binary(monkeypatch, tmp_path):
    fake = str(tmp_path / "my-nvcc")
    monkeypatch.setenv("DJ_JIT_NVCC_COMPILER", fake)
    assert compiler._nvcc_path() == fake
    monkeypatch.setenv("DG_JIT_NVCC_COMPILER", fake + "-dg")
    assert compiler._nvcc_path() == fake + "-dg"


# ---- ptxas report and resource checks -------------------------------------------------------------

SAMPLE_LOG = """\
ptxas warning : Local memory used for function 'second', size of stack frame: 24 bytes
ptxas info    : 111 bytes gmem
ptxas info    : Compiling entry function 'first' for 'sm_90a'
ptxas info    : Function properties for first
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers
ptxas info    : Compiling entry function 'second' for 'sm_90a'
ptxas info    : Function properties for second
ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 24 bytes cumulative stack size
ptxas info    : Compile time = 270.428 ms
"""


def test_parse_ptxas_log_takes_the_worst_function():
    usage = compiler.parse_ptxas_log(SAMPLE_LOG)
    assert usage == compiler.ResourceUsage(registers=168, stack_frame_bytes=24,
                                           spill_store_bytes=8, spill_load_bytes=12)


def test_parse_ptxas_log_returns_none_without_a_report():
    assert compiler.parse_ptxas_log("") is None
    assert compiler.parse_ptxas_log("ptxas info    : 0 bytes gmem\n") is None


CLEAN_LOG = """\
ptxas info    : Compiling entry function 'first' for 'sm_90a'
ptxas info    : Function properties for first
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers
"""
STACK_ONLY_LOG = CLEAN_LOG.replace("0 bytes stack frame", "64 bytes stack frame")


def test_check_resources_passes_everything_when_no_check_is_asked():
    compiler.check_resources("kernel_x", SAMPLE_LOG, b"")


def test_check_no_spills_rejects_a_spilling_report_naming_the_kernel(monkeypatch):
    monkeypatch.setenv("DG_JIT_CHECK_NO_SPILLS", "1")
    with pytest.raises(compiler.JitCompileError, match=r"kernel my_gemm_128x256 spills.*8 B stores"):
        compiler.check_resources("my_gemm_128x256", SAMPLE_LOG, b"")
    compiler.check_resources("my_gemm_128x256", CLEAN_LOG, b"")
    compiler.check_resources("my_gemm_128x256", STACK_ONLY_LOG, b"")  # a stack frame is not a spill


@pytest.mark.parametrize("variable", ["DG_JIT_CHECK_NO_LOCAL_MEMORY", "DJ_JIT_CHECK_NO_LOCAL_MEMORY",
                                      "DG_JIT_PTXAS_CHECK"])
def test_check_no_local_memory_rejects_a_stack_frame(monkeypatch, variable):
    monkeypatch.setenv(variable, "1")
    with pytest.raises(compiler.JitCompileError, match=r"kernel k_local uses local memory.*64 B stack"):
        compiler.check_resources("k_local", STACK_ONLY_LOG, b"")
    with pytest.raises(compiler.JitCompileError, match="k_local uses local memory"):
        compiler.check_resources("k_local", SAMPLE_LOG, b"")
    compiler.check_resources("k_local", CLEAN_LOG, b"")


def test_real_spilling_kernel_fails_with_check_no_spills_and_is_not_cached(monkeypatch):
    source = spilling_source()
    compiled = compiler.compile_kernel("spilling", source, "sm_90a")
    assert compiled.resources.spill_store_bytes > 0  # the kernel really spills
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(Path(os.environ["DG_JIT_CACHE_DIR"]) / "checked"))
    monkeypatch.setenv("DG_JIT_CHECK_NO_SPILLS", "1")
    with pytest.raises(compiler.JitCompileError, match="kernel spilling spills"):
        compiler.compile_kernel("spilling", source, "sm_90a")
    assert cache_entries() == []


def test_real_local_array_kernel_fails_only_the_local_memory_check(monkeypatch):
    source = local_array_source()
    monkeypatch.setenv("DG_JIT_CHECK_NO_SPILLS", "1")
    compiled = compiler.compile_kernel("local_array", source, "sm_90a")
    assert compiled.resources.stack_frame_bytes > 0
    assert compiled.resources.spill_store_bytes == 0

    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(Path(os.environ["DG_JIT_CACHE_DIR"]) / "checked"))
    monkeypatch.setenv("DG_JIT_CHECK_NO_LOCAL_MEMORY", "1")
    with pytest.raises(compiler.JitCompileError, match="kernel local_array uses local memory"):
        compiler.compile_kernel("local_array", source, "sm_90a")
    assert cache_entries() == []


def test_clean_kernel_passes_both_checks(monkeypatch):
    monkeypatch.setenv("DG_JIT_CHECK_NO_SPILLS", "1")
    monkeypatch.setenv("DG_JIT_CHECK_NO_LOCAL_MEMORY", "1")
    compiled = compiler.compile_kernel("trivial", trivial_source(), "sm_90a")
    assert compiled.resources.stack_frame_bytes == 0
    assert compiled.cubin[:4] == b"\x7fELF"


def test_compile_error_names_the_kernel():
    with pytest.raises(compiler.JitCompileError, match="broken_kernel"):
        compiler.compile_kernel("broken_kernel", f"// {_tag()}\nthis is not CUDA;\n", "sm_90a")
    assert cache_entries() == []


# ---- dumps and verbose output ---------------------------------------------------------------------

needs_cuobjdump = pytest.mark.skipif(compiler.cuobjdump_path() is None, reason="no cuobjdump")


@pytest.mark.parametrize("variable, expect_ptx, expect_sass", [
    (None, False, False),
    ("DG_JIT_DUMP_PTX", True, False),
    pytest.param("DG_JIT_DUMP_SASS", False, True, marks=needs_cuobjdump),
    pytest.param("DG_JIT_DUMP_ASM", True, True, marks=needs_cuobjdump),
    pytest.param("DJ_JIT_DUMP_ASM", True, True, marks=needs_cuobjdump),
])
def test_dumps_land_next_to_the_cubin_and_are_printed(monkeypatch, capsys, variable, expect_ptx,
                                                      expect_sass):
    if variable:
        monkeypatch.setenv(variable, "1")
    compiled = compiler.compile_kernel("dumped", trivial_source("dumped"), "sm_90a")
    entry = compiled.entry_dir
    assert (entry / "kernel.cubin").is_file()
    assert (entry / "kernel.ptx").is_file() is expect_ptx
    assert (entry / "kernel.sass").is_file() is expect_sass
    err = capsys.readouterr().err
    if expect_ptx:
        ptx = (entry / "kernel.ptx").read_text()
        assert ".target sm_90a" in ptx and ".entry dumped" in ptx
        assert str(entry / "kernel.ptx") in err
    if expect_sass:
        sass = (entry / "kernel.sass").read_text()
        assert "code for sm_90a" in sass and "Function : dumped" in sass
        assert str(entry / "kernel.sass") in err
    if not variable:
        assert err == ""


def test_ptxas_verbose_prints_the_report_on_compile(monkeypatch, capsys):
    compiler.compile_kernel("quiet", trivial_source("quiet"), "sm_90a")
    assert capsys.readouterr().err == ""

    monkeypatch.setenv("DG_JIT_PTXAS_VERBOSE", "1")
    compiler.compile_kernel("verbose", trivial_source("verbose"), "sm_90a")
    err = capsys.readouterr().err
    assert "verbose" in err
    assert "Used" in err and "registers" in err
    assert "bytes stack frame" in err


# ---- concurrency ---------------------------------------------------------------------------------

def race_source() -> str:
    # A real kernel (cuda_bf16.h and 48 template instantiations: ~0.2 s of NVRTC), self-contained so
    # this test does not depend on the GEMM headers.
    return f"""// {_tag()}
#include <cuda_bf16.h>
template <int kStep>
__device__ __forceinline__ float mix(float x) {{
    return __bfloat162float(__float2bfloat16(x * (kStep + 1))) + kStep;
}}
template <int kStep>
__device__ __forceinline__ float chain(float x) {{
    if constexpr (kStep == 0) return x; else return chain<kStep - 1>(mix<kStep>(x));
}}
extern "C" __global__ void race(float* out) {{
    out[threadIdx.x] = chain<48>(out[threadIdx.x]);
}}
"""


_WORKER = r"""
import os, sys, time
from pathlib import Path
from dg_triton.jit import compiler

go_file, source_file, ready_dir = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
source = source_file.read_text()
(ready_dir / str(os.getpid())).touch()
while not go_file.exists():
    time.sleep(0.002)
compiled = compiler.compile_kernel("race", source, "sm_90a")
assert compiled.cubin[:4] == b"\x7fELF"
print(compiled.entry_dir)
"""


def test_concurrent_processes_compiling_one_real_kernel_all_succeed(tmp_path, monkeypatch):
    source_file = tmp_path / "kernel.cu"
    source_file.write_text(race_source())
    go_file, ready_dir = tmp_path / "go", tmp_path / "ready"
    ready_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(go_file), str(source_file),
                                 str(ready_dir)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
    deadline = time.monotonic() + 120
    # Start every compile at once: wait until each process has imported and is waiting.
    while len(list(ready_dir.iterdir())) < len(workers) and time.monotonic() < deadline:
        if any(worker.poll() is not None for worker in workers):
            break  # one died early; its stderr is reported below
        time.sleep(0.01)
    go_file.touch()
    results = [worker.communicate(timeout=max(1.0, deadline - time.monotonic())) for worker in workers]

    for worker, (_, stderr) in zip(workers, results):
        assert worker.returncode == 0, stderr
    paths = {stdout.strip() for stdout, _ in results}
    assert len(paths) == 1
    entry = Path(paths.pop())
    assert cache_entries() == [entry]
    root = Path(os.environ["DG_JIT_CACHE_DIR"])
    assert not (root / "tmp").exists() or list((root / "tmp").iterdir()) == []
    # The published entry is whole: this process finds it valid and does not rebuild it.
    cache.clear_memo()

    def no_compile(*args):
        raise AssertionError("a valid cache entry was compiled again")
    monkeypatch.setattr(compiler, "_compile_nvrtc", no_compile)
    monkeypatch.setattr(compiler, "_compile_nvcc", no_compile)
    compiled = compiler.compile_kernel("race", source_file.read_text(), "sm_90a")
    assert compiled.entry_dir == entry
    assert compiled.resources.stack_frame_bytes == 0
