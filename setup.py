"""Copies the top-level cuda_kernels/ and autotune_configs/ into the wheel as package data.

DESIGN.md fixes both folders at the top of the checkout; a non-editable install has no checkout,
so the build places them under dg_triton/_data/, where dg_triton.paths looks second.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA_DIRS = ("cuda_kernels", "autotune_configs")


class BuildPyWithKernelSources(build_py):
    def run(self):
        super().run()
        for name in DATA_DIRS:
            target = Path(self.build_lib) / "dg_triton" / "_data" / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(ROOT / name, target)


setup(cmdclass={"build_py": BuildPyWithKernelSources})
