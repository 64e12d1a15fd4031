"""Where the CUDA kernel sources and tuned configs are, from a checkout or an installed wheel."""
import functools
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    # Checkout (editable install, or running from the source tree) first, then the wheel's copy.
    for candidate in (_PACKAGE_DIR.parent / name, _PACKAGE_DIR / "_data" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"dg_triton: cannot find the '{name}' folder next to the package or in dg_triton/_data; "
        f"the installation is incomplete")


@functools.cache
def cuda_kernels_dir() -> Path:
    return _find("cuda_kernels")


@functools.cache
def autotune_configs_dir() -> Path:
    return _find("autotune_configs")
