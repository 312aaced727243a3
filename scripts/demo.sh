#!/usr/bin/env bash
# Installs lazymlir and trains a small MLP on the lazy_mlir device (CPU target).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q torch==2.13.0
python -m pip install -q .
cd /tmp && python -m lazymlir.demo
