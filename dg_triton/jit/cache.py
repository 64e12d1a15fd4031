"""The on-disk kernel cache: where compiled kernels live between processes.

This module never compiles. ``get_or_build`` hands a fresh, private directory to a build callback
(the NVCC or NVRTC front end), then publishes what the callback wrote.

Layout
------
``DG_JIT_CACHE_DIR`` (falling back to ``DJ_JIT_CACHE_DIR``, default ``~/.dg_triton``) is a
``:``-separated list of roots (API.md section 11). Look-ups search the roots front to back and the
first valid entry wins; a miss is always compiled into the **first** root. A valid entry found in a
later root (say a read-only, pre-populated one shared by a cluster) is used where it lies, not copied.
Inside each root::

    <root>/cache/kernel.<name>.<key>/   one published entry:
        kernel.cu, kernel.cubin          what the build callback wrote (kernel.cubin is required),
        [kernel.ptx, kernel.sass, ...]   optional dumps and logs,
        manifest.json                    every other file with its byte size and sha256
    <root>/tmp/<uuid4>/                  an entry being built (private to one process)
    <root>/tmp/corrupt-<uuid4>/          a corrupt entry moved aside, about to be removed

``name`` is a short kernel name reduced to ``[A-Za-z0-9_]``; ``key`` is the caller's hex digest of
everything that determines the binary (API.md section 6), so the name is only for humans.

Atomic publish
--------------
Readers must never see a half-written entry, and many processes (one per GPU, or a test suite under
xdist) may compile the same key at the same moment. So:

1. The callback writes into ``<first root>/tmp/<uuid4>/``, on the same file system as ``cache/``,
   where no reader looks.
2. ``manifest.json`` is written **last**: it is the entry's commit record. An entry whose manifest is
   missing, unparseable, or disagrees with a file's size or sha256 (a crash before the data reached the
   disk, a full disk, a truncated copy, a hand edit) is invalid and treated as a miss.
3. The files, then the directory, are fsync'ed, so that after the rename the entry's contents are
   durable, not only its name.
4. ``os.rename(tmp, final)`` publishes. On POSIX a directory rename is atomic: readers see either no
   entry or the whole one. It also fails when ``final`` already exists and is not empty, which is how a
   process learns it lost the race: if the winner's entry is valid, the loser drops its own directory
   and uses the winner's (both are built from the same key, so they are interchangeable). If the
   existing entry is invalid, it is first moved aside by another atomic rename (into ``tmp/``, so a
   reader never sees it half-deleted), removed, and the publish is retried a bounded number of times.

Validation hashes every file, so its verdict is memoized in-process, keyed by the stat (inode, size,
mtime, ctime) of ``kernel.cubin`` and ``manifest.json``: a warm process does not re-hash, yet a file
that changed on disk is checked again. ``clear_memo()`` forgets everything.
"""
import errno
import hashlib
import json
import os
import re
import shutil
import sys
import uuid
from pathlib import Path
from typing import Callable

from dg_triton.env import env_flag, get_env

MANIFEST_NAME = "manifest.json"
CUBIN_NAME = "kernel.cubin"
_MANIFEST_VERSION = 1
_DEFAULT_CACHE_DIR = "~/.dg_triton"
# Each failed attempt means another process published or moved an entry in between; with N racing
# processes a few attempts settle it. The bound only stops a pathological loop.
_MAX_PUBLISH_ATTEMPTS = 16
# Filenames are limited to 255 bytes; a 128-bit key takes 32 of them.
_MAX_NAME_LENGTH = 96
_HASH_CHUNK_BYTES = 1 << 20

# entry path -> stat signature of its cubin and manifest when it was last found valid
_valid_memo: dict[str, tuple] = {}


def cache_dirs() -> list[Path]:
    """The cache roots, in look-up order. Read from the environment on every call."""
    value = get_env("DG_JIT_CACHE_DIR")
    items = [item for item in (value or "").split(":") if item.strip()]
    if not items:
        items = [_DEFAULT_CACHE_DIR]
    return [Path(item.strip()).expanduser() for item in items]


def clear_memo() -> None:
    """Forget every memoized validation verdict (tests; or after editing the cache by hand)."""
    _valid_memo.clear()


def lookup(name: str, key: str) -> Path | None:
    """The first valid entry for (name, key) across ``cache_dirs()``, or None on a miss."""
    entry = _entry_dir_name(name, key)
    for root in cache_dirs():
        path = root / "cache" / entry
        if not path.exists():
            continue
        reason = _check_entry(path)
        if reason is None:
            return path
        _debug(f"ignoring invalid cache entry {path}: {reason}")
    return None


def get_or_build(name: str, key: str, build: Callable[[Path], None]) -> Path:
    """The valid entry for (name, key); on a miss, ``build(tmp_dir)`` writes the kernel files (at
    least ``kernel.cubin``) into an empty private directory, which is then published atomically into
    the first cache root. If ``build`` raises, nothing is left behind and the exception propagates."""
    found = lookup(name, key)
    if found is not None:
        return found

    root = cache_dirs()[0]
    tmp_root = root / "tmp"
    final_dir = root / "cache" / _entry_dir_name(name, key)
    tmp_root.mkdir(parents=True, exist_ok=True)
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = tmp_root / uuid.uuid4().hex
    tmp_dir.mkdir()
    try:
        build(tmp_dir)
        if not (tmp_dir / CUBIN_NAME).is_file():
            raise RuntimeError(f"dg_triton JIT: building kernel '{name}' wrote no {CUBIN_NAME} "
                               f"into {tmp_dir}")
        _write_manifest(tmp_dir, name, key)
        return _publish(tmp_dir, final_dir, tmp_root)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise


def _entry_dir_name(name: str, key: str) -> str:
    if not re.fullmatch(r"[0-9A-Fa-f]+", key):
        raise ValueError(f"dg_triton JIT cache: key must be a hex digest, got {key!r}")
    safe_name = re.sub(r"[^A-Za-z0-9_]", "_", name)[:_MAX_NAME_LENGTH] or "kernel"
    return f"kernel.{safe_name}.{key}"


def _publish(tmp_dir: Path, final_dir: Path, tmp_root: Path) -> Path:
    for _ in range(_MAX_PUBLISH_ATTEMPTS):
        try:
            os.rename(tmp_dir, final_dir)
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        else:
            _fsync_dir(final_dir.parent)
            _debug(f"created cache entry {final_dir}")
            return final_dir

        # Lost the race, or a corrupt entry sits in the way.
        reason = _check_entry(final_dir)
        if reason is None:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            return final_dir
        _debug(f"replacing invalid cache entry {final_dir}: {reason}")
        aside = tmp_root / f"corrupt-{uuid.uuid4().hex}"
        try:
            os.rename(final_dir, aside)
        except FileNotFoundError:
            continue  # another process moved it aside first
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            continue
        # Between our check and the move, a racing process may have replaced the corrupt entry with
        # a valid one; we then moved a valid entry aside. Harmless: ours, built from the same key, goes
        # in next; a reader in the gap sees a miss and rebuilds.
        shutil.rmtree(aside, ignore_errors=True)
    raise RuntimeError(f"dg_triton JIT cache: could not publish {final_dir} after "
                       f"{_MAX_PUBLISH_ATTEMPTS} attempts (other processes keep replacing it)")


def _write_manifest(entry_dir: Path, name: str, key: str) -> None:
    files = {}
    for path in sorted(entry_dir.rglob("*")):
        relative = path.relative_to(entry_dir).as_posix()
        if relative == MANIFEST_NAME or not path.is_file():
            continue
        _fsync_file(path)
        files[relative] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    for directory in [entry_dir, *(p for p in entry_dir.rglob("*") if p.is_dir())]:
        _fsync_dir(directory)
    manifest = {"version": _MANIFEST_VERSION, "name": name, "key": key, "files": files}
    manifest_path = entry_dir / MANIFEST_NAME
    with open(manifest_path, "w", encoding="utf-8") as stream:
        json.dump(manifest, stream, indent=1, sort_keys=True)
        stream.flush()
        os.fsync(stream.fileno())
    _fsync_dir(entry_dir)


def _check_entry(entry_dir: Path) -> str | None:
    """None when the entry is valid, else why not."""
    signature = _stat_signature(entry_dir)
    if signature is not None and _valid_memo.get(str(entry_dir)) == signature:
        return None
    reason = _validate(entry_dir)
    if reason is None and signature is not None:
        _valid_memo[str(entry_dir)] = signature
    else:
        _valid_memo.pop(str(entry_dir), None)
    return reason


def _stat_signature(entry_dir: Path) -> tuple | None:
    signature = []
    for file_name in (CUBIN_NAME, MANIFEST_NAME):
        try:
            st = os.stat(entry_dir / file_name)
        except OSError:
            return None
        signature.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(signature)


def _validate(entry_dir: Path) -> str | None:
    try:
        with open(entry_dir / MANIFEST_NAME, encoding="utf-8") as stream:
            manifest = json.load(stream)
    except FileNotFoundError:
        return f"no {MANIFEST_NAME}"
    except (OSError, ValueError) as error:
        return f"unreadable {MANIFEST_NAME} ({error})"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        return f"{MANIFEST_NAME} has no 'files' table"
    if CUBIN_NAME not in files:
        return f"{MANIFEST_NAME} does not list {CUBIN_NAME}"
    for relative, expected in files.items():
        path = entry_dir / relative
        if not isinstance(expected, dict) or ".." in Path(relative).parts or Path(relative).is_absolute():
            return f"{MANIFEST_NAME} has a malformed item {relative!r}"
        try:
            size = path.stat().st_size
            if size != expected.get("size"):
                return f"{relative} is {size} bytes, manifest says {expected.get('size')}"
            if _sha256(path) != expected.get("sha256"):
                return f"{relative} does not match its sha256"
        except OSError as error:
            return f"{relative} unreadable ({error.strerror or error})"
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    # Makes the directory's entries (new names, a rename) durable; POSIX has no other way.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _debug(message: str) -> None:
    if env_flag("DG_JIT_DEBUG"):
        print(f"dg_triton JIT cache: {message}", file=sys.stderr)
