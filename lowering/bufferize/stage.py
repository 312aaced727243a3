"""The `bufferized` stage both backends share: linalg on tensors -> linalg on memrefs.

Input is linalg-on-tensors text from torch-mlir; from here on everything runs
in the upstream bindings (`mlir`), which have the LLVM backends. A backend takes
part through its `Preparation` (lowering/backend.py): how graph inputs updated in
place are bufferized, one more rewrite before bufferization, and its own choice
of pipeline for the graphs it rewrites first.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from . import buffer_copies, graph_inputs, i1_storage
from ..mlir_runner import UPSTREAM, PipelineFailure, run_pipeline
from .unique_results import copy_repeated_results

log = logging.getLogger("lazymlir.lowering.bufferize")

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

# The shared pipeline without elementwise fusion (for a backend that fuses in its
# own `Preparation.before`).
UNFUSED_BUFFERIZE_PIPELINE = BUFFERIZE_PIPELINE.replace(
    "func.func(linalg-fuse-elementwise-ops),", "", 1)


def with_empty_tensor_elimination(pipeline: str) -> str:
    """`pipeline` with eliminate-empty-tensors run right before one-shot-bufferize."""
    return pipeline.replace("one-shot-bufferize{", "eliminate-empty-tensors,"
                            "one-shot-bufferize{", 1)


@dataclass(frozen=True)
class Preparation:
    """A backend's part in the `bufferized` stage.

    in_place: how graph inputs the graph updates are bufferized
        (graph_inputs.protect_inputs): True computes into the input's buffer
        where bufferization can (and falls back to copying the update in last
        where it refuses); False never writes an input's buffer.
    before: one more rewrite of the linalg-on-tensors module before bufferization.
    choose: (text) -> (text, pipeline): the backend's own rewrite of the input
        text and the bufferization pipeline for it.
    """

    in_place: bool = True
    before: Callable | None = None
    choose: Callable[[str], tuple[str, str]] | None = None


# On a public function: how many results it had before they became out-parameters
# (the last ones of its arguments, less those dropped for in-place updates: the
# cpu target's lowering/cpu/output_signals.py numbers them).
RESULTS = "lazymlir.results"


def _mark_results(module) -> None:
    from mlir import ir

    for op in module.body.operations:
        if op.operation.name == "func.func" and "sym_visibility" not in op.attributes:
            results = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value).results
            op.attributes[RESULTS] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), len(results))


def _before_bufferize(module, in_place: bool | str, before: Callable | None) -> None:
    _mark_results(module)
    copy_repeated_results(module)
    buffer_copies.unshare_fills(module)
    graph_inputs.protect_inputs(module, in_place)
    if before is not None:
        before(module)


def to_bufferized(text: str, preparation: Preparation):
    pipeline = BUFFERIZE_PIPELINE
    if preparation.choose is not None:
        text, pipeline = preparation.choose(text)
    module = _bufferize(text, pipeline, preparation)
    with module.context:
        graph_inputs.drop_in_place_results(module)
    # LLVM 22 cannot lower i1 buffers: store bools as bytes (i1_storage).
    i1_storage.store_bools_as_bytes(module)
    return module


def _bufferize(text: str, pipeline: str, preparation: Preparation):
    before = functools.partial(_before_bufferize, in_place=preparation.in_place,
                               before=preparation.before)
    try:
        return run_pipeline(UPSTREAM, text, pipeline, before=before)
    except PipelineFailure:
        if graph_inputs.IN_PLACE not in text or not preparation.in_place:
            raise
    # Bufferization refused to materialize an in-place update in its input: the
    # update is computed aside and copied in last (graph_inputs.protect_inputs).
    log.debug("in-place updates copied into their inputs: bufferization refused to "
              "materialize them")
    return run_pipeline(UPSTREAM, text, pipeline,
                        before=functools.partial(_before_bufferize, in_place="copy",
                                                 before=preparation.before))
