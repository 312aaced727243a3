"""Stages run with torch-mlir's MLIR build after the FX import: `torch-backend`, `linalg`.

These stages use torch-mlir's own MLIR build (`torch_mlir.ir`), which has the
torch dialect but no NVPTX target; the handoff to the upstream bindings is
textual, which was verified to round-trip. They need no torch: the `torch` stage
(the FX import, fx_import.py) is the only front stage that does.
"""

from __future__ import annotations

from . import tmtensor, unused_results
from ..mlir_runner import TORCH_MLIR, run_pipeline

TORCH_BACKEND_PIPELINE = (
    "builtin.module("
    # Quantized custom ops are matched first, as torch-mlir's own FX path does
    # (a no-op without them).
    "func.func(torch-match-quantized-custom-ops),"
    # torch-mlir's pipeline for FX-imported programs: reach the backend
    # contract (value semantics, known dtypes/shapes, complex ops decomposed).
    "torchdynamo-export-to-torch-backend-pipeline{ extra-library=})"
)

LINALG_PIPELINE = (
    "builtin.module("
    # Backend contract -> linalg-on-tensors with arith/math/tensor. Non-finite
    # constants (-inf seeds of max reductions, masks) are legal in our graphs.
    "torch-backend-to-linalg-on-tensors-backend-pipeline{allow-non-finites=true})"
)


def to_torch_backend(text: str):
    return run_pipeline(TORCH_MLIR, text, TORCH_BACKEND_PIPELINE)


def to_linalg(text: str):
    module = run_pipeline(TORCH_MLIR, text, LINALG_PIPELINE)
    # The argmax half of every decomposed amax (softmax): unused, and it kept the
    # reduction a scalar loop on one thread (unused_results.py).
    with module.context:
        unused_results.drop_unused_results(module, TORCH_MLIR.ir)
    # TMTensor ops (scatter, scan, sort...) that only this build knows become
    # scf loops over buffers before the handoff (tmtensor.py).
    return tmtensor.to_loops(module)
