#!/usr/bin/env bash
# Installs lazymlir with its test extras and runs every test: pytest, then lit.
# torch is pinned first: this machine kind has the 2.13.0 CPU build on local
# disk, and an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q torch==2.13.0
python -m pip install -q ".[test]"
# Run from tests/ so the installed package (not the checkout) is imported.
(cd tests && python -m pytest -q python)
lit -sv tests/lit
