"""Upstream-MLIR stages shared by both targets (`bufferized`) and the CPU ones (`loops`, `llvm`).

Input is linalg-on-tensors text from torch-mlir; from here on everything runs
in the upstream bindings (`mlir`), which have the LLVM backends.
"""

from __future__ import annotations

import functools
import logging
import re

from . import buffer_copies, graph_inputs, i1_storage
from ..cpu import fusion
from ..gpu import transpose_folding
from ..mlir_runner import UPSTREAM, PipelineFailure, run_pipeline
from .unique_results import copy_repeated_results

log = logging.getLogger("lazymlir.lowering.cpu")

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

# After cpu.fusion: its loops write their blocks of rows through
# tensor.empty slices of the result; eliminate-empty-tensors makes them
# slices of the result itself, so bufferization writes in place (no block
# temporary copied into the output).
# The insertion of a block then copies it onto itself once CSE has merged the
# two subviews: the last canonicalize drops that copy.
ROWS_BUFFERIZE_PIPELINE = BUFFERIZE_PIPELINE.replace(
    "one-shot-bufferize{", "eliminate-empty-tensors,one-shot-bufferize{", 1).replace(
    "canonicalize,cse)", "canonicalize,cse,canonicalize)")

# Contractions the CPU schedule tiles and vectorizes (cpu.schedule).
_CONTRACTION = re.compile(r"\blinalg\.(batch_)?matmul\b")
# The shared pipeline without elementwise fusion.
UNFUSED_BUFFERIZE_PIPELINE = BUFFERIZE_PIPELINE.replace(
    "func.func(linalg-fuse-elementwise-ops),", "", 1)


def _before_bufferize(module, in_place: bool | str = True) -> None:
    copy_repeated_results(module)
    buffer_copies.unshare_fills(module)
    graph_inputs.protect_inputs(module, in_place)


def _before_bufferize_cuda(module) -> None:
    _before_bufferize(module, in_place=False)
    # The matmul kernels read operands through their indexing maps: no transpose copies.
    transpose_folding.fold_transposes(module)


def to_bufferized(text: str, target: str = "cpu"):
    pipeline = BUFFERIZE_PIPELINE
    before = _before_bufferize_cuda if target == "cuda" else _before_bufferize
    if target == "cpu":
        # Row-wise graphs (softmax, layer_norm...) become one loop over blocks
        # of rows, reductions fused in (cpu.fusion); others are unchanged.
        fused = fusion.fuse_rows(text)
        if fused is not None:
            # Only then: eliminate-empty-tensors crashes on some other graphs
            # (an LSTM training step's) in these MLIR bindings.
            text, pipeline = fused, ROWS_BUFFERIZE_PIPELINE
    if target == "cpu" and graph_inputs.IN_PLACE in text \
            and "eliminate-empty-tensors" not in pipeline:
        # An in-place update (graph_inputs.py) computes straight into its input's
        # buffer only once its tensor.empty destination is replaced by that input.
        pipeline = pipeline.replace("one-shot-bufferize{", "eliminate-empty-tensors,"
                                    "one-shot-bufferize{", 1)
    module = _bufferize(text, pipeline, before)
    if target == "cpu" and len(_CONTRACTION.findall(str(module))) < \
            len(_CONTRACTION.findall(text)):
        # linalg-fuse-elementwise-ops propagated a reshape through a matmul
        # (a Linear on 3-D input) and fused its elementwise producers (a
        # LayerNorm) into the contraction: recomputed per multiply-add, in a
        # generic the schedule cannot tile (scalar loops, ~100x slower in a
        # GPT step). Such graphs are bufferized without elementwise fusion.
        module = _bufferize(text, UNFUSED_BUFFERIZE_PIPELINE, _before_bufferize)
    with module.context:
        graph_inputs.drop_in_place_results(module)
    # LLVM 22 cannot lower i1 buffers: store bools as bytes (i1_storage).
    i1_storage.store_bools_as_bytes(module)
    return module


def _bufferize(text: str, pipeline: str, before):
    try:
        return run_pipeline(UPSTREAM, text, pipeline, before=before)
    except PipelineFailure:
        if graph_inputs.IN_PLACE not in text or before is _before_bufferize_cuda:
            raise
    # Bufferization refused to materialize an in-place update in its input: the
    # update is computed aside and copied in last (graph_inputs.protect_inputs).
    log.debug("in-place updates copied into their inputs: bufferization refused to "
              "materialize them")
    return run_pipeline(UPSTREAM, text, pipeline,
                        before=functools.partial(_before_bufferize, in_place="copy"))
