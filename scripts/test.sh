#!/usr/bin/env bash
# The test command (README): CPU tests, then the compile-only tests in their own pytest process
# (TOOLCHAIN.md: a process that ran Triton's interpreter cannot compile for real targets, and
# the compile tests are the slow part, so they get both cores). GPU tests (marker `gpu`) are
# skipped without an SM90 GPU; run them with scripts/gpu_check.sh on one.
# Any non-zero pytest exit fails this script, including 5 (no tests collected).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -q -p no:cacheprovider -m "not compile and not gpu" tests
python -m pytest -q -p no:cacheprovider -m compile -n 2 tests
