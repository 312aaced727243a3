"""The cpu backend: `bufferized` -> `loops` -> `llvm`, packaged as `executable.so`."""

from __future__ import annotations

from . import contractions, fusion, stages
from ..backend import Backend, Stage, final_text
from ..bufferize import graph_inputs
from ..bufferize.stage import UNFUSED_BUFFERIZE_PIPELINE, Preparation, with_empty_tensor_elimination
from ..contracts import DialectContract
from .codegen import SO_NAME, build_shared_object

# Elementwise fusion runs before these pipelines, as the preparation's rewrite that
# keeps contractions named ops (contractions.py).
CPU_BUFFERIZE_PIPELINE = UNFUSED_BUFFERIZE_PIPELINE

# After cpu.fusion: its loops write their blocks of rows through
# tensor.empty slices of the result; eliminate-empty-tensors makes them
# slices of the result itself, so bufferization writes in place (no block
# temporary copied into the output).
# The insertion of a block then copies it onto itself once CSE has merged the
# two subviews: the last canonicalize drops that copy.
ROWS_BUFFERIZE_PIPELINE = with_empty_tensor_elimination(CPU_BUFFERIZE_PIPELINE).replace(
    "canonicalize,cse)", "canonicalize,cse,canonicalize)")


def _choose_pipeline(text: str) -> tuple[str, str]:
    pipeline = CPU_BUFFERIZE_PIPELINE
    # Row-wise graphs (softmax, layer_norm...) become one loop over blocks
    # of rows, reductions fused in (fusion.py); others are unchanged.
    fused = fusion.fuse_rows(text)
    if fused is not None:
        # Only then: eliminate-empty-tensors crashes on some other graphs
        # (an LSTM training step's) in these MLIR bindings.
        text, pipeline = fused, ROWS_BUFFERIZE_PIPELINE
    if graph_inputs.IN_PLACE in text and "eliminate-empty-tensors" not in pipeline:
        # An in-place update (graph_inputs.py) computes straight into its input's
        # buffer only once its tensor.empty destination is replaced by that input.
        pipeline = with_empty_tensor_elimination(pipeline)
    return text, pipeline


def package(final, directory, object_cache=None, **_options) -> dict:
    """`executable.so` from the llvm stage: its module when the stage ran in this process
    (translated without printing and parsing it again), else its text. `object_cache`:
    a folder of loop nests' object code shared with other graphs (codegen.py)."""
    module = getattr(final, "module", None)
    build_shared_object(module if module is not None else final_text(final), directory,
                        object_cache)
    return {"files": [SO_NAME]}


BACKEND = Backend(
    target="cpu",
    stages=(
        Stage("loops", "mlir", lambda t, o: stages.to_loops(t), "CPU: scf loops over memrefs",
              # vector: what schedule.py tiled and vectorized; omp: the parallel loops
              # (parallel.py) as OpenMP regions. llvm.inline_asm: MLIR's AVX2 transpose
              # lowering (isa.py) writes its blends as inline assembly, so that LLVM
              # keeps the instruction it chose.
              DialectContract(frozenset({"builtin", "func", "memref", "arith", "math", "scf",
                                         "cf", "affine", "ml_program", "vector", "ub",
                                         "omp"}),
                              ops=frozenset({"llvm.inline_asm", *stages.COMPLEX_PARTS}))),
        Stage("llvm", "mlir", lambda t, o: stages.to_llvm(t),
              "CPU: LLVM dialect, ready for mlir-translate + llc (lowering/cpu/codegen.py)",
              DialectContract(frozenset({"builtin", "llvm", "omp"}))),
    ),
    bufferize=Preparation(in_place=True, choose=_choose_pipeline,
                          before=contractions.fuse_elementwise),
    package=package,
    probe_stop="llvm",
)
