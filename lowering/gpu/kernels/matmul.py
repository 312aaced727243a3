"""Matmul / batch matmul as a shared-memory tiled kernel with 8x8 register tiles and FMA.

A generalized contraction `C[b.., i, j] += A[..] * B[..]` (iterators parallel.., i, j
parallel, k reduction, after gpu.pipeline puts parallel dims first; A and B index any
two of i/j/k, so `x @ w.t()` and `x.t() @ g` qualify) becomes a `gpu.launch`:

    grid  = batch x ceil(M / 128) x ceil(N / 128) blocks of 256 threads (16 x 16),
    workgroup memory: As[16][128], Bs[16][128] (k-major: the inner loop reads rows).

    acc[8][8] = 0                                   (64 registers per thread)
    for k0 in 0..K step 16:                         (scf.for, acc as iter_args)
        each thread loads 8 elements of the A tile and 8 of the B tile (zero outside
        the matrix), stores them to As/Bs;  barrier
        for kk in 0..16 (unrolled): a[8] = As[kk][rows of t], b[8] = Bs[kk][cols of t],
                                   acc[i][j] = fma(a[i], b[j], acc[i][j])
        barrier
    C[rows, cols] = init + acc                      (guarded at the matrix edges)

A thread's rows are ty*4 + {0..3} and 64 + ty*4 + {0..3} (cols likewise with tx), so
a warp's shared reads are 2-way bank conflicted at most. Per k step a thread issues 16
shared loads for 64 FMAs, the ratio at which H100's shared bandwidth (128 B/clk/SM)
keeps up with its FP32 FMA rate. BK = 16 halves the dependent global round trips per
thread (one per k tile) against BK = 8 for 8 KiB more shared memory. The output's
initial value is the constant fill right before (folded: the fill is dropped) or read
once at the end.

The emulator driver runs kernels whose barriers are top-level only; `unroll_barrier_loops`
fully unrolls this kernel's k loop (constant bounds, uniform across the block) for the
CPU build, which is the same computation.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from mlir import ir
from mlir.dialects import affine, arith, gpu, math as mmath, memref, scf

from ..ir import cidx, fill_before, launch_before, loop_extents
from ...mlir_runner import walk

BM = BN = 128
BK = 16
TM = TN = 8
THREADS = 256  # 16 x 16
MIN_MN = 32


def _dims(expr_list):
    out = []
    for e in expr_list:
        if not isinstance(e, ir.AffineDimExpr):
            return None
        out.append(ir.AffineDimExpr(e).position)
    return out


def contraction_maps(op):
    """The indexing maps of `op` if it has the shape of a contraction on buffers, C[batch..,
    i, j] (+)= A[..] (*) B[..] (iterators batch.., i, j parallel, k reduction; A indexes
    batch.., i, k and B batch.., k, j, in any order after the batch dims), else None.
    The body and element types are the caller's to check (here and in mma.py)."""
    if len(op.inputs) != 2 or len(op.outputs) != 1:
        return None
    if not all(isinstance(v.type, ir.MemRefType) for v in list(op.inputs) + list(op.outputs)):
        return None
    iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    n = len(iters)
    if n < 3 or any("parallel" not in t for t in iters[:-1]) or "parallel" in iters[-1]:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    da, db, dc = (_dims(m.results) for m in maps)
    if None in (da, db, dc) or dc != list(range(n - 1)):
        return None
    batch, i, j, k = list(range(n - 3)), n - 3, n - 2, n - 1
    if sorted(da) != sorted(batch + [i, k]) or sorted(db) != sorted(batch + [k, j]):
        return None
    if da[:len(batch)] != batch or db[:len(batch)] != batch:
        return None
    return maps


def _match(op):
    """The indexing maps if `op` is an f32 contraction (mulf + addf body), else None."""
    maps = contraction_maps(op)
    if maps is None:
        return None
    elem = ir.MemRefType(op.outputs[0].type).element_type
    if not isinstance(elem, ir.F32Type):
        return None
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if [o.name for o in ops] != ["arith.mulf", "arith.addf", "linalg.yield"]:
        return None
    a_arg, b_arg, c_arg = block.arguments
    mul, add = ops[0], ops[1]
    if {mul.operands[0], mul.operands[1]} != {a_arg, b_arg}:
        return None
    if {add.operands[0], add.operands[1]} != {mul.results[0], c_arg}:
        return None
    return maps


def stage_tile(src, amap, n, fixed, rows_dim, k_dim, row0, k0, rows_ext, k_ext, tid, smem,
               rows_tile: int, bk: int, threads: int, k_major_smem: bool, elem) -> None:
    """All `threads` threads copy a rows_tile x bk tile of `src` into smem, zero outside
    the matrix, widened to `elem`; smem is [kk][r] (k_major_smem) or [r][kk]. Shared by
    this kernel and the tensor-core one (mma.py)."""
    # Consecutive threads walk k when k indexes the operand's contiguous (last) dim:
    # coalesced loads either way.
    k_fastest = ir.AffineDimExpr(amap.results[-1]).position == k_dim
    for e in range(rows_tile * bk // threads):
        idx = arith.AddIOp(tid, cidx(e * threads)).result
        if k_fastest:
            kk = arith.RemUIOp(idx, cidx(bk)).result
            r = arith.DivUIOp(idx, cidx(bk)).result
        else:
            r = arith.RemUIOp(idx, cidx(rows_tile)).result
            kk = arith.DivUIOp(idx, cidx(rows_tile)).result
        gr = arith.AddIOp(row0, r).result
        gk = arith.AddIOp(k0, kk).result
        inb = arith.AndIOp(
            arith.CmpIOp(arith.CmpIPredicate.ult, gr, cidx(rows_ext)).result,
            arith.CmpIOp(arith.CmpIPredicate.ult, gk, cidx(k_ext)).result).result
        branch = scf.IfOp(inb, [elem], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            ivs = [v if v is not None else cidx(0) for v in fixed]  # unused dims: 0
            ivs[rows_dim], ivs[k_dim] = gr, gk
            idx_v = [affine.AffineApplyOp(ir.AffineMap.get(n, 0, [x]), ivs).result
                     for x in amap.results]
            value = memref.LoadOp(src, idx_v).result
            if value.type != elem:
                value = arith.ExtFOp(elem, value).result
            scf.YieldOp([value])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([arith.ConstantOp(elem, 0.0).result])
        memref.StoreOp(branch.results[0], smem, [kk, r] if k_major_smem else [r, kk])


def _rewrite(op, maps) -> None:
    n, batch_ext, m_ext, n_ext, k_ext, tiles_m, tiles_n = tile_grid(op, BM, BN)
    a, b = op.inputs[0], op.inputs[1]
    c = op.outputs[0]
    fill = fill_before(op)
    f32 = ir.F32Type.get()
    workgroup = ir.Attribute.parse("#gpu.address_space<workgroup>")
    tile_t = ir.MemRefType.get([BK, BM], f32, memory_space=workgroup)
    body = launch_before(op, math.prod(batch_ext) * tiles_m * tiles_n, THREADS,
                        [tile_t, tile_t])
    bid, tid = body.arguments[0], body.arguments[3]
    a_s, b_s = body.arguments[12], body.arguments[13]
    with ir.InsertionPoint(body), op.location:
        bivs, row0, col0 = tile_origin(bid, tiles_m, tiles_n, batch_ext, BM, BN)
        ty = arith.DivUIOp(tid, cidx(16)).result
        tx = arith.RemUIOp(tid, cidx(16)).result
        # Thread rows/cols in the tile: t*4 + {0..3} and 64 + t*4 + {0..3}.
        ty4, tx4 = (arith.MulIOp(v, cidx(4)).result for v in (ty, tx))
        rows = [arith.AddIOp(ty4, cidx(h * 64 + q)).result for h in (0, 1) for q in range(4)]
        cols = [arith.AddIOp(tx4, cidx(h * 64 + q)).result for h in (0, 1) for q in range(4)]
        zero = arith.ConstantOp(f32, 0.0).result
        i_dim, j_dim, k_dim = n - 3, n - 2, n - 1
        fixed = bivs + [None, None, None]
        loop = scf.ForOp(cidx(0), cidx(k_ext), cidx(BK), [zero] * (TM * TN))
        with ir.InsertionPoint(loop.body):
            k0 = loop.induction_variable
            stage_tile(a, maps[0], n, fixed, i_dim, k_dim, row0, k0, m_ext, k_ext, tid, a_s,
                       BM, BK, THREADS, True, f32)
            stage_tile(b, maps[1], n, fixed, j_dim, k_dim, col0, k0, n_ext, k_ext, tid, b_s,
                       BN, BK, THREADS, True, f32)
            gpu.BarrierOp()
            acc = list(loop.inner_iter_args)
            for kk in range(BK):
                kc = cidx(kk)
                av = [memref.LoadOp(a_s, [kc, r]).result for r in rows]
                bv = [memref.LoadOp(b_s, [kc, q]).result for q in cols]
                acc = [mmath.FmaOp(av[i], bv[j], acc[i * TN + j]).result
                       for i in range(TM) for j in range(TN)]
            gpu.BarrierOp()
            scf.YieldOp(acc)
        out_map = maps[2]
        for i in range(TM):
            gi = arith.AddIOp(row0, rows[i]).result
            for j in range(TN):
                gj = arith.AddIOp(col0, cols[j]).result
                accumulate_in_bounds(c, out_map, bivs, gi, gj, (m_ext, n_ext), fill,
                                     loop.results[i * TN + j])
        gpu.TerminatorOp()
    op.operation.erase()
    if fill is not None:
        fill[0].erase()


class TileGrid(NamedTuple):
    """A contraction generic's loops (batch.., i, j, k) and its grid of output tiles."""

    rank: int              # number of loops
    batch: list[int]       # batch extents
    m: int
    n: int
    k: int
    tiles_m: int
    tiles_n: int


def tile_grid(op, bm: int, bn: int) -> TileGrid:
    """The loops of contraction `op` and how many bm x bn tiles cover its output."""
    ext = loop_extents(op)
    n = len(ext)
    m_ext, n_ext = ext[n - 3], ext[n - 2]
    return TileGrid(n, ext[:n - 3], m_ext, n_ext, ext[n - 1], -(-m_ext // bm), -(-n_ext // bn))


def accumulate_in_bounds(c, out_map, bivs, gi, gj, extents: tuple[int, int], fill,
                         partial) -> None:
    """Where (gi, gj) lies inside the M x N output: c[out_map(bivs, gi, gj)] = init +
    partial, init being the constant of the `fill` folded into the kernel (fill_before)
    or c's current value. `partial` is a value, or a function building it (run after
    init is read)."""
    m_ext, n_ext = extents
    inb = arith.AndIOp(
        arith.CmpIOp(arith.CmpIPredicate.ult, gi, cidx(m_ext)).result,
        arith.CmpIOp(arith.CmpIPredicate.ult, gj, cidx(n_ext)).result).result
    branch = scf.IfOp(inb)
    with ir.InsertionPoint(branch.then_block):
        ivs = bivs + [gi, gj]
        idx = [affine.AffineApplyOp(ir.AffineMap.get(len(ivs), 0, [x]), ivs).result
               for x in out_map.results]
        init = fill[1] if fill is not None else memref.LoadOp(c, idx).result
        value = partial() if callable(partial) else partial
        memref.StoreOp(arith.AddFOp(init, value).result, c, idx)
        scf.YieldOp([])


def tile_origin(bid, tiles_m: int, tiles_n: int, batch_ext: list[int], bm: int, bn: int):
    """Block id -> (batch indices, first row, first column) of its output tile: blocks
    walk the N tiles fastest, then the M tiles, then the batch dims (last fastest)."""
    tn_i = arith.RemUIOp(bid, cidx(tiles_n)).result
    rest = arith.DivUIOp(bid, cidx(tiles_n)).result
    tm_i = arith.RemUIOp(rest, cidx(tiles_m)).result
    bidx = arith.DivUIOp(rest, cidx(tiles_m)).result
    bivs = []
    for d, e in reversed(list(enumerate(batch_ext))):
        if d == 0:
            bivs.append(bidx)
        else:
            bivs.append(arith.RemUIOp(bidx, cidx(e)).result)
            bidx = arith.DivUIOp(bidx, cidx(e)).result
    bivs.reverse()
    return (bivs, arith.MulIOp(tm_i, cidx(bm)).result, arith.MulIOp(tn_i, cidx(bn)).result)


def rewrite_contractions(module, match, rewrite, min_mn: int) -> int:
    """Call `rewrite(op, match(op))` on every top-level contraction generic that `match`
    accepts and whose M and N are at least `min_mn` (and K at least 1); returns how many.
    Shared by this kernel and the tensor-core one (mma.py)."""
    count = 0
    for op in [op.opview for op in walk(module) if op.name == "linalg.generic"]:
        if op.operation.parent.name != "func.func":
            continue
        found = match(op)
        ext = loop_extents(op)
        if found is None or ext is None:
            continue
        if ext[-3] < min_mn or ext[-2] < min_mn or ext[-1] < 1:
            continue
        rewrite(op, found)
        count += 1
    return count


def tile_matmuls(module) -> int:
    """Rewrite every float contraction with M, N >= 32 into the tiled kernel."""
    return rewrite_contractions(module, _match, _rewrite, MIN_MN)


def unroll_barrier_loops(kernel) -> None:
    """For the emulator's CPU build: fully unroll top-level `scf.for`s of a gpu.func that
    contain a `gpu.barrier` (constant bounds; the same for every thread of the block), so
    that every barrier is top-level. Semantics are unchanged."""
    block = kernel.regions[0].blocks[0]
    for op in list(block.operations):
        op = op.operation
        if op.name != "scf.for" or not _has_barrier(op):
            continue
        bounds = [_const(v) for v in list(op.operands)[:3]]
        if None in bounds:
            raise ValueError("a loop with barriers needs constant bounds")
        lb, ub, st = bounds
        loop_body = op.regions[0].blocks[0]
        values = list(op.operands)[3:]
        for iv in range(lb, ub, st):
            with ir.InsertionPoint(op), op.location:
                mapping = {loop_body.arguments[0]: cidx(iv)}
            for arg, v in zip(list(loop_body.arguments)[1:], values):
                mapping[arg] = v
            yielded = None
            for inner in loop_body.operations:
                inner = inner.operation
                if inner.name == "scf.yield":
                    yielded = [mapping.get(v, v) for v in inner.operands]
                    continue
                clone = inner.clone(ip=ir.InsertionPoint(op))
                _remap(clone, mapping)
                for old, new in zip(inner.results, clone.results):
                    mapping[old] = new
            values = yielded
        for result, v in zip(op.results, values):
            result.replace_all_uses_with(v)
        op.erase()


def _remap(op, mapping) -> None:
    for o in walk(op):
        for i, operand in enumerate(o.operands):
            if operand in mapping:
                o.operands[i] = mapping[operand]


def _has_barrier(op) -> bool:
    return any(o.name == "gpu.barrier" for o in walk(op))


def _const(v):
    owner = v.owner
    owner = getattr(owner, "operation", owner)
    if isinstance(owner, ir.Operation) and owner.name == "arith.constant":
        return ir.IntegerAttr(owner.attributes["value"]).value
    return None
