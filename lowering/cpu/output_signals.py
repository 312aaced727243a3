"""Signals from a graph's code as each of its outputs becomes final (end of the `loops`
stage).

A graph launched by `mark_step()` runs on the background thread (targets/
cpu_background.py). A read of one of its outputs, typically a training step's loss
read right after `mark_step()`, would otherwise wait for the whole graph: the step's
backward and optimizer update too, during which the user's thread could already trace
the next step. So the graph's public function calls `lazymlir_output_ready(k)` right
after the last op that touches its out-parameter k (or a view of it): from there on
nothing writes it. k numbers the out-parameters, which are the function's last
arguments (bufferize/stage.py counts them: its results less the in-place ones). The
call sets the flag of the running submission, if it has flags, and does nothing
elsewhere (a graph run inline, a segment of a chain).

Only a function of one block of straight-line code at its top level (the shape the
stages give a graph; nests are calls or loops in it) gets signals; in any other, a
read waits for the end as before. The use of an out-parameter inside a loop or
parallel region counts as a use by that loop: the signal goes after it.
"""

from __future__ import annotations

from ..bufferize.graph_inputs import in_place_pairs
from ..bufferize.stage import RESULTS
from .deallocation import VIEWS  # (a use of a view is a use of its buffer)

FUNCTION = "lazymlir_output_ready"


def insert(module) -> int:
    """Add the signals to `module`'s graph functions; returns how many were added."""
    from mlir import ir
    from mlir.dialects import arith, func as func_dialect

    added = 0
    for func in list(module.body.operations):
        op = func.operation
        if op.name != "func.func" or RESULTS not in op.attributes \
                or "sym_visibility" in op.attributes or len(func.regions[0].blocks) != 1:
            continue
        block = func.regions[0].blocks[0]
        outputs = ir.IntegerAttr(op.attributes[RESULTS]).value - len(in_place_pairs(op))
        arguments = list(block.arguments)
        if outputs <= 0 or outputs > len(arguments):
            continue
        top = list(block.operations)
        position = {o.operation: i for i, o in enumerate(top)}
        after: dict[int, list[int]] = {}  # top-level op index -> outputs final after it
        for k, argument in enumerate(arguments[len(arguments) - outputs:]):
            after.setdefault(_last_use(argument, op, position), []).append(k)
        if not added:
            _declare(module)
        i64 = ir.IntegerType.get_signless(64)
        for index, ks in sorted(after.items()):
            # Right after the op (the terminator, which uses no out-parameter, is last);
            # an unused out-parameter (index -1): first thing.
            anchor = top[index + 1]
            with ir.InsertionPoint(anchor), anchor.location:
                for k in ks:
                    constant = arith.ConstantOp(i64, k).result
                    func_dialect.CallOp([], FUNCTION, [constant])
                    added += 1
    return added


def _last_use(value, func_op, position: dict) -> int:
    """The index of the last top-level op of `func_op` that uses `value` or a view of it
    (-1 if none does)."""
    last = -1
    pending = [value]
    while pending:
        for use in pending.pop().uses:
            owner = use.owner.operation
            top = owner
            while top.parent != func_op:
                top = top.parent
            last = max(last, position[top])
            if owner.name in VIEWS:
                pending.extend(owner.results)
    return last


def _declare(module) -> None:
    """`func.func private @lazymlir_output_ready(i64)`, once per module."""
    from mlir import ir
    from mlir.dialects import func as func_dialect

    for op in module.body.operations:
        if op.operation.name == "func.func" and \
                ir.StringAttr(op.attributes["sym_name"]).value == FUNCTION:
            return
    with ir.InsertionPoint.at_block_begin(module.body), module.operation.location:
        declaration = func_dialect.FuncOp(
            FUNCTION, ir.FunctionType.get([ir.IntegerType.get_signless(64)], []))
        declaration.attributes["sym_visibility"] = ir.StringAttr.get("private")
