"""Contraction accumulators of the CPU schedule: kept in registers, started from zero.

Around the transform script, the driver (schedule.py) routes each tiled contraction's
output buffer through a cast only that op uses (isolate_accumulator), so that
upstream's hoisting keeps the accumulator in registers across the K loop, and removes
the casts afterwards (remove_casts). Where a zero fill of the output comes right
before a contraction whose K loop is whole (zero_fill_before), the hoisted reads of
the accumulator become zero vectors and the fill goes (zero_inits).
"""

from __future__ import annotations

import math

from .schedule_plan import buffer_root

ACCUMULATOR_CAST = "lazymlir.accumulator"


def isolate_accumulator(op):
    """Route a contraction's output buffer through a cast that only this op uses; returns
    the cast (None where the inputs may share the output's buffer).

    Why: upstream hoist_redundant_vector_transfers keeps the accumulator in memory
    (a load and a store of the register tile per K step) whenever the buffer it
    accesses has any view-like user anywhere in the function, as its stand-in for
    alias analysis. A matmul result that is later reshaped (an MLP loss's
    flatten, every Linear of a transformer on (batch, seq, dim)) has one. Behind
    the cast only the tile loops' own transfers use the buffer, which is what the
    hoisting then checks; the cast is removed after the schedule (`remove_casts`).
    Sound because the K loop reads only A and B, which are other buffers.
    The cast is an unregistered op: the schedule's canonicalizations fold every
    registered same-type cast away before the hoisting runs."""
    from mlir import ir

    operands = list(op.operation.operands)
    output = operands[-1]
    root = buffer_root(output)
    if any(buffer_root(value) == root for value in operands[:-1]):
        return None
    with ir.InsertionPoint(op.operation), op.operation.location:
        cast = ir.Operation.create(ACCUMULATOR_CAST, results=[output.type],
                                   operands=[output])
    op.operation.operands[len(operands) - 1] = cast.result
    return cast


def zero_fill_before(op, previous):
    """`previous` (the op right before `op` in its block, or None) if it is a
    `linalg.fill` of +0.0 into `op`'s output buffer, else None."""
    from mlir import ir

    if previous is None or previous.operation.name != "linalg.fill":
        return None
    value, output = list(previous.operation.operands)
    if output != list(op.operation.operands)[-1] or isinstance(value.owner, ir.Block) \
            or value.owner.operation.name != "arith.constant":
        return None
    constant = value.owner.operation.attributes["value"]
    if not isinstance(constant, ir.FloatAttr):
        return None
    zero = ir.FloatAttr(constant).value
    return previous if zero == 0.0 and math.copysign(1.0, zero) > 0 else None


def zero_inits(accumulators) -> None:
    """Start contractions from zero registers instead of a zero-filled output.

    torch-mlir writes `x @ w` as a fill of the output with 0 and a matmul that
    accumulates into it: a memset of the whole output (512 KB for an MLP's
    weight gradient), then one read of each register tile back before its K
    loop, in another pass over memory. For a contraction whose K loop is not
    split into cache tiles (Plan.reads_output_once), the hoisted read of each
    accumulator tile (a `vector.transfer_read` of the output that only seeds
    the K loop's `iter_args`) is replaced by a zero vector and the fill is
    erased, which is what a BLAS does with beta = 0. Where any read of the
    output is not such a seed (the hoisting did not happen), nothing changes.
    `accumulators`: (the op's accumulator cast, the fill before it)."""
    from mlir import ir
    from mlir.dialects import arith

    for cast, fill in accumulators:
        reads = []
        for use in cast.result.uses:
            user = use.owner
            if user.name == "vector.transfer_read":
                seeds = [u for u in user.result.uses
                         if u.owner.name == "scf.for" and u.operand_number >= 3]
                if len(seeds) != len(list(user.result.uses)):
                    break
                reads.append(user)
            elif user.name != "vector.transfer_write":
                break
        else:
            for read in reads:
                with ir.InsertionPoint(read), read.location:
                    zeros = arith.ConstantOp(read.result.type, ir.DenseElementsAttr.get_splat(
                        read.result.type, ir.FloatAttr.get(
                            ir.VectorType(read.result.type).element_type, 0.0)))
                read.result.replace_all_uses_with(zeros.result)
                read.erase()
            if reads:
                fill.operation.erase()


def remove_casts(casts) -> None:
    """Take the accumulator casts out again (after the script): each contraction's loops
    use its output buffer itself."""
    for cast in casts:
        cast.result.replace_all_uses_with(cast.operands[0])
        cast.erase()

