"""The on-disk JIT cache (dg_triton/jit/cache.py): CPU only, builds write fake bytes."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dg_triton.jit import cache

REPO_ROOT = Path(__file__).resolve().parent.parent
NAME = "fp8_gemm_nt"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    monkeypatch.delenv("DG_JIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("DJ_JIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("DG_JIT_DEBUG", raising=False)
    monkeypatch.delenv("DJ_JIT_DEBUG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cache.clear_memo()
    yield
    cache.clear_memo()


def fresh_key() -> str:
    return os.urandom(16).hex()


class FakeBuild:
    """Writes a random cubin and a source, and counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, out_dir: Path) -> None:
        self.calls += 1
        (out_dir / "kernel.cu").write_text(f"// fake kernel, build {self.calls}\n")
        (out_dir / "kernel.cubin").write_bytes(os.urandom(4096 + self.calls))
        (out_dir / "ptxas.log").write_text("ptxas info: 0 bytes stack frame\n")


def entry_dirs(root: Path) -> list[Path]:
    cache_dir = root / "cache"
    return sorted(cache_dir.iterdir()) if cache_dir.exists() else []


def tmp_items(root: Path) -> list[Path]:
    tmp_dir = root / "tmp"
    return sorted(tmp_dir.iterdir()) if tmp_dir.exists() else []


def test_hit_after_build_does_not_call_build_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "c"))
    build, key = FakeBuild(), fresh_key()
    first = cache.get_or_build(NAME, key, build)
    assert first == tmp_path / "c" / "cache" / f"kernel.{NAME}.{key}"
    manifest = json.loads((first / "manifest.json").read_text())
    assert set(manifest["files"]) == {"kernel.cu", "kernel.cubin", "ptxas.log"}
    assert manifest["files"]["kernel.cubin"]["size"] == (first / "kernel.cubin").stat().st_size

    assert cache.get_or_build(NAME, key, build) == first
    cache.clear_memo()
    assert cache.get_or_build(NAME, key, build) == first
    assert cache.lookup(NAME, key) == first
    assert build.calls == 1
    assert tmp_items(tmp_path / "c") == []


def test_name_is_sanitized_and_key_must_be_hex(tmp_path, monkeypatch):
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "c"))
    key = fresh_key()
    path = cache.get_or_build("../evil name/x", key, FakeBuild())
    assert path.parent == tmp_path / "c" / "cache"
    assert path.name == f"kernel.___evil_name_x.{key}"
    with pytest.raises(ValueError, match="hex digest"):
        cache.lookup(NAME, "../../etc")


def test_entry_only_in_second_dir_is_found_and_used_in_place(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    key = fresh_key()
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(second))
    in_second = cache.get_or_build(NAME, key, FakeBuild())

    monkeypatch.setenv("DG_JIT_CACHE_DIR", f"{first}:{second}")
    build = FakeBuild()
    assert cache.lookup(NAME, key) == in_second
    assert cache.get_or_build(NAME, key, build) == in_second
    assert build.calls == 0
    assert entry_dirs(first) == []


def test_miss_compiles_into_first_dir(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", f"{first}:{second}")
    key = fresh_key()
    path = cache.get_or_build(NAME, key, FakeBuild())
    assert path.parent == first / "cache"
    assert entry_dirs(second) == []


def test_empty_items_in_dir_list_are_ignored(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", f"::{first}::{second}:")
    assert cache.cache_dirs() == [first, second]
    path = cache.get_or_build(NAME, fresh_key(), FakeBuild())
    assert path.parent == first / "cache"
    assert entry_dirs(second) == []


def test_default_dir_is_under_home(tmp_path):
    assert cache.cache_dirs() == [tmp_path / "home" / ".dg_triton"]


def test_dj_fallback_is_used_and_dg_wins(tmp_path, monkeypatch):
    dj, dg = tmp_path / "dj", tmp_path / "dg"
    monkeypatch.setenv("DJ_JIT_CACHE_DIR", str(dj))
    assert cache.cache_dirs() == [dj]
    assert cache.get_or_build(NAME, fresh_key(), FakeBuild()).parent == dj / "cache"

    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(dg))
    assert cache.cache_dirs() == [dg]
    assert cache.get_or_build(NAME, fresh_key(), FakeBuild()).parent == dg / "cache"


def _truncate_cubin(entry: Path) -> None:
    cubin = entry / "kernel.cubin"
    data = cubin.read_bytes()
    cubin.write_bytes(data[: len(data) // 2])


def _delete_manifest(entry: Path) -> None:
    (entry / "manifest.json").unlink()


def _garble_manifest(entry: Path) -> None:
    (entry / "manifest.json").write_text("{not json at all")


def _flip_cubin_byte(entry: Path) -> None:
    # Same size, so only the sha256 can tell.
    cubin = entry / "kernel.cubin"
    data = bytearray(cubin.read_bytes())
    data[0] ^= 0xFF
    cubin.write_bytes(bytes(data))


@pytest.mark.parametrize("corrupt", [_truncate_cubin, _delete_manifest, _garble_manifest,
                                     _flip_cubin_byte])
def test_corrupt_entry_is_detected_and_rebuilt(tmp_path, monkeypatch, capsys, corrupt):
    root = tmp_path / "c"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(root))
    build, key = FakeBuild(), fresh_key()
    entry = cache.get_or_build(NAME, key, build)
    assert cache.lookup(NAME, key) == entry  # warm the memo: corruption must still be noticed

    corrupt(entry)
    monkeypatch.setenv("DG_JIT_DEBUG", "1")
    assert cache.lookup(NAME, key) is None
    assert "invalid cache entry" in capsys.readouterr().err

    assert cache.get_or_build(NAME, key, build) == entry
    assert build.calls == 2
    assert cache.lookup(NAME, key) == entry
    assert (entry / "kernel.cu").read_text() == "// fake kernel, build 2\n"
    assert entry_dirs(root) == [entry]
    assert tmp_items(root) == []


def test_corrupt_first_dir_entry_falls_through_to_valid_second(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    key = fresh_key()
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(first))
    _truncate_cubin(cache.get_or_build(NAME, key, FakeBuild()))
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(second))
    good = cache.get_or_build(NAME, key, FakeBuild())
    monkeypatch.setenv("DG_JIT_CACHE_DIR", f"{first}:{second}")
    assert cache.lookup(NAME, key) == good


def test_build_that_raises_leaves_nothing_behind(tmp_path, monkeypatch):
    root = tmp_path / "c"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(root))

    def failing_build(out_dir: Path) -> None:
        (out_dir / "kernel.cu").write_text("// half done\n")
        raise RuntimeError("nvcc exploded")

    key = fresh_key()
    with pytest.raises(RuntimeError, match="nvcc exploded"):
        cache.get_or_build(NAME, key, failing_build)
    assert tmp_items(root) == []
    assert entry_dirs(root) == []
    assert cache.lookup(NAME, key) is None


def test_build_without_cubin_is_an_error(tmp_path, monkeypatch):
    root = tmp_path / "c"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(root))
    with pytest.raises(RuntimeError, match="kernel.cubin"):
        cache.get_or_build(NAME, fresh_key(), lambda out: (out / "kernel.cu").write_text("x"))
    assert tmp_items(root) == [] and entry_dirs(root) == []


_WORKER = r"""
import os, sys, time
from pathlib import Path
from dg_triton.jit import cache

go_file, name, key = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
while not go_file.exists():
    time.sleep(0.002)

def build(out_dir):
    time.sleep(0.2)  # long enough that every process is compiling at once
    (out_dir / "kernel.cu").write_text("// deterministic\n")
    (out_dir / "kernel.cubin").write_bytes(bytes(range(256)) * 64)

print(cache.get_or_build(name, key, build))
"""


@pytest.mark.parametrize("start_corrupt", [False, True], ids=["empty", "corrupt_entry_present"])
def test_concurrent_processes_building_same_key_all_succeed(tmp_path, monkeypatch, start_corrupt):
    root = tmp_path / "c"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(root))
    key = fresh_key()
    if start_corrupt:
        _garble_manifest(cache.get_or_build(NAME, key, FakeBuild()))

    go_file = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(go_file), NAME, key],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(8)]
    time.sleep(0.5)  # let the interpreters start and reach the wait loop
    go_file.touch()
    results = [worker.communicate(timeout=60) for worker in workers]

    for worker, (_, stderr) in zip(workers, results):
        assert worker.returncode == 0, stderr
    paths = {stdout.strip() for stdout, _ in results}
    expected = root / "cache" / f"kernel.{NAME}.{key}"
    assert paths == {str(expected)}
    assert entry_dirs(root) == [expected]
    assert tmp_items(root) == []
    cache.clear_memo()
    assert cache.lookup(NAME, key) == expected
    assert (expected / "kernel.cubin").read_bytes() == bytes(range(256)) * 64
