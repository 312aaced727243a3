"""Upstream-MLIR stages shared by both targets (`bufferized`) and the CPU ones (`loops`, `llvm`).

Input is linalg-on-tensors text from torch-mlir; from here on everything runs
in the upstream bindings (`mlir`), which have the LLVM backends.
"""

from __future__ import annotations

import functools
import logging
import re

from . import (bf16_rounding, buffer_copies, c_interface, cpu_fusion, cpu_outline,
               cpu_parallel, cpu_schedule, graph_inputs, i1_storage, transpose_folding)
from .mlir_runner import UPSTREAM, PipelineFailure, run_pipeline
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

# After cpu_fusion: its loops write their blocks of rows through
# tensor.empty slices of the result; eliminate-empty-tensors makes them
# slices of the result itself, so bufferization writes in place (no block
# temporary copied into the output).
# The insertion of a block then copies it onto itself once CSE has merged the
# two subviews: the last canonicalize drops that copy.
ROWS_BUFFERIZE_PIPELINE = BUFFERIZE_PIPELINE.replace(
    "one-shot-bufferize{", "eliminate-empty-tensors,one-shot-bufferize{", 1).replace(
    "canonicalize,cse)", "canonicalize,cse,canonicalize)")

LOOPS_PIPELINE = (
    "builtin.module("
    # What cpu_schedule did not tile and vectorize: linalg on buffers -> scf
    # loops (LLVM's loop vectorizer takes the simple ones at -O3).
    "func.func(convert-linalg-to-loops),"
    # Temporaries get deallocations where their last use is.
    "buffer-deallocation-pipeline,convert-bufferization-to-memref,"
    "canonicalize,cse)"
)
# Then each loop nest becomes a function of its own, identical ones one function
# (cpu_outline.outline_loop_nests), and:
PARALLEL_LOOPS_PIPELINE = (
    "builtin.module("
    # The scf.forall loops (cpu_fusion, cpu_schedule: only for work large
    # enough to pay for a dispatch) run on all cores, as OpenMP regions
    # (lowering/cpu_parallel.py says how and on which threads).
    + cpu_parallel.PARALLEL_PASSES + ","
    "canonicalize,cse)"
)

LLVM_PIPELINE = (
    "builtin.module("
    # n-D vector transfers left by the schedule -> 1-D ones (unrolled).
    "func.func(convert-vector-to-scf{full-unroll=true}),"
    "lower-affine,"
    # Structured control flow -> branches, which the LLVM dialect expresses.
    "convert-scf-to-cf,"
    # Subviews/reshapes -> explicit descriptors before the memref lowering.
    "expand-strided-metadata,"
    # ...which computes subview offsets with affine.apply.
    "lower-affine,"
    # Buffers through lazymlir/targets/cpu_alloc.py's caching allocator, not malloc/free.
    "finalize-memref-to-llvm{use-generic-functions=1},"
    # fpowi/ipowi with i64 exponents (x**2 from torch) have no correct LLVM
    # intrinsic form; outline them as software loops first.
    "convert-math-to-funcs,convert-scf-to-cf,"
    # 1-D vector ops -> LLVM vector instructions (before the arith/math
    # conversions, which it also uses for vector element types). Horizontal
    # sums may reassociate (a shuffle tree, as eager's vectorized sums do):
    # only the schedule's reductions create them.
    "convert-vector-to-llvm{reassociate-fp-reductions},convert-ub-to-llvm,"
    "convert-math-to-llvm,convert-math-to-libm,convert-arith-to-llvm,convert-cf-to-llvm,"
    # The entry gets a C interface (_mlir_ciface_main) that the runtime calls
    # with one memref descriptor pointer per argument.
    "convert-func-to-llvm,convert-index-to-llvm,"
    # OpenMP regions (parallel loops) get LLVM types; mlir-translate outlines them.
    "convert-openmp-to-llvm,"
    # Casts left between the partial conversions must all cancel out.
    "reconcile-unrealized-casts)"
)


# Contractions the CPU schedule tiles and vectorizes (cpu_schedule).
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
        # of rows, reductions fused in (cpu_fusion); others are unchanged.
        fused = cpu_fusion.fuse_rows(text)
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


def _unscheduled(module) -> None:
    buffer_copies.strided_copies_to_loops(module)
    cpu_parallel.run_small_loops_in_order(module)


def _schedule(module) -> None:
    _unscheduled(module)
    cpu_schedule.apply(module)


def to_loops(text: str):
    try:
        module = run_pipeline(UPSTREAM, text, LOOPS_PIPELINE, before=_schedule)
    except cpu_schedule.ScheduleFailure as error:
        # A strategy that does not fit an op costs speed, not the graph: the
        # unscheduled pipeline lowers every linalg op to scalar loops.
        log.warning("%s; compiling this graph without tiling/vectorization", error)
        module = run_pipeline(UPSTREAM, text, LOOPS_PIPELINE, before=_unscheduled)
    # Outlined before the parallel loops become OpenMP regions, so that a parallel
    # nest repeated by every layer of a model is one function too (the regions are
    # most of a transformer graph's code).
    return run_pipeline(UPSTREAM, str(module), PARALLEL_LOOPS_PIPELINE,
                        before=cpu_outline.outline_loop_nests)


def _mark_c_interface(module) -> None:
    """The public functions (the graph; not its outlined nests) get a C interface."""
    from mlir import ir

    for op in module.body.operations:
        if op.operation.name == "func.func" and "sym_visibility" not in op.attributes:
            op.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()


def to_llvm(text: str):
    noalias: dict[str, list[int]] = {}

    def before(module) -> None:
        _mark_c_interface(module)
        noalias.update(cpu_outline.noalias_plan(module))
        # No __truncdfbf2 to link against: double -> bfloat16 goes through float.
        bf16_rounding.split_double_to_bfloat16(module)

    module = run_pipeline(UPSTREAM, text, LLVM_PIPELINE, before=before)
    cpu_outline.apply_noalias(module, noalias)
    with module.context:
        c_interface.fold_into_c_interfaces(module)
    return module
