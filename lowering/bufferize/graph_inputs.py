"""A graph's inputs are read-only to its code, except those it updates in place.

Before bufferization (both targets). One-shot bufferization treats a function's
tensor arguments as writable unless told otherwise, so an op whose destination
is an input could be bufferized into the caller's memory: `slice_scatter(x, y)`
became a copy of `y` into `x` itself, and `torch.compile`d code changed its input
`x` (and, on the lazy device, every tensor sharing x's copy-on-write memory).
Every argument is therefore marked `bufferization.writable = false`: an op that
would write one works on a copy.

The exception is an in-place update the graph asks for: `torch.compile`'s
optimizer steps (AOTAutograd keeps their parameter updates as `copy_` into the
graph's inputs) record which result is the new value of which input in the
function attribute `lazymlir.in_place` (pairs [input, result], written by the
`torch` stage from the fx graph's "in_place"; lowering/front/fx_graph.py). Such a
result is materialized in its input's buffer
(`bufferization.materialize_in_destination`), that argument stays writable, and
its out-parameter is dropped after bufferization (`drop_in_place_results`): the
runtime passes the input and no output buffer for it. Whether the update computes
straight into the input's memory or into a temporary copied there at the end is
one-shot bufferization's own conflict analysis: a read of the old value after the
write, or an op reading and writing the buffer at different elements (a
transpose), gets the copy. Where bufferization refuses the materialization
altogether, the graph is bufferized again with every input read-only and each
update copied into its input last (`protect_inputs(..., "copy")`; stage.py).
"""

from __future__ import annotations

IN_PLACE = "lazymlir.in_place"
WRITABLE = "bufferization.writable"
# How many arguments the function had before its results became out-parameters
# (set with the in-place pairs, read and removed by drop_in_place_results).
INPUTS = "lazymlir.inputs"


def in_place_pairs(func) -> list[tuple[int, int]]:
    """The (input, result) pairs of `func`'s `lazymlir.in_place` attribute."""
    from mlir import ir

    if IN_PLACE not in func.attributes:
        return []
    return [tuple(ir.IntegerAttr(v).value for v in ir.ArrayAttr(pair))
            for pair in ir.ArrayAttr(func.attributes[IN_PLACE])]


def _set_writable(func, writable: set[int]) -> None:
    from mlir import ir

    arg_types = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).inputs
    old = list(ir.ArrayAttr(func.attributes["arg_attrs"])) \
        if "arg_attrs" in func.attributes else [ir.DictAttr.get({})] * len(arg_types)
    new = []
    for index, (attrs, arg_type) in enumerate(zip(old, arg_types)):
        entries = {a.name: a.attr for a in ir.DictAttr(attrs)}
        if isinstance(arg_type, ir.RankedTensorType | ir.UnrankedTensorType):
            entries[WRITABLE] = ir.BoolAttr.get(index in writable)
        new.append(ir.DictAttr.get(entries))
    func.attributes["arg_attrs"] = ir.ArrayAttr.get(new)


def _materialize_in_place(func, pairs: list[tuple[int, int]]) -> None:
    from mlir import ir
    from mlir.dialects import bufferization

    block = func.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    for input_index, result_index in pairs:
        value, dest = ret.operands[result_index], block.arguments[input_index]
        with ir.InsertionPoint(ret), ret.location:
            written = bufferization.MaterializeInDestinationOp(
                dest.type, value, dest).result
        ret.operands[result_index] = written


def protect_inputs(module, in_place: bool | str = True) -> None:
    """Mark the public functions' tensor arguments read-only, except those updated in
    place, whose new values are materialized in them (call inside the module's context).
    `in_place=False` (the cuda target, whose runtime passes every output buffer): none
    is updated in place; the caller copies the results into the inputs (dynamo.py).
    `in_place="copy"`: every input stays read-only to bufferization, and
    `drop_in_place_results` copies each in-place result into its input at the end
    (for a graph whose materialization bufferization refused: `x[1:].mul_(3)` gave
    "cannot avoid RaW conflict" on the insert_slice into x)."""
    from mlir import ir

    for func in module.body.operations:
        if func.operation.name != "func.func" or not func.regions[0].blocks:
            continue
        if "sym_visibility" in func.operation.attributes:
            continue
        pairs = in_place_pairs(func.operation) if in_place else []
        if IN_PLACE in func.operation.attributes and not in_place:
            del func.operation.attributes[IN_PLACE]
        if pairs:
            func.operation.attributes[INPUTS] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), len(func.regions[0].blocks[0].arguments))
        if in_place == "copy":
            pairs = []
        _materialize_in_place(func, pairs)
        _set_writable(func.operation, {i for i, _ in pairs})


def drop_in_place_results(module) -> None:
    """After `buffer-results-to-out-params`, each in-place result's out-parameter goes,
    so the runtime passes no buffer for it. Materialized in its input, the parameter
    only receives a copy of the input (`memref.copy %input, %out`): the copy goes too.
    Otherwise (`protect_inputs(..., "copy")`) the result is computed in a temporary
    copied into the input last, after every read of the input."""
    from mlir import ir
    from mlir.dialects import memref

    for func in module.body.operations:
        if func.operation.name != "func.func" or INPUTS not in func.operation.attributes:
            continue
        attrs = func.operation.attributes
        inputs = ir.IntegerAttr(attrs[INPUTS]).value
        block = func.regions[0].blocks[0]
        doomed = []
        ret = block.operations[len(block.operations) - 1]
        for input_index, result_index in in_place_pairs(func.operation):
            out, target = block.arguments[inputs + result_index], block.arguments[input_index]
            uses = [use.owner for use in out.uses]
            if len(uses) == 1 and uses[0].name == "memref.copy" and \
                    uses[0].operands[0] == target and uses[0].operands[1] == out:
                uses[0].erase()
            else:
                with ir.InsertionPoint.at_block_begin(block), ret.location:
                    temporary = memref.AllocOp(out.type, [], []).result
                out.replace_all_uses_with(temporary)
                with ir.InsertionPoint(ret), ret.location:
                    memref.CopyOp(temporary, target)
            doomed.append(inputs + result_index)
        ftype = ir.FunctionType(ir.TypeAttr(attrs["function_type"]).value)
        kept = [i for i in range(len(ftype.inputs)) if i not in doomed]
        for index in sorted(doomed, reverse=True):
            block.erase_argument(index)
        attrs["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [ftype.inputs[i] for i in kept], ftype.results))
        if "arg_attrs" in attrs:
            old = list(ir.ArrayAttr(attrs["arg_attrs"]))
            attrs["arg_attrs"] = ir.ArrayAttr.get([old[i] for i in kept])
        del attrs[INPUTS]
