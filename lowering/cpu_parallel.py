"""CPU threads: the `scf.forall` loops of the CPU schedule run on all cores.

Which loops: only those the CPU strategies emit as `scf.forall` (cpu_fusion's
loops over blocks of rows, cpu_schedule's outer matmul tile loop), and only
when their work is at least `MIN_PARALLEL_ELEMENTS` results; smaller ones are
plain `scf.for` loops, because handing blocks to other threads costs more
than it saves (a few microseconds per dispatch and wake-up).

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

# Loops over fewer result elements than this stay on the calling thread.
MIN_PARALLEL_ELEMENTS = 256 * 1024

PARALLEL_PASSES = (
    "func.func(scf-forall-to-parallel),"
    # One iteration is already a block of work (rows, a matmul tile): let the
    # pass split the iterations into as many tasks as there are workers
    # (num-workers=-1: asked from the runtime when the loop starts).
    "async-parallel-for{num-workers=-1 min-task-size=1},"
    "async-to-async-runtime,async-runtime-ref-counting,async-runtime-ref-counting-opt"
)
