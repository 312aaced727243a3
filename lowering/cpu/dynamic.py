"""CPU schedule for symbolic sizes: full static tiles, peeled remainders, run-time parallelism.

A graph compiled once for every size (lowering/front/symbolic.py) has `?` dimensions.
The schedule's strategies (schedule_contraction.py, schedule_vector.py) pick register
tiles that divide a static extent; for a dynamic one they take the ISA's preferred tile
instead, and the loop over such tiles is peeled (`transform.loop.peel`): its main part
runs only whole tiles, so the op inside has a static shape and vectorizes exactly like
a static op (a contraction keeps its accumulator in registers across K), and its
remainder (at most one tile) is tiled again by 1 along that dimension, which is static
too and vectorizes as well (one row of a matmul's register tile, one element of a row
step). No masks: every vector op the schedule emits is on a static shape.

Parallelism depends on the work, which depends on the sizes: an op whose work is
large enough only for some sizes is put under an `scf.if` on its sizes, read at run
time (`memref.dim`), with one copy scheduled to run on all cores and one in order
(`guard`), so small sizes do not pay for waking the thread pool.
"""

from __future__ import annotations

import itertools

from ..mlir_runner import map_results

# Attribute on an op copy under a parallelism guard: true for the copy that runs on
# all cores, false for the one that runs in order (strategies read it, `parallel_choice`).
PARALLEL_CHOICE = "lazymlir.parallel"

_names = itertools.count()


def loop_extents(op, rank: int, maps=None) -> list[tuple[int | None, tuple[int, int]]] | None:
    """Per loop dim of a linalg op: (static extent, or None where dynamic; (operand
    position, dim) of an operand that reads the loop as one of its dims). None where a
    loop is read by no operand as a plain dim. `maps`: the op's indexing maps where
    it has no such attribute (a named op's defaults)."""
    from mlir import ir

    found: list = [None] * rank
    if maps is None:
        maps = op.operation.attributes["indexing_maps"]
    for position, (value, amap) in enumerate(zip(op.operation.operands, maps)):
        if not isinstance(value.type, ir.ShapedType):
            continue
        shape = ir.ShapedType(value.type)
        for dim, expr in enumerate(map_results(amap)):
            if not (expr.startswith("d") and expr[1:].isdigit()):
                continue
            loop = int(expr[1:])
            extent = None if shape.is_dynamic_dim(dim) else shape.get_dim_size(dim)
            if found[loop] is None or (found[loop][0] is None and extent is not None):
                found[loop] = (extent, (position, dim))
    if any(f is None for f in found):
        return None
    return found


def is_dynamic(extents) -> bool:
    return any(extent is None for extent, _ in extents)


def parallel_choice(op, static_work: int, dynamic: bool, threshold: int):
    """True / False: whether an op runs on all cores; "guard": decided at run time
    (`guard`). `static_work`: the product of its static extents (its work when
    `dynamic` is false)."""
    if PARALLEL_CHOICE in op.operation.attributes:
        from mlir import ir

        return ir.BoolAttr(op.operation.attributes[PARALLEL_CHOICE]).value
    if not dynamic:
        return static_work >= threshold
    return "guard"


def guard(op, extents, static_work: int, threshold: int) -> tuple:
    """Put `op` under `scf.if (product of its dynamic extents * static_work >=
    threshold)`, the op in the then-branch (PARALLEL_CHOICE true) and a copy in the
    else-branch (false). Returns (then op, else op) as OpViews."""
    from mlir import ir
    from mlir.dialects import arith, memref, scf

    operands = list(op.operation.operands)
    index = ir.IndexType.get()
    with ir.InsertionPoint(op.operation), op.operation.location:
        work = arith.ConstantOp(index, static_work).result
        for extent, (position, dim) in extents:
            if extent is None:
                size = memref.DimOp(operands[position],
                                    arith.ConstantOp(index, dim).result).result
                work = arith.MulIOp(work, size).result
        large = arith.CmpIOp(arith.CmpIPredicate.sge, work,
                             arith.ConstantOp(index, threshold).result).result
        branch = scf.IfOp(large, has_else=True)
        with ir.InsertionPoint(branch.then_block):
            then_yield = scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            else_yield = scf.YieldOp([])
    op.operation.move_before(then_yield)
    copy = op.operation.clone(ir.InsertionPoint(else_yield))
    op.operation.attributes[PARALLEL_CHOICE] = ir.BoolAttr.get(True)
    copy.attributes[PARALLEL_CHOICE] = ir.BoolAttr.get(False)
    return op, copy.opview


def _handles(count: int) -> str:
    return ", ".join(["!transform.any_op"] * count)


def _tile(handle: str, tiles: list[int]) -> tuple[str, str, list[str]]:
    """(transform ops, tiled op handle, loop handles) of tile_using_for by `tiles`."""
    name = f"%d{next(_names)}"
    loops = sum(1 for t in tiles if t)
    if not loops:
        return "", handle, []
    script = (f"    {name}, {name}l:{loops} = transform.structured.tile_using_for {handle} "
              f"tile_sizes {tiles} : (!transform.any_op) -> ({_handles(loops + 1)})\n")
    if loops == 1:  # a single result is not a pack: `%x:1` is printed `%x`
        script = script.replace(f"{name}l:1", f"{name}l")
        return script, name, [f"{name}l"]
    return script, name, [f"{name}l#{i}" for i in range(loops)]


def _peel(loop: str, op_name: str) -> tuple[str, str, str]:
    """(transform ops, op handle in the main loop, op handle in the remainder loop)."""
    name = f"%d{next(_names)}"
    return (
        f"    {name}f = transform.cast {loop} : !transform.any_op to !transform.op<\"scf.for\">\n"
        f"    {name}m, {name}r = transform.loop.peel {name}f : (!transform.op<\"scf.for\">) "
        f"-> (!transform.any_op, !transform.any_op)\n"
        # The main loop's tile sizes are constants now: folded into static shapes.
        f"    transform.apply_patterns to {name}m {{\n"
        f"      transform.apply_patterns.canonicalization\n"
        f"    }} : !transform.any_op\n"
        f"    {name}mo = transform.structured.match ops{{[\"{op_name}\"]}} in {name}m "
        f": (!transform.any_op) -> !transform.any_op\n"
        f"    {name}ro = transform.structured.match ops{{[\"{op_name}\"]}} in {name}r "
        f": (!transform.any_op) -> !transform.any_op\n"), f"{name}mo", f"{name}ro"


def _by_one(tiles: list[int], dim: int) -> list[int]:
    return [1 if d == dim else 0 for d in range(len(tiles))]


def tile_and_vectorize(handle: str, op_name: str, tiles: list[int], dynamic: list[bool],
                       remainder_tiles: list[int] | None = None) -> str:
    """Transform ops that tile `handle` by `tiles` (0: not tiled) and vectorize it,
    where `dynamic[d]` says that dim d's extent is not a multiple of tiles[d] for
    sure. Each such dim but the innermost tiled one is split first (its tile loop
    peeled, the remainder tiled by 1 along it and then by `remainder_tiles`, default
    `tiles`), recursively, so that the loops of the other dims stay inside (a
    contraction's K loop innermost around its register tile); the innermost tiled
    one is peeled after tiling, its remainder done one element at a time."""
    remainder_tiles = remainder_tiles or tiles
    tiled = [d for d, t in enumerate(tiles) if t > 1]
    splits = [d for d in tiled[:-1] if dynamic[d]]
    if splits:
        d = splits[0]
        script, _, loops = _tile(handle, [tiles[d] if i == d else 0 for i in range(len(tiles))])
        peel, main, rest = _peel(loops[0], op_name)
        script += peel
        still = [flag and i != d for i, flag in enumerate(dynamic)]
        script += tile_and_vectorize(main, op_name, [0 if i == d else t for i, t in
                                                     enumerate(tiles)], still)
        ones, rest_op, _ = _tile(rest, _by_one(tiles, d))
        return script + ones + tile_and_vectorize(
            rest_op, op_name, [0 if i == d else t for i, t in enumerate(remainder_tiles)], still)
    script, op, loops = _tile(handle, tiles)
    if tiled and dynamic[tiled[-1]]:
        d = tiled[-1]
        peel, main, rest = _peel(loops[sum(1 for t in tiles[:d] if t)], op_name)
        ones, rest_op, _ = _tile(rest, _by_one(tiles, d))
        return (script + peel + f"    transform.structured.vectorize {main} : !transform.any_op\n"
                + ones + f"    transform.structured.vectorize {rest_op} : !transform.any_op\n")
    return script + f"    transform.structured.vectorize {op} : !transform.any_op\n"


def forall_blocks(handle: str, index: int, rank: int, blocks: int) -> tuple[str, str]:
    """(transform ops, op handle inside): the op's outermost dim split into `blocks`
    blocks of an scf.forall (its extent is dynamic: the blocks' size too)."""
    tiles = [blocks] + [0] * (rank - 1)
    return (f"    %b{index}, %bl{index} = transform.structured.tile_using_forall {handle} "
            f"num_threads {tiles} : (!transform.any_op) -> (!transform.any_op, "
            f"!transform.any_op)\n"), f"%b{index}"
