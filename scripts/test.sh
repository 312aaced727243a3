#!/usr/bin/env bash
# Installs lazymlir with its test extras and runs every test: pytest, then lit.
# torch is pinned first: this machine kind has the 2.13.0 CPU build on local
# disk, and an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q torch==2.13.0
python -m pip install -q ".[test]"
# Run from tests/ so the installed package (not the checkout) is imported.
# test_training.py runs in its own process: after test_ops.py in the same
# process its MLP step graph fails in the `bufferized` stage (an order-dependent
# bug under investigation, see docs/known-issues.md); alone it passes.
(cd tests && python -m pytest -q python --deselect python/test_training.py \
   --ignore=python/test_training.py && python -m pytest -q python/test_training.py)
lit -sv tests/lit
