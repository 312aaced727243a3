"""Elementwise fusion that leaves the contractions the CPU schedule tiles as named ops.

Runs at the start of the CPU `bufferized` stage, on linalg-on-tensors, in place of the
shared pipeline's leading `linalg-fuse-elementwise-ops`. That pass also folds a
reshape into the linalg op on its other side ("fusion by expansion"): a `Linear` on 3-D
input (`collapse_shape` -> `linalg.matmul` -> `expand_shape`) became a `linalg.generic`
with the reshape folded in, the elementwise producers (a LayerNorm) fused into it,
recomputed per multiply-add in a generic that schedule.py cannot tile (scalar loops,
~100x slower in a GPT step). The pass has no option to exclude ops; its reshape
folding only takes a producer with one use. So each contraction's results and
operands get one more use for the duration of the pass (the elementwise fusion it
blocks, of an operand's producer into the contraction, cannot happen anyway): extra
operands of the function's `return` (the function's type follows), removed right after.
Nothing else changes: the rest of the graph is fused as before. Then the transposes
that feed the contractions are read in place or swapped around them
(transposed_operands.py).

Before this, the whole graph was bufferized a second time without elementwise fusion
when a contraction had gone (and the graph ran unfused): in a DenseNet-121 training
step a 2x10x256 classifier matmul triggered it, and the unfused bufferization of its
7476 linalg ops took 40 of the stage's 57 s.
"""

from __future__ import annotations

import logging

from . import transposed_operands
from .schedule_contraction import CONTRACTIONS
from ..mlir_runner import walk

log = logging.getLogger("lazymlir.lowering.cpu")


FUSE = "builtin.module(func.func(linalg-fuse-elementwise-ops))"


def _is_result(value) -> bool:
    return getattr(value.owner, "operation", None) is not None  # else a block argument


def _hold(func) -> tuple | None:
    """Return each contraction's results and operands from `func` too; the
    function's old type and number of results, to restore (None: nothing to hold)."""
    from mlir import ir
    from mlir.dialects import func as func_d

    blocks = func.regions[0].blocks
    if len(blocks) != 1:
        return None
    held, seen = [], set()
    for op in walk(func, skip=lambda op: op.name in CONTRACTIONS):
        if op.name not in CONTRACTIONS:
            continue
        # Its operands whatever their producer: a transpose of a reshape became a
        # generic followed by a reshape in the pass, which then had one use.
        values = list(op.results) + [v for v in op.operands if _is_result(v)]
        for value in values:
            if value not in seen:
                seen.add(value)
                held.append(value)
    if not held:
        return None
    block = blocks[0]
    ret = block.operations[len(block.operations) - 1]
    if ret.operation.name != "func.return":
        return None
    old_type = func.attributes["function_type"]
    kept = list(ret.operands)
    with ir.InsertionPoint(ret), ret.location:
        func_d.ReturnOp(kept + held)
    ret.operation.erase()
    signature = ir.FunctionType(ir.TypeAttr(old_type).value)
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        signature.inputs, signature.results + [v.type for v in held]))
    return old_type, len(kept)


def _release(func, old_type, kept: int) -> None:
    from mlir import ir
    from mlir.dialects import func as func_d

    block = func.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    operands = list(ret.operands)[:kept]
    with ir.InsertionPoint(ret), ret.location:
        func_d.ReturnOp(operands)
    ret.operation.erase()
    func.attributes["function_type"] = old_type


def fuse_elementwise(module) -> None:
    """`linalg-fuse-elementwise-ops` over `module`, every contraction kept a named op
    (call inside the module's context)."""
    from mlir import passmanager

    funcs = [op.operation for op in module.body.operations
             if op.operation.name == "func.func" and op.operation.regions[0].blocks]
    count = sum(op.name in CONTRACTIONS for op in walk(module.operation))
    held = [(func, _hold(func)) for func in funcs]
    passmanager.PassManager.parse(FUSE).run(module.operation)
    for func, saved in held:
        if saved is not None:
            _release(func, *saved)
    left = sum(op.name in CONTRACTIONS for op in walk(module.operation))
    if left < count:
        # Fusion is exact either way; only the schedule's speed is lost.
        log.warning("elementwise fusion turned %d of %d contractions into generic ops",
                    count - left, count)
    # Then the transposes that feed them are read in place (transposed_operands.py).
    transposed_operands.fold_transposes(module)
