"""Upstream-MLIR stages shared by both targets (`bufferized`) and the CPU ones (`loops`, `llvm`).

Input is linalg-on-tensors text from torch-mlir; from here on everything runs
in the upstream bindings (`mlir`), which have the LLVM backends.
"""

from __future__ import annotations

from . import i1_storage
from .mlir_runner import UPSTREAM, run_pipeline
from .unique_results import copy_repeated_results

BUFFERIZE_PIPELINE = (
    "builtin.module("
    # Fuse elementwise producers into consumers while still on tensors: fewer
    # buffers and loops (kernels on CUDA), and no i1 temporaries for masks.
    "func.func(linalg-fuse-elementwise-ops),"
    # Tensors -> buffers for the whole module; function boundaries too, with
    # identity layouts so the runtime passes plain contiguous buffers.
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    # Results become out-parameters the caller allocates, so buffer ownership
    # stays with the runtime; statically shaped result allocs are hoisted.
    "buffer-results-to-out-params{modify-public-functions hoist-static-allocs},"
    # Fold the copies and casts bufferization leaves behind.
    "canonicalize,cse)"
)

LOOPS_PIPELINE = (
    "builtin.module("
    # linalg on buffers -> scf loops (the CPU target lets LLVM vectorize them).
    "func.func(convert-linalg-to-loops),"
    # Temporaries get deallocations where their last use is.
    "buffer-deallocation-pipeline,convert-bufferization-to-memref,"
    "canonicalize,cse)"
)

LLVM_PIPELINE = (
    "builtin.module("
    "lower-affine,"
    # Structured control flow -> branches, which the LLVM dialect expresses.
    "convert-scf-to-cf,"
    # Subviews/reshapes -> explicit descriptors before the memref lowering.
    "expand-strided-metadata,"
    "finalize-memref-to-llvm,"
    # fpowi/ipowi with i64 exponents (x**2 from torch) have no correct LLVM
    # intrinsic form; outline them as software loops first.
    "convert-math-to-funcs,convert-scf-to-cf,"
    "convert-math-to-llvm,convert-math-to-libm,convert-arith-to-llvm,convert-cf-to-llvm,"
    # The entry gets a C interface (_mlir_ciface_main) that the runtime calls
    # with one memref descriptor pointer per argument.
    "convert-func-to-llvm,convert-index-to-llvm,"
    # Casts left between the partial conversions must all cancel out.
    "reconcile-unrealized-casts)"
)


def to_bufferized(text: str):
    module = run_pipeline(UPSTREAM, text, BUFFERIZE_PIPELINE, before=copy_repeated_results)
    # LLVM 22 cannot lower i1 buffers: store bools as bytes (i1_storage).
    i1_storage.store_bools_as_bytes(module)
    return module


def to_loops(text: str):
    return run_pipeline(UPSTREAM, text, LOOPS_PIPELINE)


def _mark_c_interface(module) -> None:
    from mlir import ir

    for op in module.body.operations:
        if op.operation.name == "func.func":
            op.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()


def to_llvm(text: str):
    return run_pipeline(UPSTREAM, text, LLVM_PIPELINE, before=_mark_c_interface)
