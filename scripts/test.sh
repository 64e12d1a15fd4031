#!/usr/bin/env bash
# The test command (README). Three pytest processes, because a process that imported Triton with
# TRITON_INTERPRET=1 cannot compile for real targets (TOOLCHAIN.md):
#   1. CPU tests (reference math, validation, JIT cache, settings, ...);
#   2. Triton kernels under the interpreter on CPU tensors (tests/interpret, its conftest sets it);
#   3. compile-only tests (CUDA kernels through the JIT, Triton kernels via triton.compile), both cores.
# GPU tests (marker `gpu`) are skipped without an SM90 GPU; scripts/gpu_check.sh runs them on one.
# Any non-zero pytest exit fails this script, including 5 (no tests collected).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -q -p no:cacheprovider -m "not compile and not gpu" --ignore=tests/interpret tests
python -m pytest -q -p no:cacheprovider tests/interpret
python -m pytest -q -p no:cacheprovider -m compile -n 2 --ignore=tests/interpret tests
