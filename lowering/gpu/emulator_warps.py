"""Warp-level ops of the CUDA kernels for their CPU builds: matrix fragments and
shuffles become workgroup buffers and barriers.

Both rewrite a `gpu.func` in place before the thread-loop rewrite (gpu/emulator_threads.py),
adding workgroup attributions (`[warps][R][C]` fragment buffers, block-sized shuffle
buffers) that it turns into buffers per block like any workgroup memory, and (for
shuffles) barriers that it turns into phase boundaries like the kernel's own.

A top-level `gpu.shuffle` (the row reductions' warp butterflies, gpu/kernels/warp_reduce.py)
becomes a store of each thread's value into a block-sized workgroup buffer, a barrier,
and a load of the source lane's slot (its warp's base + the PTX `shfl.sync` source lane
for width 32; `valid` as PTX, an invalid lane reads its own value): the barrier's phase
boundary is the exchange. Consecutive shuffles alternate between two buffers per type,
as one's loads share a phase with the next one's stores. Shuffles inside control flow,
widths other than 32 and blocks that are not whole warps are rejected.

Warp-level matrix ops (`gpu.subgroup_mma_*`, the tensor-core matmul of gpu/kernels/mma.py)
have no per-thread meaning: a fragment is spread over the 32 lanes of a warp in a
layout PTX leaves unspecified, and every lane must execute the op together. Every lane
of a warp executes them uniformly (the kernels issue them outside any divergent
control flow), so executing each once per warp is equivalent: each
`!gpu.mma_matrix<RxCxT>` value becomes a per-warp RxC buffer, a workgroup buffer
`[warps][R][C]` indexed by the warp id (a block-level buffer outside the thread loops,
so it survives the barrier fission like any workgroup memory), and each op runs as
plain loops over the tile by lane 0 of its warp (`linear thread id % 32 == 0`): a
load copies from memory into the warp's buffer, compute is `D = C + sum_k ext(A) *
ext(B)` in f32, store copies back out, constant fills. Lane 0 runs before lanes 1-31
of the same phase, so a lane reading what its warp stored (after the kernel's
barrier, as on the GPU) sees it. Buffers are reused once their value is dead
(straight-line liveness), and a compute whose accumulator dies there updates it in
place, so a k loop unrolled for the emulator needs a handful of buffers, not one per
step. Fragment ops inside control flow, fragments as loop-carried values, transposed
loads or operands, non-f32 accumulators and the elementwise/thread-local fragment
ops are rejected (GpuLoweringError), not approximated.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, gpu, memref, scf

from .ir import GpuLoweringError
from ..mlir_runner import walk


_MMA_OPS = ("gpu.subgroup_mma_load_matrix", "gpu.subgroup_mma_store_matrix",
            "gpu.subgroup_mma_compute", "gpu.subgroup_mma_constant_matrix")


def _is_fragment(t: ir.Type) -> bool:
    return str(t).startswith("!gpu.mma_matrix<")


def _fragment_shape(t: ir.Type) -> tuple[int, int, ir.Type, str]:
    """(rows, cols, element type, operand kind) of `!gpu.mma_matrix<RxCxT, "K">`."""
    text = str(t)
    dims, kind = text[len("!gpu.mma_matrix<"):-1].split(", ")
    rows, cols, elem = dims.split("x", 2)
    return int(rows), int(cols), ir.Type.parse(elem), kind.strip('"')


def _collect(kernel, matches) -> list:
    """The ops of `kernel` (nested ones too, innermost first) for which `matches(op)` holds."""
    return [o for o in walk(kernel, post_order=True) if matches(o)]


def _rejecter(name: str):
    """reject(why): a GpuLoweringError naming kernel @name."""
    def reject(why):
        raise GpuLoweringError(f"emulator: kernel @{name}: {why}")
    return reject


def _known_threads(kernel, reject, missing: str) -> int:
    """Threads per block from `known_block_size`; reject(missing) when it is absent."""
    if "known_block_size" not in kernel.attributes:
        reject(missing)
    threads = 1
    for d in ir.DenseI32ArrayAttr(kernel.attributes["known_block_size"]):
        threads *= d
    return threads


def lower_warp_matrices(kernel, name: str) -> None:
    """Replace the warp-level `gpu.subgroup_mma_*` ops of `kernel` by per-warp buffers
    (extra workgroup attributions) and lane-0 loops; see the module docstring."""
    body = kernel.regions[0].blocks[0]
    found = _collect(kernel, lambda o: o.name.startswith("gpu.subgroup_mma") or any(
        _is_fragment(v.type) for v in list(o.operands) + list(o.results)))
    if not found:
        return
    reject = _rejecter(name)
    for o in found:
        if o.name not in _MMA_OPS:
            reject(f"'{o.name}' on warp-level matrix fragments is not supported")
        if o.parent != kernel.operation:
            reject(f"'{o.name}' inside control flow (warp-level matrix ops must be "
                   f"top-level after the barrier loops are unrolled)")
        for attr in ("transpose", "a_transpose", "b_transpose"):
            if attr in o.attributes:
                reject(f"'{o.name}' with {attr} is not supported")
    block_size = _known_threads(
        kernel, reject, "warp-level matrix ops need a known block size (per-warp buffers)")
    warps = -(-block_size // 32)
    ops = [op.operation for op in body.operations]
    position = {op: i for i, op in enumerate(ops)}
    last_use = {}
    for op in ops:
        for v in op.results:
            if _is_fragment(v.type):
                last_use[v] = max([position[getattr(u.owner, "operation", u.owner)]
                                   for u in v.uses], default=-1)
    buffers = {}  # fragment value -> its buffer (a workgroup attribution)
    free = {}  # str(buffer type) -> free buffers
    index = ir.IndexType.get()
    for op in ops:
        if op.name not in _MMA_OPS:
            continue
        result = op.results[0] if op.name != "gpu.subgroup_mma_store_matrix" else None
        if result is not None:
            rows, cols, elem, _ = _fragment_shape(result.type)
            if op.name == "gpu.subgroup_mma_compute":
                if not isinstance(elem, ir.F32Type):
                    reject(f"accumulator type {result.type} (only f32 accumulation is "
                           f"emulated)")
                acc = op.operands[2]
                if last_use[acc] == position[op]:  # in place: D[i][j] needs only C[i][j]
                    buffers[result] = buffers[acc]
            if result not in buffers:
                buf_type = ir.MemRefType.get([warps, rows, cols], elem)
                pool = free.setdefault(str(buf_type), [])
                if pool:
                    buffers[result] = pool.pop()
                else:
                    buffers[result] = _add_workgroup_buffer(kernel, buf_type)
        with ir.InsertionPoint(op), op.location:
            _emulate_fragment_op(op, buffers, index, reject)
        for v in op.operands:
            if _is_fragment(v.type) and last_use[v] == position[op] and (
                    result is None or buffers[v] != buffers[result]):
                free.setdefault(str(buffers[v].type), []).append(buffers[v])
    for op in reversed(ops):
        if op.name in _MMA_OPS:
            op.erase()


def _emulate_fragment_op(op, buffers, index, reject) -> None:
    """Insert, before `op`, the lane-0 loops computing it on the warp buffers."""
    zero, one = (arith.ConstantOp(index, v).result for v in (0, 1))
    tid = [gpu.ThreadIdOp(gpu.Dimension(d)).result for d in range(3)]
    dim = [gpu.BlockDimOp(gpu.Dimension(d)).result for d in range(2)]
    lin = arith.AddIOp(arith.MulIOp(arith.AddIOp(arith.MulIOp(tid[2], dim[1]).result,
                                                 tid[1]).result, dim[0]).result,
                       tid[0]).result
    c32 = arith.ConstantOp(index, 32).result
    warp = arith.DivUIOp(lin, c32).result
    lane0 = arith.CmpIOp(arith.CmpIPredicate.eq, arith.RemUIOp(lin, c32).result, zero).result
    branch = scf.IfOp(lane0)
    f32 = ir.F32Type.get()

    def loops(bounds, fn):
        ivs = []

        def nest(level):
            if level == len(bounds):
                fn(*ivs)
                return
            loop = scf.ForOp(zero, arith.ConstantOp(index, bounds[level]).result, one)
            with ir.InsertionPoint(loop.body):
                ivs.append(loop.induction_variable)
                nest(level + 1)
                scf.YieldOp([])

        nest(0)

    def memory_index(mem, indices, i, j):
        return list(indices[:-2]) + [arith.AddIOp(indices[-2], i).result,
                                     arith.AddIOp(indices[-1], j).result]

    def check_memory(mem, lead):
        mt = ir.MemRefType(mem.type)
        strides, _ = mt.get_strides_and_offset()
        if mt.rank < 2 or strides[-1] != 1 or strides[-2] != lead:
            reject(f"'{op.name}' on {mem.type} with leadDimension {lead}: only a row "
                   f"stride equal to the leading dimension is emulated")

    with ir.InsertionPoint(branch.then_block):
        kind = op.name
        if kind == "gpu.subgroup_mma_constant_matrix":
            rows, cols, _, _ = _fragment_shape(op.results[0].type)
            out = buffers[op.results[0]]
            loops([rows, cols], lambda i, j: memref.StoreOp(op.operands[0], out, [warp, i, j]))
        elif kind == "gpu.subgroup_mma_load_matrix":
            rows, cols, _, _ = _fragment_shape(op.results[0].type)
            out, src = buffers[op.results[0]], op.operands[0]
            indices = list(op.operands)[1:]
            check_memory(src, ir.IntegerAttr(op.attributes["leadDimension"]).value)
            loops([rows, cols], lambda i, j: memref.StoreOp(
                memref.LoadOp(src, memory_index(src, indices, i, j)).result, out, [warp, i, j]))
        elif kind == "gpu.subgroup_mma_store_matrix":
            rows, cols, _, _ = _fragment_shape(op.operands[0].type)
            frag, dst = buffers[op.operands[0]], op.operands[1]
            indices = list(op.operands)[2:]
            check_memory(dst, ir.IntegerAttr(op.attributes["leadDimension"]).value)
            loops([rows, cols], lambda i, j: memref.StoreOp(
                memref.LoadOp(frag, [warp, i, j]).result, dst, memory_index(dst, indices, i, j)))
        else:  # compute: D = C + A @ B, products and sum in f32
            a, b, c = (buffers[v] for v in op.operands)
            rows, inner, _, _ = _fragment_shape(op.operands[0].type)
            _, cols, _, _ = _fragment_shape(op.operands[1].type)
            d = buffers[op.results[0]]

            def widen(v):
                return v if v.type == f32 else arith.ExtFOp(f32, v).result

            def element(i, j):
                acc = scf.ForOp(zero, arith.ConstantOp(index, inner).result, one,
                                [memref.LoadOp(c, [warp, i, j]).result])
                with ir.InsertionPoint(acc.body):
                    k = acc.induction_variable
                    prod = arith.MulFOp(widen(memref.LoadOp(a, [warp, i, k]).result),
                                        widen(memref.LoadOp(b, [warp, k, j]).result)).result
                    scf.YieldOp([arith.AddFOp(acc.inner_iter_args[0], prod).result])
                memref.StoreOp(acc.results[0], d, [warp, i, j])

            loops([rows, cols], element)
        scf.YieldOp([])


def _add_workgroup_buffer(kernel, buf_type: ir.Type) -> ir.Value:
    """A new workgroup attribution of `buf_type` on gpu.func `kernel`."""
    body = kernel.regions[0].blocks[0]
    count = (ir.IntegerAttr(kernel.attributes["workgroup_attributions"]).value
             if "workgroup_attributions" in kernel.attributes else 0)
    kernel.attributes["workgroup_attributions"] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), count + 1)
    return body.add_argument(buf_type, kernel.location)


def lower_shuffles(kernel, name: str) -> None:
    """Replace every `gpu.shuffle` of `kernel` by a store of the value into a per-thread
    slot of a block-sized buffer, a barrier, and a load of the source lane's slot.

    The barrier becomes a phase boundary (loop fission): every thread has stored before
    any reads, as the lanes of a warp exchange registers in one step on the GPU. It is
    only equivalent when every thread of the block reaches the shuffle, so shuffles must
    be top-level (as barriers must), with width 32 (the whole warp; MLIR's NVVM lowering
    then uses the full lane mask), in a block of whole warps (`known_block_size`). The
    source lane and `valid` follow PTX `shfl.sync` with c = 31 (width 32): xor
    j = lane ^ off, down j = lane + off (valid j <= 31), up j = lane - off (valid
    j >= 0), idx j = off & 31 (always valid); an invalid lane reads its own value.
    Consecutive shuffles alternate between two buffers per type: the loads of one share
    a phase with the stores of the next."""
    found = _collect(kernel, lambda o: o.name == "gpu.shuffle")
    if not found:
        return
    reject = _rejecter(name)
    for o in found:
        if o.parent != kernel.operation:
            reject("'gpu.shuffle' inside control flow (only top-level shuffles are "
                   "supported, like barriers)")
        width = o.operands[2].owner
        width = getattr(width, "operation", width)
        if not (isinstance(width, ir.Operation) and width.name == "arith.constant"
                and ir.IntegerAttr(width.attributes["value"]).value == 32):
            reject("'gpu.shuffle' with a width other than the constant 32")
    threads = _known_threads(
        kernel, reject, "'gpu.shuffle' needs a known block size (per-thread shuffle buffers)")
    if threads % 32:
        reject(f"'gpu.shuffle' in a block of {threads} threads (not whole warps)")
    index = ir.IndexType.get()
    i32 = ir.IntegerType.get_signless(32)
    buffers = {}  # str(type) -> [two buffers, next one to use]
    for o in found:
        value, offset = o.operands[0], o.operands[1]
        key = str(value.type)
        if key not in buffers:
            buf_type = ir.MemRefType.get([threads], value.type)
            buffers[key] = [[_add_workgroup_buffer(kernel, buf_type) for _ in range(2)], 0]
        pair, turn = buffers[key]
        buf = pair[turn]
        buffers[key][1] = 1 - turn
        mode = str(o.attributes["mode"]).rstrip(">").split()[-1].split("<")[-1]
        with ir.InsertionPoint(o), o.location:
            tid = [gpu.ThreadIdOp(gpu.Dimension(d)).result for d in range(3)]
            dim = [gpu.BlockDimOp(gpu.Dimension(d)).result for d in range(2)]
            lin = arith.AddIOp(arith.MulIOp(arith.AddIOp(arith.MulIOp(
                tid[2], dim[1]).result, tid[1]).result, dim[0]).result, tid[0]).result
            memref.StoreOp(value, buf, [lin])
            gpu.BarrierOp()
            c32 = arith.ConstantOp(index, 32).result
            lane = arith.RemUIOp(lin, c32).result
            base = arith.SubIOp(lin, lane).result
            lane32 = arith.IndexCastUIOp(i32, lane).result
            c31 = arith.ConstantOp(i32, 31).result
            if mode == "xor":
                src = arith.XOrIOp(lane32, offset).result
                valid = arith.CmpIOp(arith.CmpIPredicate.ule, src, c31).result
            elif mode == "down":
                src = arith.AddIOp(lane32, offset).result
                valid = arith.CmpIOp(arith.CmpIPredicate.ule, src, c31).result
            elif mode == "up":
                src = arith.SubIOp(lane32, offset).result
                valid = arith.CmpIOp(arith.CmpIPredicate.ule, offset, lane32).result
            elif mode == "idx":
                src = arith.AndIOp(offset, c31).result
                valid = arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
            else:
                reject(f"'gpu.shuffle' mode {mode}")
            src = arith.SelectOp(valid, src, lane32).result
            slot = arith.AddIOp(base, arith.IndexCastUIOp(index, src).result).result
            moved = memref.LoadOp(buf, [slot]).result
        o.results[0].replace_all_uses_with(moved)
        o.results[1].replace_all_uses_with(valid)
        o.erase()
