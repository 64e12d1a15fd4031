"""Tuned-config files, ``autotune_configs/<arch>/<name>.json``: one format for the overrides of the
CUDA path's heuristics (``bf16_gemm.json``, ``fp8_gemm.json``, written from the sweeps of
benchmarks/bench_gemm.py) and for the portable path's sweeps (``<family>_portable.json``, written
by ``python -m dg_triton.tune``)::

    {"family": "bf16_gemm", "backend": "cuda" | "portable", "arch": "sm90", "gpu": "NVIDIA H200",
     "date": "2026-12-01T10:00:00+00:00", "versions": {"dg_triton": ..., "torch": ..., "triton": ...},
     "about": "(optional) how the entries were measured",
     "entries": [{"m": 4096, "n": 2112, "k": 7168, <the backend's other key fields>,
                  "config": {<the backend's config fields>},
                  <measurements, e.g. "time_us": 123.4, "tflops": 512.0>, "note": "(optional)"}]}

An entry is the winner of a sweep at one problem. m, n and k are part of every key; a backend adds
the fields its choice also depends on (the CUDA BF16 GEMM: ``out_bytes``, ``b_k_major``,
``num_sms``; the CUDA FP8 GEMM: ``kind``, ``out_bytes``, ``num_sms``; the portable GEMMs: none,
they take the nearest entry). Who reads a file checks its own config fields (dg_triton.portable,
dg_triton.heuristics.sm90); this module only writes documents and reads their common structure.
"""
import datetime
import json
from pathlib import Path

BACKENDS = ("cuda", "portable")


def make_document(family: str, backend: str, arch: str, gpu: str, entries: list[dict],
                  about: str | None = None, date: str | None = None, versions: dict | None = None) -> dict:
    """A tuned file's content. `entries`: dicts with m, n, k, the backend's key fields, config (a
    dict or a NamedTuple) and measurements. `date` and `versions` default to now and this process's
    (dg_triton, torch, triton, CUDA)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    rows = []
    for entry in entries:
        config = entry["config"]
        rows.append({**entry, "config": config._asdict() if hasattr(config, "_asdict") else dict(config)})
    document = {"family": family, "backend": backend, "arch": arch, "gpu": gpu,
                "date": date or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "versions": versions or _versions()}
    if about:
        document["about"] = about
    document["entries"] = rows
    return document


def _versions() -> dict:
    import torch
    import triton

    import dg_triton
    return {"dg_triton": dg_triton.__version__, "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda}


def write_document(path: Path, document: dict) -> None:
    """Writes atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, indent=1) + "\n")
    temporary.replace(path)


def read_document(path: Path, backend: str) -> dict | None:
    """The document at `path`, None if there is no file; ValueError naming the file unless it is a
    tuned file of `backend` whose entries each have positive int m, n, k and a config dict."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text())
        if document["backend"] != backend:
            raise ValueError(f"backend {document['backend']!r}, expected {backend!r}")
        document["family"]
        for index, entry in enumerate(document["entries"]):
            values = [entry[name] for name in ("m", "n", "k")]
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
                raise ValueError(f"entries[{index}]: m, n, k must be positive ints, got {values}")
            if not isinstance(entry["config"], dict):
                raise ValueError(f"entries[{index}]: config must be an object, got {entry['config']!r}")
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a {backend} tuned file ({type(error).__name__}: {error})") from None
    return document
