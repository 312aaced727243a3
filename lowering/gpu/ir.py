"""IR helpers every part of the cuda backend uses: the error it raises, the module's host
function and kernel modules, index constants, a `gpu.launch` with workgroup buffers, loop
extents of a generic, and the fill that initialises a reduction's output.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, gpu

from ..mlir_runner import PipelineFailure, walk


class GpuLoweringError(PipelineFailure):
    """The graph cannot be lowered for CUDA (message names the offending op)."""


def top_funcs(module: ir.Module):
    """The func.func ops at the top level of `module`."""
    return [op for op in module.body.operations if op.operation.name == "func.func"]


def host_func(module: ir.Module):
    """The single public `func.func` (the graph entry) of a lowered module."""
    funcs = [
        f
        for f in top_funcs(module)
        if "sym_visibility" not in f.attributes
        or ir.StringAttr(f.attributes["sym_visibility"]).value == "public"
    ]
    if len(funcs) != 1:
        raise GpuLoweringError(f"expected one public func.func, found {len(funcs)}")
    return funcs[0]


def gpu_modules(module: ir.Module):
    """gpu.module ops in body order: the `module_index` used by the launch plan."""
    return [op for op in module.body.operations if op.operation.name == "gpu.module"]


def holds_lzrt(op) -> bool:
    """Whether `op` holds ops of the lzrt dialect (a launch plan)."""
    return any(nested.name.startswith("lzrt.") for nested in walk(op))


def cidx(n: int) -> ir.Value:
    """An `index` constant (at the current insertion point and location)."""
    return arith.ConstantOp(ir.IndexType.get(), n).result


def launch_before(op, blocks: int, threads: int, buffers: list) -> ir.Block:
    """A `gpu.launch` right before `op` of `blocks` x `threads` with the workgroup
    `buffers` (memref types); returns its body block (arguments: 12 ids, then buffers)."""
    index = ir.IndexType.get()
    with ir.InsertionPoint(op), op.location:
        one = cidx(1)
        launch = gpu.LaunchOp.__mro__[1](None, [], cidx(blocks), one, one,
                                         cidx(threads), one, one)
        launch.attributes["workgroup_attributions"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), len(buffers))
        return launch.regions[0].blocks.append(*([index] * 12), *buffers)


def loop_extents(op) -> list[int] | None:
    """Loop extents of a generic on static memrefs (from the shapes via indexing maps)."""
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    n = maps[0].n_dims
    ext = [None] * n
    operands = list(op.inputs) + list(op.outputs)
    for v, m in zip(operands, maps):
        shape = ir.MemRefType(v.type).shape if isinstance(v.type, ir.MemRefType) else []
        for size, expr in zip(shape, m.results):
            if isinstance(expr, ir.AffineDimExpr):
                ext[ir.AffineDimExpr(expr).position] = size
    return None if any(e is None or e < 0 for e in ext) else ext


FILL_VIEWS = ("memref.expand_shape", "memref.collapse_shape", "memref.subview",
          "memref.reinterpret_cast", "memref.alloc")


def fill_before(op):
    """(fill op, constant value) when op's output is filled with a constant right before
    it (`linalg.fill` or the `gpu.memset` made of one; only views and allocations in
    between), else None. The value is the reduction's initial value."""
    out = op.outputs[0]
    prev = op.operation
    while True:
        prev = previous_op(prev)
        if prev is None:
            return None
        if prev.name in ("linalg.fill", "gpu.memset") or is_generic_fill(prev):
            break
        if prev.name not in FILL_VIEWS:
            return None
    operands = list(prev.operands)
    value, dst = operands[:2] if prev.name != "gpu.memset" else operands[-1:-3:-1]
    if dst != out or prev.results and any(list(r.uses) for r in prev.results):
        return None
    owner = value.owner
    owner = getattr(owner, "operation", owner)
    if not isinstance(owner, ir.Operation) or owner.name != "arith.constant":
        return None
    return prev, value


def is_generic_fill(operation) -> bool:
    """A generalized `linalg.fill`: `linalg.generic ins(%scalar) outs(%m)` yielding it."""
    if operation.name != "linalg.generic" or len(operation.operands) != 2:
        return False
    if isinstance(operation.operands[0].type, ir.ShapedType):
        return False
    block = operation.regions[0].blocks[0]
    ops = list(block.operations)
    return len(ops) == 1 and ops[0].operands[0] == block.arguments[0]


def previous_op(operation):
    """The op right before `operation` in its block, or None."""
    block = operation.block
    ops = [o.operation for o in block.operations]
    i = ops.index(operation)
    return ops[i - 1] if i else None
