"""Drop the results of multi-result `linalg.generic` ops that nothing uses.

torch-mlir decomposes `amax` (the max of every softmax, log_softmax and
cross-entropy) into `aten.max.dim`, whose linalg form computes the values and
the argmax indices in one generic. The indices are unused, but upstream's
dead-result cleanup keeps a result whose `outs` block argument the payload
reads, and the argmax's select reads the running index. So every softmax paid
for an i64 index store per element, and the two-result reduction fit none of
the CPU schedule's strategies: one GPT forward graph spent 5% of its time in
two such scalar loops, on one thread.

Here a result is dropped when it has no uses and the payload needs its block
argument only for the values it yields for dropped results; the ops computing
only those values are erased. Works with either MLIR binding (the caller passes
its binding's `ir` module).
"""

from __future__ import annotations

from ..mlir_runner import walk


def drop_unused_results(module, ir) -> int:
    """Rewrite `module` (of the binding whose `ir` module is given) in place; returns
    how many generics lost results."""
    generics = [op for op in walk(module.operation)
                if op.name == "linalg.generic" and len(op.results) >= 2]
    return sum(1 for op in generics if _rewrite(op, ir))


def _rewrite(op, ir) -> bool:
    keep = [i for i, result in enumerate(op.results) if not _unused(result)]
    if not keep or len(keep) == len(op.results):
        return False
    sizes = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
    num_inputs = sizes[0]
    if sizes[1] != len(op.results):
        return False
    body = op.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    terminator = ops[-1]
    if any(len(o.regions) for o in ops):
        return False
    # What the kept yields need: a backward slice inside the payload.
    needed_ops: list = []  # Operations (their Python wrappers do not hash by identity)
    needed_args: set[int] = set()
    stack = [terminator.operands[i] for i in keep]
    while stack:
        value = stack.pop()
        if isinstance(value, ir.BlockArgument):
            if value.owner == body:
                needed_args.add(value.arg_number)
            continue
        owner = value.owner.operation
        if owner.parent != op or any(owner == seen for seen in needed_ops):
            continue  # defined outside the payload, or seen
        needed_ops.append(owner)
        stack.extend(owner.operands)
    dropped_args = {num_inputs + i for i in range(len(op.results)) if i not in keep}
    if needed_args & dropped_args:
        return False  # a kept value reads a dropped output's running value

    inputs = list(op.operands)[:num_inputs]
    outputs = list(op.operands)[num_inputs:]
    maps = list(ir.ArrayAttr(op.attributes["indexing_maps"]))
    new_maps = maps[:num_inputs] + [maps[num_inputs + i] for i in keep]
    attributes = {name: op.attributes[name] for name in ("iterator_types",)}
    attributes["indexing_maps"] = ir.ArrayAttr.get(new_maps)
    attributes["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([num_inputs, len(keep)])
    with ir.InsertionPoint(op), op.location:
        new = ir.Operation.create(
            "linalg.generic", results=[op.results[i].type for i in keep],
            operands=inputs + [outputs[i] for i in keep], attributes=attributes, regions=1)
    kept_args = list(range(num_inputs)) + [num_inputs + i for i in keep]
    with op.location:
        new_body = new.regions[0].blocks.append(*[body.arguments[a].type for a in kept_args])
    with ir.InsertionPoint(new_body), op.location:
        new_yield = ir.Operation.create(
            "linalg.yield", operands=[terminator.operands[i] for i in keep])
    for payload_op in ops[:-1]:
        payload_op.move_before(new_yield)
    for new_index, old_index in enumerate(kept_args):
        body.arguments[old_index].replace_all_uses_with(new_body.arguments[new_index])
    terminator.erase()
    # Only the dropped yields used these (and the dropped outputs' arguments).
    for payload_op in reversed(ops[:-1]):
        if not any(payload_op.operation == seen for seen in needed_ops):
            payload_op.operation.erase()
    for new_index, old_index in enumerate(keep):
        op.results[old_index].replace_all_uses_with(new.results[new_index])
    op.erase()
    return True


def _unused(value) -> bool:
    for _ in value.uses:
        return False
    return True
