"""Deallocation of a CPU graph's temporaries, without the upstream pipeline where the
graph is straight-line code.

A bufferized graph allocates its temporaries (`memref.alloc`) in its function's one
block and returns nothing (its outputs are buffers it is given). Upstream's
`buffer-deallocation-pipeline` then frees every temporary at the block's end, one
`memref.dealloc` per allocation in the order they were made, but only after ownership
analysis, one `bufferization.dealloc` of every temporary, its simplification (which
checks the temporaries pairwise for aliasing: quadratic, 4.8 of the pipeline's ~9 s
of CPU on the 1768 temporaries of a DenseNet-121 training step) and three
canonicalizations. Where the whole module has that shape, `free_at_end` writes the
same deallocations directly; any other shape (an allocation inside a loop or branch,
a function with several blocks, a memref returned or made by an op that is not an
allocation or a view) keeps the upstream pipeline (stages.to_loops).
"""

from __future__ import annotations

from ..mlir_runner import walk

# Ops whose memref result is a new buffer of the function's (freed at its end), a buffer
# nobody frees, or a view of another memref (freed with it).
_ALLOCATIONS = frozenset({"memref.alloc"})
_UNOWNED = frozenset({"memref.alloca", "memref.get_global"})
VIEWS = frozenset({"memref.subview", "memref.expand_shape", "memref.collapse_shape",
                    "memref.reinterpret_cast", "memref.cast", "memref.view",
                    "memref.transpose"})
_KNOWN = _ALLOCATIONS | _UNOWNED | VIEWS


def _plan(module) -> dict | None:
    """{function's block: its allocations in order}, or None if some op of the module
    makes the upstream pipeline needed."""
    from mlir import ir

    plan: dict = {}
    for op in walk(module.operation):
        name = op.name
        if name == "func.func":
            blocks = list(op.regions[0].blocks)
            if len(blocks) > 1:
                return None
            if blocks:
                plan[blocks[0]] = []
            continue
        # (a deallocation already there: freeing its buffer again at the end would be a
        # double free)
        if name.startswith("bufferization.") or name in ("memref.realloc", "memref.dealloc"):
            return None
        if name in _ALLOCATIONS:
            block = op.block
            parent = block.owner
            if parent is None or parent.operation.name != "func.func" or block not in plan:
                return None  # in a loop or branch: freed inside it upstream
            plan[block].append(op)
            continue
        if name in _KNOWN:
            continue
        # Any other op that returns a memref (a call, a loop carrying one) or returns
        # one from the function: ownership the upstream analysis has to decide.
        if name == "func.return":
            if any(isinstance(value.type, ir.MemRefType) for value in op.operands):
                return None
            continue
        for result in op.results:
            if isinstance(result.type, ir.MemRefType):
                return None
    return plan


def free_at_end(module) -> bool:
    """Frees every temporary of `module`'s functions at the end of its function (a
    `memref.dealloc` before the return, in allocation order) and returns True, when the
    whole module has the shape described above; otherwise changes nothing, False."""
    from mlir import ir
    from mlir.dialects import memref

    plan = _plan(module)
    if plan is None:
        return False
    with module.context:
        for block, allocations in plan.items():
            if not allocations:
                continue
            operations = block.operations
            terminator = operations[len(operations) - 1]
            with ir.InsertionPoint(terminator), terminator.location:
                for alloc in allocations:
                    memref.DeallocOp(alloc.results[0])
    return True
