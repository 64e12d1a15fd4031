"""The tuned-config file format shared by the CUDA path's heuristics overrides and the portable
path's sweeps (dg_triton/tuned_files.py), on the CPU."""
import json

import pytest

from dg_triton import portable, tuned_files
from dg_triton.heuristics import sm90
from dg_triton.paths import autotune_configs_dir


def test_document_round_trip(tmp_path):
    entries = [{"m": 1, "n": 2, "k": 3, "out_bytes": 2, "config": {"block_m": 64}, "time_us": 1.5}]
    document = tuned_files.make_document("bf16_gemm", "cuda", "sm90", "GPU", entries, about="why")
    assert {"family", "backend", "arch", "gpu", "date", "versions", "about", "entries"} <= set(document)
    path = tmp_path / "sm90" / "bf16_gemm.json"
    tuned_files.write_document(path, document)
    assert tuned_files.read_document(path, "cuda") == document
    assert tuned_files.read_document(tmp_path / "missing.json", "cuda") is None


@pytest.mark.parametrize("broken, message", [
    (lambda doc: doc.update(backend="portable"), "backend"),
    (lambda doc: doc.pop("family"), "family"),
    (lambda doc: doc["entries"][0].update(m=0), "positive"),
    (lambda doc: doc["entries"][0].update(config=[64]), "config"),
    (lambda doc: doc["entries"][0].pop("n"), "'n'"),
])
def test_malformed_documents_are_errors_naming_the_file(tmp_path, broken, message):
    document = tuned_files.make_document("bf16_gemm", "cuda", "sm90", "GPU",
                                         [{"m": 1, "n": 2, "k": 3, "config": {"block_m": 64}}])
    broken(document)
    path = tmp_path / "bf16_gemm.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=f"bf16_gemm.json.*{message}"):
        tuned_files.read_document(path, "cuda")


@pytest.mark.parametrize("family, backend", [("bf16_gemm", "cuda"), ("fp8_gemm", "cuda"),
                                             *((f"{f}_portable", "portable") for f in portable.FAMILIES)])
def test_every_shipped_sm90_file_is_in_the_one_format(family, backend):
    document = tuned_files.read_document(autotune_configs_dir() / "sm90" / f"{family}.json", backend)
    assert document is not None and document["arch"] == "sm90" and document["entries"]
    assert document["family"] == family.removesuffix("_portable")


def test_the_cuda_heuristics_read_their_overrides_from_the_shared_format():
    sm90._load_tuned_table.cache_clear()
    entry = tuned_files.read_document(autotune_configs_dir() / "sm90" / "fp8_gemm.json", "cuda")["entries"][0]
    config = sm90.tuned_fp8_config(entry["kind"], entry["m"], entry["n"], entry["k"], entry["out_bytes"],
                                   entry["num_sms"])
    assert config is not None and config.block_n == entry["config"]["block_n"]
    entry = tuned_files.read_document(autotune_configs_dir() / "sm90" / "bf16_gemm.json", "cuda")["entries"][0]
    config = sm90.tuned_config(entry["m"], entry["n"], entry["k"], entry["out_bytes"], entry["b_k_major"],
                               entry["num_sms"])
    assert config is not None and config.block_n == entry["config"]["block_n"]
