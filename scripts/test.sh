#!/usr/bin/env bash
# Installs lazymlir with its test extras and runs every test: pytest, then lit.
# torch is pinned first: this machine kind has the 2.13.0 CPU build on local
# disk, and an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q torch==2.13.0
python -m pip install -q ".[test]"
# Run from tests/ so the installed package (not the checkout) is imported. Tests marked
# `slow` (real-size models, minutes each) are left to scripts/test-slow.sh, which a
# nightly-style job runs; everything else runs here.
(cd tests && python -m pytest -q -m "not slow" --durations=30 python)
# The cuda target again, with every kernel executed on the CPU by the runtime's emulator
# driver (docs/cuda_runtime.md): the device suites marked `emulator` must give eager's
# results there too (kernels run one CPU thread at a time, so the mark leaves out tests
# whose ops a faster test runs, and tests that run the cpu target whatever the environment).
(cd tests && LAZYMLIR_TARGET=cuda LAZYMLIR_CUDA_DRIVER=emulator python -m pytest -q -m "emulator and not slow" python)
lit -sv tests/lit
