"""A graph entry's one long block, cut into a chain of blocks before the `llvm` stage's
conversions.

Why: after outlining (outline.py) a big graph's entry is one block of allocations,
views and calls: a DenseNet-121 training step's `main` holds ~14k ops, and the
LLVM conversions make that ~200k. The dialect conversion replaces a value's uses
only where they come after the replacement's definition (`Operation::isBeforeInBlock`),
and every op it inserts into the block can invalidate the block's op order, which is
then recomputed over the whole block: quadratic. `convert-func-to-llvm` spent 8 of its
8.5 s CPU in `Block::recomputeOpOrder` on that step; with blocks of BLOCK_OPS ops,
1.1 s (and every other conversion gets faster too).

The chain (`cf.br` to the next block, no arguments: each block dominates the rest, so
every value stays visible) is the same program: `opt` merges the blocks again, and
cpu/codegen.py compiles a long entry in blocks of calls anyway.
"""

from __future__ import annotations

# Top-level ops per block (the conversions' cost per inserted op is linear in this).
BLOCK_OPS = 256
# Ops that must stay in the entry block: LLVM allocates an `alloca` outside it
# dynamically (on every pass through it), not in the fixed frame.
_ENTRY_ONLY = ("memref.alloca",)


def split_entry_blocks(module, block_ops: int | None = None) -> int:
    """Cut each public function of `module` whose body is one block of more than
    `block_ops` (default BLOCK_OPS) ops into blocks of `block_ops` ops chained by `cf.br`
    (in place, in the module's context). Returns the number of blocks added."""
    from mlir import ir
    from mlir.dialects import cf

    block_ops = block_ops or BLOCK_OPS
    added = 0
    for func in module.body.operations:
        if func.operation.name != "func.func" or "sym_visibility" in func.attributes:
            continue  # private: outlined nests and helpers, small
        blocks = func.regions[0].blocks
        if len(blocks) != 1:
            continue  # a declaration, or control flow already
        entry = blocks[0]
        ops = list(entry.operations)
        # (the first cut comes after the last op that must stay in the entry)
        start = max([i + 1 for i, op in enumerate(ops) if op.operation.name in _ENTRY_ONLY],
                    default=0)
        cuts = list(range(max(block_ops, start), len(ops), block_ops))
        if not cuts:
            continue
        # From the last block back: each new block goes right after the entry, which
        # keeps what is not moved yet, and branches to the one made before it.
        following = None
        for first, end in reversed(list(zip(cuts, cuts[1:] + [len(ops)]))):
            block = entry.create_after()
            for op in ops[first:end]:
                op.operation.detach_from_parent()
                ir.InsertionPoint(block).insert(op.operation)
            if following is not None:
                with ir.InsertionPoint(block), func.location:
                    cf.BranchOp([], following)
            following = block
            added += 1
        with ir.InsertionPoint(entry), func.location:
            cf.BranchOp([], following)
    return added
