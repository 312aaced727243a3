"""CPU threads: the `scf.forall` loops of the CPU schedule run on all cores.

Which loops: only those the CPU strategies emit as `scf.forall` (cpu_fusion's
loops over blocks of rows, cpu_schedule's outer matmul tile loop), and only
when their work is at least `MIN_PARALLEL_ELEMENTS` results (row fusion) or
`cpu_schedule.MIN_PARALLEL_FLOPS` multiply-adds; smaller ones run in order
(`scf.for`), because handing blocks to other threads costs more than it saves
(microseconds per dispatch and wake-up, much more on a loaded machine).

How: `scf-forall-to-parallel`, then `async-parallel-for`, which outlines the
loop body and splits the iterations into blocks run as async tasks (the
calling thread takes part and waits for the group), lowered to calls into
`libmlir_async_runtime.so`. That library ships in the MLIR tools wheel this
package already depends on (next to `libmlir_c_runner_utils.so`), with a
thread pool of one worker per hardware thread.

Why not OpenMP (`convert-scf-to-openmp`): LLVM's OpenMP lowering calls the
`__kmpc_*` entry points of LLVM's libomp, which no pip package here provides
(torch ships GNU libgomp, which has no `__kmpc_*` ABI); a clean machine would
have no runtime to link. A thread pool of our own in the runtime would need
the loop bodies outlined and a calling convention: exactly what the async
passes already do.
"""

from __future__ import annotations

# Marks an scf.forall to run in order on the calling thread (work too small).
SEQUENTIAL = "lazymlir.sequential"
# Loops over fewer result elements than this stay on the calling thread.
MIN_PARALLEL_ELEMENTS = 1024 * 1024

PARALLEL_PASSES = (
    "func.func(scf-forall-to-parallel),"
    # One iteration is already a block of work (rows, a matmul tile): let the
    # pass split the iterations into as many tasks as there are workers
    # (num-workers=-1: asked from the runtime when the loop starts).
    "async-parallel-for{num-workers=-1 min-task-size=1},"
    "async-to-async-runtime,async-runtime-ref-counting,async-runtime-ref-counting-opt"
)

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

    if SEQUENTIAL not in str(module):
        return
    script = ir.Module.parse(_IN_ORDER)
    interpreter.apply_named_sequence(module.operation, script.body.operations[0], script)
