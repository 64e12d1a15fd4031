"""Config choice of the portable Triton GEMMs (dg_triton/portable.py) and the sweep's helpers
(dg_triton/tune.py), on the CPU: tuned-file round trip, nearest-bucket look-up, defaults."""
import json

import pytest
import torch

from dg_triton import portable, tune
from dg_triton.portable import PortableGemmConfig

CONFIG_A = PortableGemmConfig(128, 128, 128, 8, 8, 3)
CONFIG_B = PortableGemmConfig(16, 64, 128, 8, 4, 4)
CONFIG_C = PortableGemmConfig(64, 256, 128, 8, 8, 3)


def _entries():
    return [{"m": 4096, "n": 2112, "k": 7168, "config": CONFIG_A, "time_us": 100.0, "tflops": 1.0},
            {"m": 1, "n": 2112, "k": 7168, "config": CONFIG_B, "time_us": 10.0, "tflops": 1.0},
            {"m": 4096, "n": 24576, "k": 1536, "config": CONFIG_C, "time_us": 90.0, "tflops": 1.0}]


def test_tuned_file_round_trip(tmp_path):
    document = portable.make_tuned_document(portable.FP8_GEMM_1D2D, "sm90", "NVIDIA H200", _entries())
    path = portable.tuned_file_path("sm90", portable.FP8_GEMM_1D2D, tmp_path)
    assert path == tmp_path / "sm90" / "fp8_gemm_1d2d_portable.json"
    portable.write_tuned_file(path, document)
    stored = json.loads(path.read_text())
    assert stored["gpu"] == "NVIDIA H200" and stored["backend"] == "portable" and stored["arch"] == "sm90"
    assert {"dg_triton", "torch", "triton"} <= set(stored["versions"]) and stored["date"]
    assert stored["entries"][0]["time_us"] == 100.0
    assert portable.read_tuned_file(path) == [((4096, 2112, 7168), CONFIG_A), ((1, 2112, 7168), CONFIG_B),
                                              ((4096, 24576, 1536), CONFIG_C)]
    assert not list(path.parent.glob("*.tmp"))


def test_missing_tuned_file_has_no_entries(tmp_path):
    assert portable.read_tuned_file(tmp_path / "sm80" / "bf16_gemm_portable.json") == []


@pytest.mark.parametrize("broken", [
    lambda doc: doc["entries"][0]["config"].update(block_m=96),       # not a power of two
    lambda doc: doc["entries"][0]["config"].update(block_k=64),       # FP8 steps K by 128
    lambda doc: doc["entries"][0].pop("k"),
    lambda doc: doc["entries"][0]["config"].update(colour="red"),
])
def test_malformed_tuned_file_is_an_error_naming_it(tmp_path, broken):
    document = portable.make_tuned_document(portable.FP8_GEMM_1D2D, "sm90", "GPU", _entries())
    broken(document)
    path = tmp_path / "sm90" / "fp8_gemm_1d2d_portable.json"
    portable.write_tuned_file(path, document)
    with pytest.raises(ValueError, match="fp8_gemm_1d2d_portable.json"):
        portable.read_tuned_file(path)


@pytest.mark.parametrize("shape, expected", [
    ((4096, 2112, 7168), CONFIG_A),    # exact
    ((3000, 2112, 7168), CONFIG_A),    # nearest M
    ((2, 2112, 7168), CONFIG_B),
    ((64, 2112, 7168), CONFIG_B),      # decode M takes decode entries (M=1), however far
    ((256, 2112, 7168), CONFIG_B),
    ((512, 2112, 7168), CONFIG_A),     # the M=4096 entry; the M=1 one (9 octaves away) is decode
    ((300, 64, 64), CONFIG_A),         # past DECODE_MAX_M: never the M=1 entry
    ((4096, 16384, 2048), CONFIG_C),   # nearest (N, K)
])
def test_nearest_bucket(shape, expected):
    entries = [((e["m"], e["n"], e["k"]), e["config"]) for e in _entries()]
    assert portable.nearest_entry(entries, *shape) == expected


def test_nearest_bucket_without_entries_is_none():
    assert portable.nearest_entry([], 1, 2, 3) is None


def test_nearest_bucket_crosses_the_decode_boundary_only_without_entries_on_its_side():
    only_decode = [((1, 2112, 7168), CONFIG_B)]
    assert portable.nearest_entry(only_decode, 4096, 2112, 7168) == CONFIG_B


def test_choose_config_reads_the_tuned_file_of_the_arch_and_falls_back_to_defaults(monkeypatch, tmp_path):
    portable.write_tuned_file(portable.tuned_file_path("sm90", portable.BF16_GEMM, tmp_path),
                              portable.make_tuned_document(portable.BF16_GEMM, "sm90", "GPU", [
                                  {"m": 4096, "n": 4096, "k": 4096,
                                   "config": PortableGemmConfig(128, 64, 32, 4, 4, 2)}]))
    monkeypatch.setattr(portable, "tuned_file_path",
                        lambda arch, family, root=None: tmp_path / arch / f"{family}_portable.json")
    capabilities = {0: (9, 0), 1: (8, 0)}
    monkeypatch.setattr(portable, "device_capability", lambda device: capabilities[device.index])
    monkeypatch.setattr(portable, "_shared_memory_bytes", lambda device: 163 * 1024)
    portable.clear_caches()
    try:
        tuned = portable.choose_config(portable.BF16_GEMM, 2048, 4096, 4096, torch.device("cuda", 0))
        assert tuned == PortableGemmConfig(128, 64, 32, 4, 4, 2)
        untuned = portable.choose_config(portable.BF16_GEMM, 2048, 4096, 4096, torch.device("cuda", 1))
        assert untuned == portable.default_config(portable.BF16_GEMM, 2048, (8, 0), 163 * 1024)
        fp8 = portable.choose_config(portable.FP8_GEMM_1D2D, 2048, 4096, 4096, torch.device("cuda", 0))
        assert fp8 == portable.default_config(portable.FP8_GEMM_1D2D, 2048, (9, 0), 163 * 1024)
    finally:
        portable.clear_caches()


@pytest.mark.parametrize("family", portable.FAMILIES)
@pytest.mark.parametrize("capability, shared_memory", [((9, 0), 227 * 1024), ((10, 0), 227 * 1024),
                                                       ((8, 0), 163 * 1024), ((8, 9), 99 * 1024),
                                                       ((12, 0), 99 * 1024)])
def test_defaults_are_valid_and_fit_in_shared_memory(family, capability, shared_memory):
    for m in (1, 32, 64, 128, 4096):
        config = portable.check_config(family, portable.default_config(family, m, capability, shared_memory))
        element = 2 if family == portable.BF16_GEMM else 1
        stage_bytes = (config.block_m + config.block_n) * config.block_k * element
        assert config.num_stages >= 2 and config.num_stages * stage_bytes <= shared_memory


@pytest.mark.parametrize("family", portable.FAMILIES)
def test_sweep_candidates_are_valid_and_fit(family):
    element = 2 if family == portable.BF16_GEMM else 1
    for m, k in ((1, 7168), (128, 512), (128, 16384), (4096, 7168)):
        configs = tune.candidates(family, m, k, 227 * 1024)
        # A family's sweep over its default shapes must stay within minutes (issue 6: < 10).
        assert configs and len(configs) <= 180
        for config in configs:
            portable.check_config(family, config)
            stage_bytes = (config.block_m + config.block_n) * config.block_k * element
            assert config.num_stages * stage_bytes <= 227 * 1024
            # split-K only where the output tiles are few, and every slice keeps 2+ K blocks
            assert config.split_k == 1 or (m <= 256 and k // config.block_k >= 2 * config.split_k)
        assert (m <= 256) == any(config.split_k > 1 for config in configs)


def test_default_shapes_are_the_api_shapes():
    bf16 = tune.default_shapes(portable.BF16_GEMM)
    # forward 4 M x 9 (N, K), dgrad 9, wgrad 9 of which (4096, 4096, 7168) is also a forward shape
    assert len(bf16) == len(set(bf16)) == 36 + 9 + 8
    assert {(4096, 129280, 7168), (4096, 7168, 129280), (129280, 4096, 7168)} <= set(bf16)
    fp8 = tune.default_shapes(portable.FP8_GEMM_1D2D)
    assert len(fp8) == 28 + 7 and (64, 2112, 7168) in fp8 and (4096, 7168, 2112) in fp8
    assert tune.default_shapes(portable.FP8_GEMM_1D1D) == [(n, 4096, k) for n, k in tune.DEFAULT_NK]


def test_config_name():
    assert portable.config_name(PortableGemmConfig(64, 128, 128, 8, 4, 3)) == "64x128x128w4s3"
    assert portable.config_name(PortableGemmConfig(64, 128, 128, 8, 4, 3, 4)) == "64x128x128w4s3k4"


def test_split_k_is_checked():
    portable.check_config(portable.BF16_GEMM, PortableGemmConfig(64, 128, 64, 8, 4, 3, portable.MAX_SPLIT_K))
    for bad in (0, portable.MAX_SPLIT_K + 1):
        with pytest.raises(ValueError, match="split_k"):
            portable.check_config(portable.BF16_GEMM, PortableGemmConfig(64, 128, 64, 8, 4, 3, bad))


def test_shape_argument():
    assert tune.parse_shape("4096x2112x7168") == (4096, 2112, 7168)
    for bad in ("4096x2112", "ax1x1", "0x1x1"):
        with pytest.raises(Exception, match="MxNxK|positive"):
            tune.parse_shape(bad)


def test_tune_without_a_gpu_says_so(capsys):
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    assert tune.main(["bf16_gemm", "--shapes", "128x128x128"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def _fake_gpu(monkeypatch):
    """The device queries tune.sweep makes, answered as an H200 would (the timings are faked by
    the tests themselves)."""
    import types

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda *a: types.SimpleNamespace(shared_memory_per_block_optin=227 * 1024))
    monkeypatch.setattr(portable, "device_capability", lambda device: (9, 0))


def test_sweep_logic_with_a_fake_gpu(monkeypatch, tmp_path):
    """tune.sweep end to end with the GPU parts faked: a cost model stands in for the timings. The
    cheapest candidate wins, spilling candidates are skipped, the winner's group size is refined,
    the file is written in the tuned-file format and keeps other shapes' entries."""
    import types

    from dg_triton import testing

    def cost(config):  # favours 64x128 tiles, 3 stages, no split, group 16
        return (abs(config.block_m - 64) + abs(config.block_n - 128) + config.num_stages
                + config.split_k + abs(config.group_m - 16) / 8)

    spilling = PortableGemmConfig(64, 32, 128, 8, 4, 3)
    runs = []

    def fake_problem(family, m, n, k):
        def run(config):
            runs.append(config)
            return types.SimpleNamespace(n_spills=5 if config == spilling else 0)
        return run, lambda: 0.0

    monkeypatch.setattr(tune, "_problem", fake_problem)
    monkeypatch.setattr(testing, "bench_graph", lambda fn, **kw: (fn(), cost(runs[-1]))[1])
    _fake_gpu(monkeypatch)
    path = portable.tuned_file_path("sm90", portable.FP8_GEMM_1D2D, tmp_path)
    portable.write_tuned_file(path, portable.make_tuned_document(
        portable.FP8_GEMM_1D2D, "sm90", "Fake GPU", [{"m": 7, "n": 8, "k": 9, "config": CONFIG_B}]))
    try:
        tune.sweep(portable.FP8_GEMM_1D2D, [(4096, 2112, 7168), (64, 576, 7168)], tmp_path, rep_ms=1)
        entries = dict(portable.read_tuned_file(path))
    finally:
        portable.clear_caches()
    assert spilling in runs and entries[7, 8, 9] == CONFIG_B
    assert entries[4096, 2112, 7168] == PortableGemmConfig(64, 128, 128, 16, 4, 3)
    # one tile row at M = 64: no group-size refinement
    assert entries[64, 576, 7168] == PortableGemmConfig(64, 128, 128, 8, 4, 3)


def test_an_interrupted_sweep_keeps_the_entries_it_did_not_reach(monkeypatch, tmp_path):
    import types

    from dg_triton import testing

    calls = []

    def fake_problem(family, m, n, k):
        if (m, n, k) == (128, 576, 7168):
            raise KeyboardInterrupt  # the second shape never finishes
        return (lambda config: calls.append(config) or types.SimpleNamespace(n_spills=0)), lambda: 0.0

    monkeypatch.setattr(tune, "_problem", fake_problem)
    monkeypatch.setattr(testing, "bench_graph", lambda fn, **kw: (fn(), 1.0)[1])
    _fake_gpu(monkeypatch)
    path = portable.tuned_file_path("sm90", portable.FP8_GEMM_1D2D, tmp_path)
    old = [{"m": 64, "n": 2112, "k": 7168, "config": CONFIG_B}, {"m": 128, "n": 576, "k": 7168, "config": CONFIG_B},
           {"m": 7, "n": 8, "k": 9, "config": CONFIG_C}]
    portable.write_tuned_file(path, portable.make_tuned_document(portable.FP8_GEMM_1D2D, "sm90", "Fake GPU", old))
    with pytest.raises(KeyboardInterrupt):
        tune.sweep(portable.FP8_GEMM_1D2D, [(64, 2112, 7168), (128, 576, 7168)], tmp_path, rep_ms=1)
    entries = dict(portable.read_tuned_file(path))
    portable.clear_caches()
    assert set(entries) == {(64, 2112, 7168), (128, 576, 7168), (7, 8, 9)}
    assert entries[64, 2112, 7168] == calls[0]               # re-measured (every candidate tied)
    assert entries[128, 576, 7168] == CONFIG_B and entries[7, 8, 9] == CONFIG_C   # untouched


def test_accumulating_calls_halve_tiles_that_hold_too_much_per_thread():
    wide = PortableGemmConfig(256, 128, 64, 8, 8, 4)
    assert portable.config_for_accumulation(wide) == PortableGemmConfig(128, 128, 64, 8, 8, 4)
    assert portable.config_for_accumulation(CONFIG_A) == CONFIG_A      # 128 x 128 on 8 warps: 64 each
    assert portable.config_for_accumulation(CONFIG_B) == CONFIG_B
