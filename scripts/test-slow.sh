#!/usr/bin/env bash
# The long tests CI leaves out (marked `slow`: real-size models, minutes each), on the
# cpu target and then on the cuda target with the emulator driver. Run it after
# scripts/test.sh has installed the package (or on any install with the test extras).
set -uo pipefail
cd "$(dirname "$0")/.."

run() {  # pytest's exit 5 (no test has the mark) is not a failure here
    (cd tests && "$@")
    local rc=$?
    [[ $rc -eq 0 || $rc -eq 5 ]] || exit $rc
}
run python -m pytest -q -m slow python
run env LAZYMLIR_TARGET=cuda LAZYMLIR_CUDA_DRIVER=emulator python -m pytest -q -m "slow and emulator" python
