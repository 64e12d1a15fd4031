"""The wheel carries the CUDA sources and tuned configs, and an installed (non-editable) package
finds them there rather than in a checkout (DESIGN.md: cuda_kernels/ and autotune_configs/ ship
inside the wheel)."""
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_non_editable_install_finds_kernel_sources_and_tuned_configs(tmp_path):
    wheel_dir, site = tmp_path / "wheel", tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(ROOT), "-w", str(wheel_dir)], check=True, capture_output=True)
    wheel = next(wheel_dir.glob("dg_triton-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for source in ROOT.glob("cuda_kernels/**/*.cuh"):
        assert f"dg_triton/_data/{source.relative_to(ROOT)}" in names
    assert "dg_triton/_data/autotune_configs/sm90/bf16_gemm.json" in names

    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                    str(wheel)], check=True, capture_output=True)
    probe = ("import dg_triton, dg_triton.paths as p\n"
             "from dg_triton.heuristics.sm90 import _tuned_table\n"
             "print(dg_triton.__file__); print(p.cuda_kernels_dir()); print(len(_tuned_table()))\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(site)},
                         check=True, capture_output=True, text=True).stdout.split("\n")
    assert out[0].startswith(str(site)), out          # the installed copy, not the checkout
    assert out[1] == str(site / "dg_triton" / "_data" / "cuda_kernels"), out
    assert int(out[2]) > 0, out                       # the tuned table was read from the wheel
