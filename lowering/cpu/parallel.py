"""CPU threads: the `scf.forall` loops of the CPU schedule run on all cores.

Which loops: only those the CPU strategies emit as `scf.forall` (fusion's
loops over blocks of rows; schedule's matmul tiles, and the outermost
loop of large elementwise ops and row reductions), and only when their work
is at least `MIN_PARALLEL_ELEMENTS` results or iterations, or
`schedule_contraction.MIN_PARALLEL_FLOPS` multiply-adds; smaller ones run in order
(`scf.for`), because handing blocks to other threads costs more than it saves.

How: `scf-forall-to-parallel`, then upstream MLIR's OpenMP path
(`convert-scf-to-openmp`: an `omp.parallel` region around an `omp.wsloop`,
translated by LLVM's OpenMPIRBuilder), which outlines the loop body and calls
the `__kmpc_*` entry points of LLVM's OpenMP runtime: a fork of the region onto
the thread team, a static schedule giving each thread one block of iterations,
a barrier at the end (the calling thread takes part and waits for the team).

Which runtime: PyTorch's own OpenMP pool (GNU libgomp), so that compiled loops
and eager kernels share one set of threads instead of two pools taking the
cores from each other (lazymlir/targets/cpu_threads.py measured why, and
implements OPENMP_ENTRY_POINTS on top of libgomp; the graphs leave them
undefined and bind to that library when they are loaded). Before, the loops ran
as tasks of MLIR's async runtime (`async-parallel-for`), a second pool.
"""

from __future__ import annotations

from ..mlir_runner import walk

# Marks an scf.forall to run in order on the calling thread (work too small).
SEQUENTIAL = "lazymlir.sequential"
# Loops over fewer result elements than this stay on the calling thread (eager's
# TensorIterator grain is 32768; waking PyTorch's pool costs microseconds while its
# threads still spin after an eager op).
MIN_PARALLEL_ELEMENTS = 64 * 1024

PARALLEL_PASSES = (
    "func.func(scf-forall-to-parallel),"
    # One iteration is already a block of work (rows, a matmul tile): the
    # static schedule gives each thread a contiguous run of them.
    "convert-scf-to-openmp"
)

# The OpenMP runtime functions the translated loops call (LLVM's libomp ABI);
# codegen refuses a graph that calls any other, and targets/cpu_threads.py
# defines exactly these.
OPENMP_ENTRY_POINTS = frozenset({
    "__kmpc_fork_call", "__kmpc_global_thread_num", "__kmpc_barrier",
    "__kmpc_for_static_init_4", "__kmpc_for_static_init_4u",
    "__kmpc_for_static_init_8", "__kmpc_for_static_init_8u", "__kmpc_for_static_fini",
})
# Arguments of a region fork the runtime forwards (OpenMPIRBuilder passes one
# struct of captures).
MAX_FORK_ARGS = 16

_IN_ORDER = """module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %loops = transform.structured.match ops{["scf.forall"]} attributes{%s} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.foreach %loops : !transform.any_op {
    ^bb0(%loop: !transform.any_op):
      %for = transform.loop.forall_to_for %loop : (!transform.any_op) -> !transform.any_op
    }
    transform.yield
  }
}
""".replace("%s", SEQUENTIAL)


def run_small_loops_in_order(module) -> None:
    """scf.forall loops marked SEQUENTIAL -> scf.for (in place, before PARALLEL_PASSES)."""
    from mlir import ir
    from mlir.dialects.transform import interpreter

    if not any(SEQUENTIAL in op.attributes for op in walk(module)):
        return
    script = ir.Module.parse(_IN_ORDER)
    interpreter.apply_named_sequence(module.operation, script.body.operations[0], script)
