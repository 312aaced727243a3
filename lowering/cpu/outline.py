"""Each top-level loop nest of a CPU graph becomes a function of its own (end of the
`loops` stage), and identical nests one function.

Why: a graph is one `main` function, and LLVM's loop passes analyse the whole
function again for every loop they transform. On the GPT training step's
forward graph (~290 loop nests), `opt -O3` spent 68% of its time in
LoopVectorizePass; with the nests outlined, `opt` took 3.05 s instead of 5.91 s
(docs/cpu-performance.md). Separate functions are also what lets
lowering/cpu/codegen.py split the module and generate code for the parts in
parallel. And a model's layers repeat their nests: the GPT forward graph's 209
nests are 98 distinct functions, compiled once each.

How: the upstream transform `transform.loop.outline` on every `scf.for` and
`scf.forall` directly in a public function's body, before the parallel ones
become OpenMP regions (stages.to_loops). The new functions are private and
`noinline` (LLVM would inline a function with one caller straight back), with
names `<function>$nest<k>`. The outliner turns everything a nest uses from outside
into arguments; two facts LLVM had inside `main` are given back: constants (loop
bounds) are cloned into the nest, and a temporary no other argument views is
`noalias` (see `_constants_into_callees`, `_mark_noalias`). Then functions that
print the same (name aside) are merged (`_merge_identical`).
"""

from __future__ import annotations

import re

from mlir import ir, passmanager
from mlir.dialects.transform import interpreter

from ..mlir_runner import walk
from .deallocation import VIEWS  # (ops whose result views their first operand)

TAG = "lazymlir.outline"
# The memref arguments (indices) of an outlined nest that are `noalias`: recorded on
# the func.func, applied by `apply_noalias` to the LLVM function's aligned pointers
# (convert-func-to-llvm drops `llvm.noalias` on memref arguments it expands).
NOALIAS = "lazymlir.noalias_args"
# Below this many top-level nests the whole function is small: nothing to gain.
MIN_NESTS = 8
# The loops outlined: sequential nests, and parallel ones before they become OpenMP
# regions (lowering/cpu/parallel.py).
NEST_OPS = ("scf.for", "scf.forall")


def outline_loop_nests(module: ir.Module) -> int:
    """Outline the top-level scf.for nests of `module`'s public functions; returns how many."""
    functions: dict = {}
    count = 0
    for func in list(module.body.operations):
        if func.operation.name != "func.func" or not func.regions[0].blocks:
            continue
        if "sym_visibility" in func.operation.attributes:
            continue  # private helpers (math outlined by convert-math-to-funcs...)
        nests = [op for op in func.regions[0].blocks[0].operations
                 if op.operation.name in NEST_OPS]
        if len(nests) < MIN_NESTS:
            continue
        _constants_per_nest(func, nests)
        functions.update(_outline(module, func, nests, tag=len(functions)))
        count += len(nests)
    if not functions:
        return 0
    for func in functions.values():
        func.operation.attributes["sym_visibility"] = ir.StringAttr.get("private")
        func.operation.attributes["llvm.linkage"] = ir.Attribute.parse(
            "#llvm.linkage<internal>")
        func.operation.attributes["passthrough"] = ir.ArrayAttr.get(
            [ir.StringAttr.get("noinline")])
    _constants_into_callees(module, functions)
    _merge_identical(module, functions)
    return count


def _outline(module: ir.Module, func, nests: list, tag: int) -> dict:
    """Outline `nests` (top-level loops of `func`) into functions `<func>$nest<k>`;
    returns them by name. `tag` marks the nests for the match (unique per call).

    One `transform.loop.outline` of one handle holding every nest: the op builds the
    module's symbol table once per application (a handle per nest built it per nest,
    quadratic in the nests: 3.6 s for the 5066 nests of a DenseNet-121 training step),
    and the interpreter checks every live handle when one is consumed (quadratic again
    with a handle per nest). The functions come named `<prefix>`, `<prefix>_0`, ... by
    the symbol table in the nests' order (each inserted before `func`); they are renamed
    after their position, as are the calls."""
    name = ir.StringAttr(func.operation.attributes["sym_name"]).value
    for nest in nests:
        nest.operation.attributes[TAG] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), tag)
    before = {op.operation for op in module.body.operations}
    prefix = f"{name}$outlined"
    script = ir.Module.parse(
        "module attributes {transform.with_named_sequence} {\n"
        "  transform.named_sequence @__transform_main("
        "%root: !transform.any_op {transform.readonly}) {\n"
        f"    %all = transform.structured.match attributes{{{TAG} = {tag} : i64}}"
        " in %root : (!transform.any_op) -> !transform.any_op\n"
        f"    %f, %c = transform.loop.outline %all {{func_name = \"{prefix}\"}} "
        ": (!transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
        "    transform.yield\n  }\n}\n")
    interpreter.apply_named_sequence(module.operation, script.body.operations[0], script)
    created = [op for op in module.body.operations
               if op.operation not in before and op.operation.name == "func.func"]
    if len(created) != len(nests):
        raise RuntimeError(f"outlining {len(nests)} loop nests of @{name} made "
                           f"{len(created)} functions")
    taken = {ir.StringAttr(op.operation.attributes["sym_name"]).value
             for op in module.body.operations if "sym_name" in op.operation.attributes}
    renamed, outlined = {}, {}
    k = 0
    for op in created:
        while f"{name}$nest{k}" in taken:
            k += 1
        old = ir.StringAttr(op.operation.attributes["sym_name"]).value
        renamed[old] = new = f"{name}$nest{k}"
        taken.add(new)
        op.operation.attributes["sym_name"] = ir.StringAttr.get(new)
        outlined[new] = op
    for call in walk(func.operation):
        if call.name == "func.call":
            callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
            if callee in renamed:
                call.attributes["callee"] = ir.FlatSymbolRefAttr.get(renamed[callee])
    return outlined


def _constants_per_nest(func, nests: list) -> None:
    """Each nest gets its own copies of the function's constants it uses (placed right
    before it). The outliner replaces the uses of every value a nest captures by going
    through all of that value's uses: with `%c0` used by thousands of nests, outlining
    them all was quadratic (most of a DenseNet-121 step's loops stage). The copies are
    constants passed to one call each (`_constants_into_callees` moves them into the
    callee); canonicalize/cse merges what stays in the caller."""
    body = func.regions[0].blocks[0]
    for nest in nests:
        copies: dict = {}
        for op in walk(nest.operation):
            operands = op.operands
            for index, value in enumerate(operands):
                producer = value.owner
                if isinstance(producer, ir.Block):
                    continue
                producer = getattr(producer, "operation", producer)
                if producer.name != "arith.constant" or producer.block != body:
                    continue
                copy = copies.get(producer)
                if copy is None:
                    copy = copies[producer] = producer.clone(ip=ir.InsertionPoint(nest))
                operands[index] = copy.results[0]


_OUTLINE_TAG = re.compile(TAG.replace(".", r"\.") + r" = \d+ : i64")
_FUNC_START = re.compile(r"(?m)^  func\.func ")
_FUNC_NAME = re.compile(r'(?:private |public )?@("[^"]+"|[\w$.]+)\(')


def _merge_identical(module: ir.Module, functions: dict) -> None:
    """Outlined nests that are the same function (a transformer's layers repeat their
    loop nests, constants and noalias marks included) become one: the calls of the
    others call the first, and the others are erased, so LLVM compiles each once.
    Done here rather than by LLVM's mergefunc pass on the whole module, which also
    merged the OpenMP regions' outlined bodies and made the GPT step ~8% slower
    (docs/cpu-performance.md)."""
    # One form per function (the cloned constants deduplicated and ordered), printed
    # once for the whole module: printing each function alone costs ~5 ms apiece.
    passmanager.PassManager.parse("builtin.module(func.func(canonicalize,cse))").run(
        module.operation)
    first: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for chunk in _FUNC_START.split(str(module))[1:]:
        name = _FUNC_NAME.match(chunk)
        if name is None or name.group(1).strip('"') not in functions:
            continue
        name = name.group(1).strip('"')
        body = chunk[chunk.index("("):]
        key = _OUTLINE_TAG.sub("", body[:body.find("\n  }\n")])  # up to its closing brace
        if key in first:
            replaced[name] = first[key]
        else:
            first[key] = name
    if not replaced:
        return
    for op in _calls_outside(module, functions):
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        if callee in replaced:
            op.attributes["callee"] = ir.FlatSymbolRefAttr.get(replaced[callee])
    for name in replaced:
        functions.pop(name).operation.erase()


def _calls_outside(module: ir.Module, functions: dict) -> list:
    """The func.call ops of `module` outside the bodies of `functions` (which call
    nothing outlined: their own calls are math helpers): the walk skips the bodies,
    most of the module."""
    outlined = {func.operation for func in functions.values()}
    return [op for op in walk(module.operation, skip=lambda op: op in outlined)
            if op.name == "func.call"]


def _constants_into_callees(module: ir.Module, functions: dict) -> None:
    """The outliner passes every value defined outside a nest as an argument, its loop
    bounds and constant indices included: inside the function they are unknown, and
    LLVM compiled the nests with runtime trip counts (3x the code). Each nest has one
    call, so the constants it receives are cloned into its body instead."""
    calls = _calls_outside(module, functions)
    for op in calls:
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        if callee not in functions:
            continue
        entry = functions[callee].regions[0].blocks[0]
        for index, operand in enumerate(op.operands):
            producer = getattr(operand.owner, "operation", operand.owner)
            if not isinstance(producer, ir.Operation) or producer.name != "arith.constant":
                continue
            clone = producer.clone(ip=ir.InsertionPoint.at_block_begin(entry))
            entry.arguments[index].replace_all_uses_with(clone.results[0])
        _mark_noalias(functions[callee], list(op.operands))

def _root(value):
    """The buffer a memref value views: a memref.alloc result, or a block argument."""
    while True:
        producer = value.owner
        if isinstance(producer, ir.Block):
            return value
        producer = getattr(producer, "operation", producer)
        if producer.name not in VIEWS:
            return value
        value = producer.operands[0]


def _mark_noalias(func, operands: list) -> None:
    """Inside main, LLVM knew each temporary was a separate allocation; as arguments of
    an outlined nest it does not, and vectorized loops got runtime alias checks and
    a second copy (the forward GPT graph's code grew 3x). An argument whose buffer is
    a fresh allocation no other argument views is `noalias` for the call; the graph's
    own inputs and outputs (which may alias each other) are not marked."""
    roots = [_root(v) if isinstance(v.type, ir.MemRefType) else None for v in operands]
    for index, root in enumerate(roots):
        if root is None or isinstance(root.owner, ir.Block):
            continue
        producer = getattr(root.owner, "operation", root.owner)
        if producer.name not in ("memref.alloc", "memref.alloca"):
            continue
        if sum(1 for other in roots if other is not None and other == root) != 1:
            continue
        marked = [ir.IntegerAttr(a).value for a in func.operation.attributes[NOALIAS]] \
            if NOALIAS in func.operation.attributes else []
        func.operation.attributes[NOALIAS] = ir.ArrayAttr.get(
            [ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
             for i in sorted({*marked, index})])


def noalias_plan(module: ir.Module) -> dict[str, list[int]]:
    """{outlined function: positions of its LLVM arguments to mark noalias}: for each
    recorded memref argument, its aligned pointer in the expanded calling convention
    (allocated ptr, aligned ptr, offset, sizes, strides per ranked memref; one slot per
    scalar). Read before the LLVM conversion."""
    plan = {}
    for func in module.body.operations:
        if func.operation.name != "func.func" or NOALIAS not in func.operation.attributes:
            continue
        marked = {ir.IntegerAttr(a).value for a in func.operation.attributes[NOALIAS]}
        positions, slot = [], 0
        for index, arg in enumerate(func.regions[0].blocks[0].arguments):
            if isinstance(arg.type, ir.MemRefType):
                if index in marked:
                    positions.append(slot + 1)
                slot += 3 + 2 * ir.MemRefType(arg.type).rank
            else:
                slot += 1
        plan[ir.StringAttr(func.operation.attributes["sym_name"]).value] = positions
        del func.operation.attributes[NOALIAS]
    return plan


def apply_noalias(module: ir.Module, plan: dict[str, list[int]]) -> None:
    """Set `llvm.noalias` on the planned arguments of the lowered functions (in place)."""
    for func in module.body.operations:
        if func.operation.name != "llvm.func" or "sym_name" not in func.operation.attributes:
            continue
        positions = plan.get(ir.StringAttr(func.operation.attributes["sym_name"]).value)
        if not positions:
            continue
        count = len(func.regions[0].blocks[0].arguments)
        existing = func.operation.attributes["arg_attrs"] \
            if "arg_attrs" in func.operation.attributes else None
        attrs = [{a.name: a.attr for a in ir.DictAttr(existing[i])} if existing else {}
                 for i in range(count)]
        context = module.context
        for position in positions:
            attrs[position]["llvm.noalias"] = ir.UnitAttr.get(context)
        func.operation.attributes["arg_attrs"] = ir.ArrayAttr.get(
            [ir.DictAttr.get(a, context) for a in attrs], context)
