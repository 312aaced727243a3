"""Row reductions as one block per row (or per row slice): registers, then warp shuffles.

A `linalg.generic` reduction whose innermost (contiguous) input dim is reduced,

    out[P] = comb(out[P], f(ins[P, R]))      (P kept dims first, R reduction dims)

(`x.sum(-1)`, `amax(-1)`, the max and sum of softmax, the mean/variance sums of
layer_norm, full reductions) becomes a `gpu.launch` built here, before the
`convert-linalg-to-parallel-loops` route of gpu.pipeline:

    grid  = |P| * G blocks (G blocks share one row when there are too few rows),
    block = T threads (a power of two, 32 <= T <= 256, <= |R| / G),
    workgroup memory: T/32 partials (one per warp; none when T = 32).

    acc = f(ins[p, g*T + t])                                (every thread has one)
    for r = (g + G)*T + t; r < |R|; r += G*T: acc = comb(acc, f(ins[p, r]))
    total = block_allreduce(acc)      (warp_reduce.py: xor-shuffle butterfly per
                                       warp, lane 0 -> smem[warp], one barrier, the
                                       T/32 partials combined by shuffles)
    t == 0: out[p] = comb(out[p], total)        (G > 1: one atomic per block)

Rows shorter than 64 elements get T = 32, one warp, and are packed min(8, |P|) rows to a
block (warp w of block b owns row 8b + w; t above is then the lane), since blocks of 32
threads would cap an SM at 32 blocks, half its 2048 threads. The last block's spare warps
(|P| not a multiple of 8) reduce the last row again and store nothing, so the loads and
shuffles need no guard.

Consecutive threads read consecutive elements (coalesced), each thread accumulates in a
register, and global memory is written once per block. No identity value is needed:
each thread starts from its first element and the output's initial value (the preceding
fill) is combined in at the end; with one block per row and a constant fill right
before, the fill's value is combined in instead and the fill is dropped (every output
element is written once, the output is never read). When the row length is a multiple
of G*T the per-thread loop has a constant trip count, which LLVM unrolls (all loads of
a thread in flight).

The block combines in registers with warp shuffles and one barrier (log2(T) + 1
barriers and T words of shared memory with a shared-memory tree). The emulator driver
(lowering/gpu/emulator_warps.py) runs each top-level `gpu.shuffle` as a phase boundary, like
a barrier, so the shuffles are emitted outside any `scf.if`. Accumulation types are
unchanged (64-bit and 16-bit values move as 32-bit shuffles of their bits). Combiners
without an atomic (mulf/muli) always use G = 1.
"""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import affine, arith, gpu, memref, scf

from ..ir import cidx, fill_before, loop_extents
from ...mlir_runner import walk
from .reductions import ATOMIC_KINDS, GENERIC_KINDS, body_values, match_reduction
from .warp_reduce import WARP, block_allreduce, partials_needed

# Largest block; a power of two (the tree halves it).
MAX_THREADS = 256
# Rows shorter than this stay one thread per row (gpu.pipeline's default route).
MIN_ROW = 32
# Blocks wanted in flight: 132 SMs (H100 SXM) x 4 blocks of 256 threads. Fewer rows than
# this split each row over G blocks combined by atomics.
TARGET_BLOCKS = 4 * 132
# Each thread of a split row folds at least this many elements before the combine.
MIN_PER_THREAD = 4


def _innermost_reduced(op, npar: int) -> bool:
    """The first input's fastest-varying index is the last reduction dim (coalesced rows)."""
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if not op.inputs or not isinstance(op.inputs[0].type, ir.MemRefType):
        return False
    results = list(maps[0].results)
    if not results or not isinstance(results[-1], ir.AffineDimExpr):
        return False
    n = maps[0].n_dims
    if ir.AffineDimExpr(results[-1]).position != n - 1 or npar == n:
        return False
    strides, _ = ir.MemRefType(op.inputs[0].type).get_strides_and_offset()
    if strides[-1] != 1:
        return False
    # Every input that walks the reduced dims does so the same way (x, or x and y of a
    # row dot product); a contraction (matmul: A[i, k] and B[k, j]) is not a row.
    reduced = set(range(npar, n))
    walking = {str(m) for v, m in zip(op.inputs, maps)
               if isinstance(v.type, ir.MemRefType)
               and any(isinstance(x, ir.AffineDimExpr) and ir.AffineDimExpr(x).position
                       in reduced for x in m.results)}
    return len(walking) == 1


def _supported_type(t: ir.Type) -> bool:
    if isinstance(t, (ir.F16Type, ir.BF16Type, ir.F32Type, ir.F64Type)):
        return True
    return isinstance(t, ir.IntegerType) and ir.IntegerType(t).width in (32, 64)


def plan_shape(kept: int, reduced: int, kind: str) -> tuple[int, int]:
    """(threads per block T, blocks per row G) for a row reduction."""
    threads = min(MAX_THREADS, 1 << (reduced.bit_length() - 1))
    blocks = 1
    if kind not in GENERIC_KINDS and kept < TARGET_BLOCKS:
        blocks = max(1, min(-(-TARGET_BLOCKS // kept), reduced // (threads * MIN_PER_THREAD)))
    return threads, blocks


def _delinearize(lin, extents):
    """Row-major ivs of `lin` over `extents` (innermost fastest)."""
    ivs, rest = [], lin
    for i, ext in reversed(list(enumerate(extents))):
        if i == 0:
            ivs.append(rest)
        else:
            ivs.append(arith.RemUIOp(rest, cidx(ext)).result)
            rest = arith.DivUIOp(rest, cidx(ext)).result
    return ivs[::-1]


def _rewrite(op, comb, e, extents: list[int], npar: int) -> None:
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    par_ext, red_ext = extents[:npar], extents[npar:]
    kept, total_r = math.prod(par_ext), math.prod(red_ext)
    kind = ATOMIC_KINDS[comb.name]
    threads, per_row = plan_shape(kept, total_r, kind)
    # Rows of one warp: several rows per block, one per warp (see the module docstring).
    rows_per_block = min(MAX_THREADS // WARP, kept) if threads == WARP and per_row == 1 else 1
    # One block per row writes every output element once: a constant fill right before
    # is folded into the combine (no read of the output, no fill launch).
    fill = fill_before(op) if per_row == 1 else None
    out = op.outputs[0]
    acc_type = e.type
    index = ir.IndexType.get()
    workgroup = ir.Attribute.parse("#gpu.address_space<workgroup>")
    partials = partials_needed(threads)  # one per warp; none for a single warp
    smem_types = [ir.MemRefType.get([partials], acc_type, memory_space=workgroup)
                  ] if partials else []
    with ir.InsertionPoint(op), op.location:
        one = cidx(1)
        grid = -(-kept // rows_per_block) * per_row
        launch = gpu.LaunchOp.__mro__[1](None, [], cidx(grid), one, one,
                                         cidx(threads * rows_per_block), one, one)
        launch.attributes["workgroup_attributions"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), len(smem_types))
        body = launch.regions[0].blocks.append(*([index] * 12), *smem_types)
    block_x, tid = body.arguments[0], body.arguments[3]
    smem = body.arguments[12] if partials else None

    def combine(a, b):
        new = comb.clone()
        new.operands[0], new.operands[1] = a, b
        return new.results[0]

    with ir.InsertionPoint(body), op.location:
        owner = None  # whether this warp's row exists (packed rows, last block)
        if per_row > 1:
            row = arith.DivUIOp(block_x, cidx(per_row)).result
            part = arith.RemUIOp(block_x, cidx(per_row)).result
        elif rows_per_block > 1:
            slot = arith.AddIOp(arith.MulIOp(block_x, cidx(rows_per_block)).result,
                                arith.DivUIOp(tid, cidx(WARP)).result).result
            # The last block's spare warps reduce the last row again (no guard around
            # the loads and shuffles, which must stay top-level) and store nothing.
            row, part = arith.MinUIOp(slot, cidx(kept - 1)).result, None
            if kept % rows_per_block:
                owner = arith.CmpIOp(arith.CmpIPredicate.ult, slot, cidx(kept)).result
            tid = arith.RemUIOp(tid, cidx(WARP)).result  # the lane: thread of its row
        else:
            row, part = block_x, None
        pivs = _delinearize(row, par_ext) if npar else []

        def value_at(r):
            ivs = pivs + _delinearize(r, red_ext)
            return body_values(op, ivs, comb, {})[e]

        stride = threads * per_row
        first = tid
        if part is not None:
            first = arith.AddIOp(arith.MulIOp(part, cidx(threads)).result, tid).result
        acc = value_at(first)
        if total_r % stride == 0:
            # Constant trip count: LLVM unrolls it, every load of a thread in flight.
            loop = scf.ForOp(one, cidx(total_r // stride), one, [acc])
            with ir.InsertionPoint(loop.body):
                r = arith.AddIOp(arith.MulIOp(loop.induction_variable, cidx(stride)).result,
                                 first).result
                scf.YieldOp([combine(loop.inner_iter_args[0], value_at(r))])
        else:
            start = arith.AddIOp(first, cidx(stride)).result
            loop = scf.ForOp(start, cidx(total_r), cidx(stride), [acc])
            with ir.InsertionPoint(loop.body):
                scf.YieldOp([combine(loop.inner_iter_args[0],
                                     value_at(loop.induction_variable))])
        total = block_allreduce(loop.results[0], combine, tid, threads, smem)
        leader = arith.CmpIOp(arith.CmpIPredicate.eq, tid, cidx(0)).result
        if owner is not None:
            leader = arith.AndIOp(leader, owner).result
        branch = scf.IfOp(leader)
        with ir.InsertionPoint(branch.then_block):
            out_idx = [affine.AffineApplyOp(ir.AffineMap.get(npar, 0, [x]), pivs).result
                       for x in maps[-1].results]
            if per_row > 1:
                memref.AtomicRMWOp(arith.AtomicRMWKind[kind], total, out, out_idx)
            elif fill is not None:
                memref.StoreOp(combine(fill[1], total), out, out_idx)
            else:
                old = memref.LoadOp(out, out_idx).result
                memref.StoreOp(combine(old, total), out, out_idx)
            scf.YieldOp([])
        gpu.TerminatorOp()
    op.operation.erase()
    if fill is not None:
        fill[0].erase()


def row_reductions(module) -> int:
    """Rewrite every reduction over contiguous rows of at least MIN_ROW elements into a
    block-per-row gpu.launch; return how many were rewritten.

    Expects generics with parallel dims first (gpu.pipeline interchanges them)."""
    count = 0
    for op in [op.opview for op in walk(module) if op.name == "linalg.generic"]:
        if op.operation.parent.name != "func.func":
            continue
        iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        npar = sum("parallel" in t for t in iters)
        if npar == len(iters) or any("parallel" in t for t in iters[npar:]):
            continue
        if any(not isinstance(v.type, ir.MemRefType) for v in op.outputs):
            continue
        extents, matched = loop_extents(op), match_reduction(op)
        if extents is None or matched is None or not _innermost_reduced(op, npar):
            continue
        comb, e, _ = matched
        if (math.prod(extents[npar:]) < MIN_ROW or math.prod(extents[:npar]) < 1
                or not _supported_type(e.type)):
            continue
        _rewrite(op, comb, e, extents, npar)
        count += 1
    return count
