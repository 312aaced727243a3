"""Bool (i1) buffers are stored as bytes (i8): run on the `bufferized` stage's output.

LLVM 22's `finalize-memref-to-llvm` aborts or fails on loads/stores of i1
memrefs, and the CUDA kernels index buffers per byte anyway. Masks that
elementwise fusion cannot remove (cross_entropy's target mask, diag_embed's
diagonal, causal masks kept for the backward pass) live in i1 buffers after
bufferization. This rewrite gives every `memref<...xi1>` value the type
`memref<...xi8>` and converts at the accesses:

- `memref.load` loads an i8 and narrows it (`arith.trunci`);
- `memref.store` widens its value (`arith.extui`, so true is stored as 1);
- linalg ops with a written body (`linalg.generic`, `map`, `reduce`) get i8
  block arguments narrowed at the start of the body, and widen what they yield
  into an i8 output;
- named linalg ops (their body is implicit) are rebuilt for the new operand
  types; `linalg.fill` widens its fill value first;
- `memref.global` constants get i8 element values; functions their new types.

Ops that only pass buffers around (views, copies, allocs, calls, loops) need no
change. Any other op touching an i1 buffer is reported, naming the op, rather
than handed to a lowering that would abort. Bools cross graph boundaries as
uint8 already (lowering/front/fx_graph.py), so graph signatures do not change.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, linalg

from ..mlir_runner import PipelineFailure, walk

# Ops that only move, view or hold buffers: retyping their memref operands and
# results is all they need (strides and offsets count elements, and an i1
# element already took one byte in memory).
_PASS_THROUGH = frozenset({
    "memref.alloc", "memref.alloca", "memref.dealloc", "memref.copy", "memref.cast",
    "memref.subview", "memref.expand_shape", "memref.collapse_shape",
    "memref.reinterpret_cast", "memref.transpose", "memref.dim", "memref.rank",
    "memref.extract_strided_metadata", "memref.extract_aligned_pointer_as_index",
    "memref.get_global", "memref.assume_alignment",
    "func.return", "func.call", "scf.for", "scf.if", "scf.while", "scf.yield",
    "scf.condition", "scf.execute_region", "cf.br", "cf.cond_br",
    "bufferization.dealloc",
})

# Linalg ops whose body is printed: block argument i belongs to operand i.
_WITH_BODY = frozenset({"linalg.generic", "linalg.map", "linalg.reduce"})


def _is_i1(t: ir.Type) -> bool:
    return isinstance(t, ir.IntegerType) and t.width == 1


def _i1_memref(t: ir.Type) -> bool:
    return isinstance(t, (ir.MemRefType, ir.UnrankedMemRefType)) and _is_i1(t.element_type)


def _as_bytes(t: ir.Type) -> ir.Type:
    """memref<...xi1> -> memref<...xi8> (same shape, layout and memory space)."""
    if not _i1_memref(t):
        return t
    i8 = ir.IntegerType.get_signless(8)
    if isinstance(t, ir.MemRefType):
        return ir.MemRefType.get(t.shape, i8, t.layout, t.memory_space)
    return ir.UnrankedMemRefType.get(i8, t.memory_space)


def store_bools_as_bytes(module: ir.Module) -> None:
    """Rewrite `module` (upstream bindings, bufferized) in place; no-op without i1 buffers."""
    touching: list[tuple[ir.Operation, list[int]]] = []  # op, indices of its i1-memref operands
    values: list[ir.Value] = []                           # every i1-memref value, to retype
    globals_: list[ir.Operation] = []
    funcs: list[ir.Operation] = []

    def collect(op: ir.Operation) -> None:
        name = op.name
        if name == "memref.global" and _i1_memref(ir.TypeAttr(op.attributes["type"]).value):
            globals_.append(op)
        if name == "func.func":
            funcs.append(op)
        indices = [i for i, v in enumerate(op.operands) if _i1_memref(v.type)]
        produced = [r for r in op.results if _i1_memref(r.type)]
        if indices or produced:
            touching.append((op, indices))
        values.extend(produced)
        for region in op.regions:
            for block in region.blocks:
                values.extend(a for a in block.arguments if _i1_memref(a.type))

    with module.context, ir.Location.unknown():
        for op in walk(module.operation):
            collect(op)
        if not values and not globals_:
            return
        for op, _ in touching:
            if (op.name not in _PASS_THROUGH and op.name not in _ACCESS
                    and not op.name.startswith("linalg.")):
                raise PipelineFailure(f"op '{op.name}' uses a bool (i1) buffer, which the "
                                      "i1-as-i8 storage rewrite does not handle")
        for value in values:
            value.set_type(_as_bytes(value.type))
        for op in globals_:
            _retype_global(op)
        for op in funcs:
            _retype_function(op)
        for op, indices in touching:
            if op.name in _ACCESS:
                _ACCESS[op.name](op)
            elif op.name in _WITH_BODY:
                _retype_body(op, indices)
            elif op.name.startswith("linalg.") and indices:
                _rebuild_named(op, indices)
        try:
            module.operation.verify()
        except ir.MLIRError as error:  # a bug in this rewrite: fail the stage, not the process
            raise PipelineFailure(f"i1-as-i8 storage rewrite left invalid IR: {error}") from None


def _narrow(value: ir.Value, after: ir.Operation | None, block: ir.Block | None = None) -> None:
    """Uses of the (now i8) `value` see `trunci(value)` to i1 instead."""
    ip = ir.InsertionPoint.at_block_begin(block) if block is not None else ir.InsertionPoint(after)
    trunc = arith.TruncIOp(ir.IntegerType.get_signless(1), value, ip=ip)
    if after is not None:
        trunc.operation.move_after(after)
    value.replace_all_uses_except(trunc.result, trunc.operation)


def _widen(op: ir.Operation, index: int) -> None:
    """Operand `index` of `op` (an i1) becomes `extui(operand)` to i8."""
    ext = arith.ExtUIOp(ir.IntegerType.get_signless(8), op.operands[index],
                        ip=ir.InsertionPoint(op))
    op.operands[index] = ext.result


def _load(op: ir.Operation) -> None:
    result = op.results[0]
    result.set_type(ir.IntegerType.get_signless(8))
    _narrow(result, after=op)


def _store(op: ir.Operation) -> None:
    _widen(op, 0)


_ACCESS = {"memref.load": _load, "memref.store": _store}


def _retype_body(op: ir.Operation, indices: list[int]) -> None:
    """linalg.generic/map/reduce: narrow i8 block arguments, widen yielded i1 values."""
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    inits = _num_inits(op)
    first_init = len(op.operands) - inits
    for i in reversed(indices):  # trunci ops inserted at the block start, in order
        if i < len(args) and _is_i1(args[i].type):
            args[i].set_type(ir.IntegerType.get_signless(8))
            if any(True for _ in args[i].uses):  # an output's old value is often unread
                _narrow(args[i], after=None, block=block)
    yield_op = list(block.operations)[-1].operation
    for i in indices:
        j = i - first_init
        if 0 <= j < len(yield_op.operands) and _is_i1(yield_op.operands[j].type):
            _widen(yield_op, j)


def _num_inits(op: ir.Operation) -> int:
    if "operandSegmentSizes" in op.attributes:
        return list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[1]
    return 1  # linalg.map: inputs then one init


def _rebuild_named(op: ir.Operation, indices: list[int]) -> None:
    """A named linalg op's implicit body was built for i1 operands: build it again."""
    if op.name == "linalg.fill":
        if _is_i1(op.operands[0].type):
            _widen(op, 0)
    operands = list(op.operands)
    attributes = {name: op.attributes[name] for name in op.attributes}
    new = ir.Operation.create(op.name, results=[r.type for r in op.results], operands=operands,
                              attributes=attributes, regions=len(op.regions),
                              loc=op.location, ip=ir.InsertionPoint(op))
    linalg.fill_builtin_region(new)
    for old, fresh in zip(op.results, new.results):
        old.replace_all_uses_with(fresh)
    op.erase()


def _retype_global(op: ir.Operation) -> None:
    new_type = _as_bytes(ir.TypeAttr(op.attributes["type"]).value)
    op.attributes["type"] = ir.TypeAttr.get(new_type)
    init = op.attributes["initial_value"] if "initial_value" in op.attributes else None
    if not isinstance(init, ir.DenseIntElementsAttr):
        return  # uninitialized or external: nothing stored in the module
    dense = init
    shape = ir.MemRefType(new_type).shape
    tensor_type = ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(8))
    if dense.is_splat:
        value = ir.IntegerAttr(dense.get_splat_value()).value
        op.attributes["initial_value"] = ir.DenseElementsAttr.get_splat(
            tensor_type, ir.IntegerAttr.get(ir.IntegerType.get_signless(8), value & 1))
        return
    bits = np.array([bool(dense[i]) for i in range(len(dense))], dtype=np.int8).reshape(shape)
    op.attributes["initial_value"] = ir.DenseElementsAttr.get(bits, type=tensor_type)


def _retype_function(op: ir.Operation) -> None:
    ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
    inputs = [_as_bytes(t) for t in ftype.inputs]
    results = [_as_bytes(t) for t in ftype.results]
    op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
