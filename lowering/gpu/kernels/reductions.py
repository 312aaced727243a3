"""Two-level (chunk + atomic) rewrite of linalg reductions on memrefs, for the CUDA path.

`convert-linalg-to-parallel-loops` keeps reduction dims as a serial `scf.for` inside the
`scf.parallel` over the kept dims. That is fine when there are many kept elements, but a
full reduction (`x.sum()`) would run on one thread. Here such a `linalg.generic`

    out[P] = comb(out[P], f(ins[P, R]))      (P kept dims first, R reduction dims)

becomes

    scf.parallel (k, p..) over (ceil(|R| / C), P..):
        acc = f(ins[p, r0]); for r in chunk k (after r0): acc = comb(acc, f(ins[p, r]))
        memref.atomic_rmw <comb> acc, out[p]

Each thread starts from its chunk's first element, so no identity value is needed; the
output's initial value (the preceding fill) is combined in by the atomics. Combiners
without a usable atomic (mulf/muli: `prod`) store each chunk's result into a temporary
`[chunks, P..]` buffer instead, and a second loop folds the chunks into the output. Only generics
with one output whose body yields `comb(out, e)` (e independent of out) with an atomic
`comb` are rewritten; others keep the serial inner loop.
"""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import affine, arith, memref, scf

from ..ir import cidx, loop_extents
from ...mlir_runner import walk

# arith combiner -> memref.atomic_rmw kind. The NVVM lowering (MemRefToLLVM) turns each
# into one llvm.atomicrmw, except mulf/muli, which have no atomicrmw form (and LLVM 22's
# generic_atomic_rmw lowering emits an invalid f32 cmpxchg): see GENERIC_KINDS. Float max/min
# become CAS loops in the NVPTX backend where no native atomic exists.
ATOMIC_KINDS = {
    "arith.addf": "addf",
    "arith.addi": "addi",
    "arith.mulf": "mulf",
    "arith.muli": "muli",
    "arith.maximumf": "maximumf",
    "arith.minimumf": "minimumf",
    "arith.maxnumf": "maxnumf",
    "arith.minnumf": "minnumf",
    "arith.maxsi": "maxs",
    "arith.minsi": "mins",
    "arith.maxui": "maxu",
    "arith.minui": "minu",
    "arith.ori": "ori",
}
# Kinds without a usable atomic: chunks store partial results into a temporary and a
# second kernel folds them into the output (two passes, no atomics, deterministic).
GENERIC_KINDS = frozenset({"mulf", "muli"})


def match_reduction(op):
    """Return (combiner op, value e, out block arg) if `op` is a splittable reduction."""
    if len(op.outputs) != 1:
        return None
    block = op.regions[0].blocks[0]
    out_arg = block.arguments[len(block.arguments) - 1]
    yield_op = block.operations[len(block.operations) - 1]
    if len(yield_op.operands) != 1:
        return None
    comb = yield_op.operands[0].owner
    comb = getattr(comb, "operation", comb)
    if not isinstance(comb, ir.Operation) or comb.name not in ATOMIC_KINDS:
        return None
    a, b = comb.operands[0], comb.operands[1]
    if a == out_arg:
        e = b
    elif b == out_arg:
        e = a
    else:
        return None
    if e == out_arg:
        return None
    # The out value may feed nothing but the combiner.
    uses = [u.owner for u in out_arg.uses]
    if any(u != comb for u in uses):
        return None
    return comb, e, out_arg


def clone_body(block, ivs, skip, mapping):
    """Clone a linalg body's ops (all but its yield and `skip`) at the insertion point,
    with `linalg.index` replaced by `ivs` and operands remapped through `mapping`;
    returns `mapping`, extended with the clones' results."""
    for inner in list(block.operations)[:-1]:
        if skip is not None and inner == skip:
            continue
        if inner.name == "linalg.index":
            mapping[inner.results[0]] = ivs[ir.IntegerAttr(inner.attributes["dim"]).value]
            continue
        clone = inner.clone()
        for i, operand in enumerate(clone.operands):
            if operand in mapping:
                clone.operands[i] = mapping[operand]
        for old, new in zip(inner.results, clone.results):
            mapping[old] = new
    return mapping


def body_values(op, ivs, skip, mapping):
    """Load the inputs at `ivs` and clone the body (except `skip`); return the mapping."""
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    block = op.regions[0].blocks[0]
    n = len(ivs)
    for arg, v, m in zip(block.arguments, op.inputs, maps):
        if not isinstance(v.type, ir.MemRefType):
            mapping[arg] = v  # scalar input: used as is
            continue
        idx = [
            affine.AffineApplyOp(ir.AffineMap.get(n, 0, [e]), ivs).result for e in m.results
        ]
        mapping[arg] = memref.LoadOp(v, idx).result
    return clone_body(block, ivs, skip, mapping)


def _rewrite(op, comb, e, chunk: int, extents: list[int], npar: int) -> None:
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    par_ext, red_ext = extents[:npar], extents[npar:]
    total_r = math.prod(red_ext)
    nchunks = -(-total_r // chunk)
    out = op.outputs[0]
    index = ir.IndexType.get()
    kind, partials = ATOMIC_KINDS[comb.name], None
    with ir.InsertionPoint(op), op.location:
        if kind in GENERIC_KINDS:
            # No atomic for this combiner: each chunk stores its partial result, a second
            # loop combines them (see _combine_partials).
            elem = ir.MemRefType(out.type).element_type
            partials = memref.AllocOp(ir.MemRefType.get([nchunks, *par_ext], elem), [], []).result
        else:
            kind = arith.AtomicRMWKind[kind]
        zero, one = cidx(0), cidx(1)
        # Chunk index outermost: consecutive threads take consecutive kept elements, so a
        # column reduction (`x.sum(0)`) reads coalesced rows.
        ubs = [cidx(nchunks)] + [cidx(x) for x in par_ext]
        loop = scf.ParallelOp([], [zero] * len(ubs), ubs, [one] * len(ubs), [])
        body = loop.regions[0].blocks.append(*([index] * len(ubs)))
    with ir.InsertionPoint(body), op.location:
        chunk_iv = body.arguments[0]
        pivs = list(body.arguments)[1:]
        start = arith.MulIOp(chunk_iv, cidx(chunk)).result
        end = arith.AddIOp(start, cidx(chunk)).result
        if total_r % chunk:
            end = arith.MinUIOp(end, cidx(total_r)).result

        def ivs_at(r):
            ivs, rest = [], r
            for i, ext in reversed(list(enumerate(red_ext))):
                if i == 0:
                    ivs.append(rest)
                else:
                    ivs.append(arith.RemUIOp(rest, cidx(ext)).result)
                    rest = arith.DivUIOp(rest, cidx(ext)).result
            return pivs + ivs[::-1]

        first = body_values(op, ivs_at(start), comb, {})[e]
        first_next = arith.AddIOp(start, one).result
        loop_r = scf.ForOp(first_next, end, one, [first])
        with ir.InsertionPoint(loop_r.body):
            val = body_values(op, ivs_at(loop_r.induction_variable), comb, {})[e]
            acc = loop_r.inner_iter_args[0]
            new = comb.clone()
            new.operands[0], new.operands[1] = acc, val
            scf.YieldOp([new.results[0]])
        out_idx = [
            affine.AffineApplyOp(ir.AffineMap.get(npar, 0, [x]), pivs).result
            for x in _out_results(maps[-1], npar)
        ]
        if partials is None:
            memref.AtomicRMWOp(kind, loop_r.results[0], out, out_idx)
        else:
            memref.StoreOp(loop_r.results[0], partials, [chunk_iv] + pivs)
        scf.ReduceOp([], 0)
    if partials is not None:
        with ir.InsertionPoint(op), op.location:
            _combine_partials(op, comb, partials, par_ext, nchunks, maps[-1], npar)
            memref.DeallocOp(partials)
    op.operation.erase()


def _combine_partials(op, comb, partials, par_ext, nchunks, out_map, npar) -> None:
    """Second pass of a split reduction without an atomic: one thread per output folds
    the chunks' partial results into it, in chunk order (deterministic)."""
    out = op.outputs[0]
    index = ir.IndexType.get()
    zero, one = cidx(0), cidx(1)
    ubs = [cidx(x) for x in par_ext] or [one]  # scf.parallel needs at least one dim
    loop = scf.ParallelOp([], [zero] * len(ubs), ubs, [one] * len(ubs), [])
    body = loop.regions[0].blocks.append(*([index] * len(ubs)))
    with ir.InsertionPoint(body):
        pivs = list(body.arguments)[:npar]
        out_idx = [affine.AffineApplyOp(ir.AffineMap.get(npar, 0, [x]), pivs).result
                   for x in _out_results(out_map, npar)]
        init = memref.LoadOp(out, out_idx).result
        fold = scf.ForOp(zero, cidx(nchunks), one, [init])
        with ir.InsertionPoint(fold.body):
            part = memref.LoadOp(partials, [fold.induction_variable] + pivs).result
            new = comb.clone()
            new.operands[0], new.operands[1] = fold.inner_iter_args[0], part
            scf.YieldOp([new.results[0]])
        memref.StoreOp(fold.results[0], out, out_idx)
        scf.ReduceOp([], 0)


def _out_results(out_map, npar):  # noqa: ARG001
    """Output map restricted to the parallel dims (reduction dims never index the out)."""
    return list(out_map.results)


def split_reductions(module, chunk: int = 64, split_below: int = 65536) -> int:
    """Rewrite the reductions worth splitting; return how many were rewritten.

    Expects generics with parallel dims first (gpu.pipeline interchanges them)."""
    count = 0
    for op in [op.opview for op in walk(module) if op.name == "linalg.generic"]:
        iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        npar = sum("parallel" in t for t in iters)
        if npar == len(iters):
            continue
        if any(not isinstance(v.type, ir.MemRefType) for v in op.outputs):
            continue
        extents = loop_extents(op)
        matched = match_reduction(op)
        if extents is None or matched is None:
            continue
        kept, reduced = math.prod(extents[:npar]), math.prod(extents[npar:])
        # Enough kept elements already fill the GPU; tiny reductions are not worth atomics.
        if kept >= split_below or reduced < 2 * chunk:
            continue
        comb, e, _ = matched
        _rewrite(op, comb, e, chunk, extents, npar)
        count += 1
    return count
