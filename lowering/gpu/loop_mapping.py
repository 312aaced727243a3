"""The gpu stage's own loop rewrites around upstream's linalg -> parallel loops -> gpu route
(steps 2 and 5 of pipeline.py's docstring, and the host cleanups they need).

- `interchange_parallel_first`: every generic's parallel dims before its reductions, so
  `convert-linalg-to-parallel-loops` puts all of them in the `scf.parallel`.
- `wrap_serial_generics`, `fills_to_memset`: generics left serial become one-thread
  kernels; fills of dense buffers become memsets.
- `map_host_loops`: each top-level `scf.parallel` linearised into one (block, thread) loop
  with an explicit `gpu.loop_dim_map`, with the globals and scalar reads it uses sunk into
  it so kernel outlining captures no host value it cannot pass.
"""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith, gpu, scf

from .ir import GpuLoweringError, cidx, host_func
from .kernels.vectorize import vector_width, vectorize_body
from ..mlir_runner import walk


# --------------------------------------------------------------------------------------
# Step 2: parallel dims first.


def interchange_parallel_first(module: ir.Module) -> None:
    for op in [op.opview for op in walk(module) if op.name == "linalg.generic"]:
        iters = [str(ir.Attribute(a)) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        par = [i for i, t in enumerate(iters) if "parallel" in t]
        red = [i for i, t in enumerate(iters) if "parallel" not in t]
        perm = par + red  # new dim k is old dim perm[k]
        if perm == list(range(len(iters))):
            continue
        n = len(perm)
        newpos = {old: new for new, old in enumerate(perm)}
        sub = ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(newpos[i]) for i in range(n)])
        maps = []
        for m in ir.ArrayAttr(op.attributes["indexing_maps"]):
            amap = ir.AffineMapAttr(m).value
            maps.append(
                ir.AffineMapAttr.get(
                    ir.AffineMap.get(n, 0, [e.compose(sub) for e in amap.results])
                )
            )
        op.attributes["indexing_maps"] = ir.ArrayAttr.get(maps)
        op.attributes["iterator_types"] = ir.ArrayAttr.get(
            [ir.Attribute.parse(iters[o]) for o in perm]
        )
        for inner in op.regions[0].blocks[0].operations:
            if inner.operation.name == "linalg.index":
                old = ir.IntegerAttr(inner.attributes["dim"]).value
                inner.attributes["dim"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), newpos[old]
                )


# --------------------------------------------------------------------------------------
# Step 5: linearise + map every top-level scf.parallel to (block_x, thread_x).


def _const_index(v: ir.Value) -> int | None:
    owner = v.owner
    owner = getattr(owner, "operation", owner)
    if isinstance(owner, ir.Operation) and owner.name == "arith.constant":
        return ir.IntegerAttr(owner.attributes["value"]).value
    return None


def _mapping(proc: str) -> ir.Attribute:
    return ir.Attribute.parse(
        f"#gpu.loop_dim_map<processor = {proc}, map = (d0) -> (d0), bound = (d0) -> (d0)>"
    )


def _map_parallel_loop(loop, block_size: int) -> None:
    """Replace `scf.parallel (i..) = (0..) to (e..)` by a mapped (block, thread) loop."""
    extents = []
    for lb, ub, st in zip(loop.lowerBound, loop.upperBound, loop.step):
        lbv, ubv, stv = _const_index(lb), _const_index(ub), _const_index(st)
        if None in (lbv, ubv, stv):
            raise GpuLoweringError(f"scf.parallel with non-constant bounds: {loop}")
        extents.append((lbv, stv, max(0, -(-(ubv - lbv) // stv))))
    # Elementwise loops: 4 consecutive elements per thread, 16-byte accesses.
    width = vector_width(loop, extents)
    if width > 1:
        extents[-1] = (0, width, extents[-1][2] // width)
    total = math.prod(e[2] for e in extents)
    bsz = max(1, min(block_size, total))
    grid = max(1, -(-total // bsz))
    index = ir.IndexType.get()
    with ir.InsertionPoint(loop), loop.location:
        zero, one = cidx(0), cidx(1)
        new = scf.ParallelOp([], [zero, zero], [cidx(grid), cidx(bsz)], [one, one], [])
        new.attributes["mapping"] = ir.ArrayAttr.get(
            [_mapping("block_x"), _mapping("thread_x")]
        )
        body = new.regions[0].blocks.append(index, index)
    with ir.InsertionPoint(body), loop.location:
        lin = arith.MulIOp(body.arguments[0], cidx(bsz)).result
        lin = arith.AddIOp(lin, body.arguments[1]).result
        if grid * bsz != total:
            inb = arith.CmpIOp(arith.CmpIPredicate.ult, lin, cidx(total))
            guard = scf.IfOp(inb.result)
            inner = guard.then_block
            with ir.InsertionPoint(inner):
                scf.YieldOp([])
            anchor = inner.operations[0]
        else:
            anchor = None
        scf.ReduceOp([], 0)
    ip = ir.InsertionPoint(anchor) if anchor is not None else ir.InsertionPoint(body.operations[-1])
    with ip, loop.location:
        # Innermost dim varies fastest: consecutive threads touch consecutive elements.
        ivs, rest = [], lin
        for i, (lbv, stv, ext) in reversed(list(enumerate(extents))):
            if i == 0:
                q = rest
            else:
                q = arith.RemUIOp(rest, cidx(ext)).result
                rest = arith.DivUIOp(rest, cidx(ext)).result
            if stv != 1:
                q = arith.MulIOp(q, cidx(stv)).result
            if lbv != 0:
                q = arith.AddIOp(q, cidx(lbv)).result
            ivs.append(q)
        ivs.reverse()
    old_body = loop.regions[0].blocks[0]
    target = anchor if anchor is not None else body.operations[len(body.operations) - 1]
    if width > 1:
        vectorize_body(loop, ivs, width, target)
        loop.operation.erase()
        return
    for old_iv, iv in zip(old_body.arguments, ivs):
        old_iv.replace_all_uses_with(iv)
    for op in list(old_body.operations)[:-1]:  # all but the scf.reduce terminator
        op.move_before(target)
    loop.operation.erase()


def wrap_serial_generics(module: ir.Module) -> None:
    """A generic with no parallel dim (rank-0 fill, an unsplittable full reduction) lowers
    to bare loads/stores or a serial scf.for: wrap it in a one-iteration scf.parallel so it
    becomes a (single-thread) kernel instead of host code touching device memory."""
    for op in [op.opview for op in walk(module) if op.name == "linalg.generic"]:
        iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        if any("parallel" in t for t in iters):
            continue
        with ir.InsertionPoint(op), op.location:
            zero, one = cidx(0), cidx(1)
            new = scf.ParallelOp([], [zero], [one], [one], [])
            body = new.regions[0].blocks.append(ir.IndexType.get())
            with ir.InsertionPoint(body):
                scf.ReduceOp([], 0)
        op.operation.move_before(body.operations[0])


def _inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
    return False


def _sink_globals(loop) -> None:
    """Constant tensors bufferize to memref.get_global on the host. The plan has no way to
    upload data, so the kernel reads the global itself: clone the get_global into the loop
    (the future kernel); `gpu-kernel-outlining` then copies the referenced memref.global
    into the gpu.module, where it becomes a device-side constant."""
    host_block = loop.operation.parent.regions[0].blocks[0]
    body = loop.regions[0].blocks[0]
    for g in list(host_block.operations):
        if g.operation.name != "memref.get_global":
            continue
        res = g.results[0]
        uses = [(u.owner, u.operand_number) for u in res.uses]
        inner = [(o, n) for o, n in uses if _inside(o, loop.operation)]
        if not inner:
            continue
        clone = g.operation.clone(ip=ir.InsertionPoint.at_block_begin(body))
        for o, n in inner:
            o.operands[n] = clone.results[0]
        if len(inner) == len(uses):
            g.operation.erase()


def _sinkable(op) -> bool:
    """Host ops a kernel may recompute itself: scalar reads of a buffer (scalar graph
    inputs are 0-d f64 buffers) and side-effect-free scalar arith on them."""
    name = op.name
    if name == "memref.load" or name in _COMPLEX_SCALARS:
        return True
    return name.startswith("arith.") and name != "arith.constant" and not op.regions


# Complex scalars on the host (a complex fill value: complex.create of two constants).
_COMPLEX_SCALARS = {"complex.create", "complex.constant", "complex.re", "complex.im"}


def _sink_scalar_reads(loop) -> None:
    """A value the host reads from device memory (`memref.load` of a scalar graph input,
    and arith on it) cannot stay on the host: the plan has no way to read memory. Clone
    the chain into the loop (the future kernel), which reads the buffer itself; the host
    copies become dead and are erased by `_erase_dead_host_scalars`."""
    host_block = loop.operation.parent.regions[0].blocks[0]
    host_ops = {}
    for position, op in enumerate(host_block.operations):
        if op.operation == loop.operation:
            break
        for result in op.operation.results:
            host_ops[result] = (position, op.operation)
    needed = {}

    def need(value):
        entry = host_ops.get(value)
        if entry is None or not _sinkable(entry[1]) or entry[0] in needed:
            return
        needed[entry[0]] = entry[1]
        for operand in entry[1].operands:
            need(operand)

    for op in walk(loop, post_order=True):
        for operand in op.operands:
            need(operand)
    if not needed:
        return
    body = loop.regions[0].blocks[0]
    ip = ir.InsertionPoint.at_block_begin(body)
    mapping = {}
    for _, op in sorted(needed.items(), key=lambda kv: kv[0]):
        clone = op.clone(ip=ip)
        for i, operand in enumerate(clone.operands):
            if operand in mapping:
                clone.operands[i] = mapping[operand]
        for old, new in zip(op.results, clone.results):
            mapping[old] = new
    clones = {c.owner for c in mapping.values()}

    for op in walk(loop, post_order=True):
        if op in clones:
            continue
        for i, operand in enumerate(op.operands):
            if operand in mapping:
                op.operands[i] = mapping[operand]


def _erase_dead_host_scalars(host) -> None:
    for op in reversed(list(host.regions[0].blocks[0].operations)):
        op = op.operation
        if _sinkable(op) and all(not list(r.uses) for r in op.results):
            op.erase()


def _dense(t: ir.Type) -> bool:
    """Row-major, offset 0: the memref is a whole buffer."""
    mt = ir.MemRefType(t)
    strides, offset = mt.get_strides_and_offset()
    return offset == 0 and strides == [math.prod(mt.shape[i + 1:]) for i in range(mt.rank)]


def fills_to_memset(module: ir.Module) -> None:
    """`linalg.fill` of a whole host buffer with a value whose bytes are all equal (0.0,
    0, -1) -> `gpu.memset`, which the plan turns into a runtime memset: no kernel."""
    import struct

    for op in [op.opview for op in walk(module) if op.name == "linalg.fill"]:
        if op.operation.parent.name != "func.func":
            continue
        value, out = op.operands[0], op.operands[1]
        owner = getattr(value.owner, "operation", value.owner)
        if not isinstance(out.type, ir.MemRefType) or not isinstance(owner, ir.Operation):
            continue
        if owner.name != "arith.constant" or not _dense(out.type):
            continue
        attr, ty = owner.attributes["value"], str(value.type)
        if ty in ("f32", "f64"):
            raw = struct.pack("<f" if ty == "f32" else "<d", ir.FloatAttr(attr).value)
        elif ty in ("i8", "i16", "i32", "i64"):
            width = int(ty[1:]) // 8
            raw = (ir.IntegerAttr(attr).value % (1 << (8 * width))).to_bytes(width, "little")
        else:
            continue
        if len(set(raw)) != 1:
            continue
        with ir.InsertionPoint(op), op.location:
            gpu.MemsetOp(None, [], out, value)
        op.operation.erase()


def map_host_loops(module: ir.Module, block_size: int) -> None:
    host = host_func(module)
    for op in list(host.regions[0].blocks[0].operations):
        if op.operation.name in ("scf.parallel", "gpu.launch"):
            _sink_globals(op)
            _sink_scalar_reads(op)
        if op.operation.name == "scf.parallel":
            _map_parallel_loop(op, block_size)
    _erase_dead_host_scalars(host)
