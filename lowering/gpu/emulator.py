"""CPU builds of the CUDA kernels, for the emulator driver (cuda_runtime/lib/EmulatorDriver.cpp).

No PTX emulator runs sm_90 code on a CPU, and upstream MLIR has no pass that runs
`gpu.func` kernels as CPU loops, so the kernels are rewritten here, at the `gpu` stage
(the same IR the PTX is made from):

    gpu.func @k(%a: memref<..>, %s: f32) kernel { body }
 -> func.func @__lzemu_body_k(%a, %s, %bx, %by, %bz, %gx, %gy, %gz, %dx, %dy, %dz) {
      scf.for %tz < %dz { scf.for %ty < %dy { scf.for %tx < %dx { body } } }
    }

`gpu.block_id`/`grid_dim`/`block_dim` become the function's index arguments and
`gpu.thread_id` the loop variables: the function runs one block, and the driver loops
over the grid (in either order). The body keeps the kernel's memref types and is lowered
with `convert-func-to-llvm{use-bare-ptr-memref-call-conv=1}`, the calling convention
`convert-gpu-to-nvvm` gives the PTX kernels: arguments are bare pointers and the
descriptor (static offset included) is rebuilt from the type, so the CPU build takes
exactly the launch-plan arguments the GPU build does. Atomics lower to CPU atomics.

Top-level `gpu.barrier`s split the thread loops into one loop nest per phase (loop
fission, as in Polygeist's CPUify); values live across a barrier are kept per thread in
a block-sized buffer, and workgroup memory is a buffer per block (address spaces are
dropped: the CPU has one). Barriers inside control flow and private memory attributions
are rejected (no generated kernel has them yet).

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

The gpu.modules of a graph are built into one shared object (llc + cc, like the CPU
target; more only where their symbols clash), exporting per kernel
`void __lzemu_<m>.<k>(void **params, const int64_t ids[9])` (m: its gpu.module; ids:
block id, grid size, block size, each x/y/z) and `int32_t __lzemu_nargs_<m>.<k>`. The
image handed to `cuModuleLoadData` for module m is `EMULATOR_MAGIC`, the .so size and
the prefix (`<m>.`) size as little-endian uint64s, the prefix, then the .so bytes.
"""

from __future__ import annotations

import os
import re
import struct
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mlir import ir, passmanager
from mlir.dialects import arith, func, gpu, memref, scf

from .kernels.matmul import unroll_barrier_loops
from .ir import GpuLoweringError, gpu_modules
from .stages import parse
from ..cpu.codegen import build_shared_object
from ..mlir_runner import PipelineFailure, walk

EMULATOR_MAGIC = b"LZEMU2\0\0"
ENTRY_PREFIX = "__lzemu_"
BODY_PREFIX = "__lzemu_body_"
NARGS_PREFIX = "__lzemu_nargs_"


def _pipeline(verify: bool) -> str:
    return (
        "builtin.module("
        # Optional: every memref access checks its indices (out-of-bounds -> abort
        # with the op's location), the emulator's sanitizer.
        + ("generate-runtime-verification," if verify else "")
        + "lower-affine,"
        # The thread loops and kernel control flow -> branches.
        "convert-scf-to-cf,"
        "expand-strided-metadata,"
        # memref ops (atomic_rmw included: llvm.atomicrmw) -> LLVM.
        "finalize-memref-to-llvm,"
        # 16-byte accesses of elementwise kernels (gpu/kernels/vectorize.py): vector.load/store.
        "convert-vector-to-llvm,"
        # fpowi/ipowi with i64 exponents -> software loops (as on the CPU target).
        "convert-math-to-funcs,convert-scf-to-cf,"
        "convert-math-to-llvm,convert-math-to-libm,convert-arith-to-llvm,convert-cf-to-llvm,"
        # Bare pointers, descriptors rebuilt from the types: the kernels' ABI on the GPU.
        "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},convert-index-to-llvm,"
        # Parts of complex buffers (re, im, create) -> LLVM structs, as for the PTX.
        "convert-complex-to-llvm,"
        "reconcile-unrealized-casts)"
    )


_DIMS = {"x": 0, "y": 1, "z": 2}


def _dim(op) -> int:
    text = str(op.attributes["dimension"])  # `#gpu<dim x>`
    return _DIMS[text.rstrip(">").split()[-1]]


def _thread_loops(ip, zero, one, block_dim):
    """Insert `scf.for tz, ty, tx` at `ip`; return (thread ids x/y/z, innermost yield)."""
    thread_id = [None, None, None]
    for d in (2, 1, 0):  # z outermost, x innermost
        with ip:
            loop = scf.ForOp(zero, block_dim[d], one)
        thread_id[d] = loop.induction_variable
        with ir.InsertionPoint(loop.body):
            anchor = scf.YieldOp([])
        ip = ir.InsertionPoint(anchor)
    return thread_id, anchor


def _inside(op, ancestor) -> bool:
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
    return False


def _kernel_to_func(kernel, module: ir.Module, prefix: str = "") -> tuple[str, list[ir.Type]]:
    """Build `@__lzemu_body_<prefix><k>` in `module` from gpu.func `kernel` (whose ops it
    takes); returns (`<prefix><k>`, the kernel's argument types).

    Top-level `gpu.barrier`s split the body into phases, each its own loop nest over
    the block's threads (loop fission, as in Polygeist's CPUify): every thread finishes
    phase k before any starts phase k+1. A value defined in one phase and used in a
    later one is kept per thread in a block-sized buffer. Workgroup memory becomes a
    buffer per block (the function runs one block)."""
    name = ir.StringAttr(kernel.attributes["sym_name"]).value
    unroll_barrier_loops(kernel)  # tiled matmul: its k loop holds the barriers
    _lower_warp_matrices(kernel, name)  # tensor-core matmul: per-warp fragment buffers
    _lower_shuffles(kernel, name)  # warp shuffles: per-thread buffer + barrier
    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    inputs = list(ftype.inputs)
    region = kernel.regions[0]
    blocks = list(region.blocks)
    if len(blocks) != 1:
        raise GpuLoweringError(f"emulator: kernel @{name} has {len(blocks)} blocks; only "
                               f"structured (single-block) kernels are supported")
    body = blocks[0]
    attributions = list(body.arguments)[len(inputs):]
    workgroup = (ir.IntegerAttr(kernel.attributes["workgroup_attributions"]).value
                 if "workgroup_attributions" in kernel.attributes else 0)
    if len(attributions) != workgroup:
        raise GpuLoweringError(f"emulator: kernel @{name} uses private memory attributions, "
                               f"which the emulator does not support yet")
    index = ir.IndexType.get()
    with ir.InsertionPoint(module.body):
        new = func.FuncOp(BODY_PREFIX + prefix + name, (inputs + [index] * 9, []))
        new.attributes["sym_visibility"] = ir.StringAttr.get("private")
        entry = new.add_entry_block()
    args = list(entry.arguments)
    block_id, grid_dim, block_dim = args[-9:-6], args[-6:-3], args[-3:]
    # Phases: the top-level ops between barriers (a barrier inside control flow cannot
    # be split this way).
    phases = [[]]
    for op in list(body.operations):
        kind = op.operation.name
        if kind == "gpu.barrier":
            phases.append([])
            op.operation.erase()
        elif kind == "gpu.return":
            op.operation.erase()
        else:
            phases[-1].append(op)
    with ir.InsertionPoint(entry):
        zero, one = (arith.ConstantOp(index, v).result for v in (0, 1))
        threads = arith.MulIOp(arith.MulIOp(block_dim[0], block_dim[1]).result,
                               block_dim[2]).result
        for old in attributions:  # workgroup memory: one buffer per block
            old.replace_all_uses_with(memref.AllocaOp(old.type, [], []).result)
        nests = [_thread_loops(ir.InsertionPoint(entry), zero, one, block_dim)
                 for _ in phases]
        func.ReturnOp([])
    for old, new_arg in zip(body.arguments, args):
        old.replace_all_uses_with(new_arg)
    ids = {"gpu.block_id": block_id, "gpu.grid_dim": grid_dim, "gpu.block_dim": block_dim}
    for ops, (thread_id, anchor) in zip(phases, nests):
        for op in ops:
            kind = op.operation.name
            if kind in ids or kind == "gpu.thread_id":
                value = thread_id if kind == "gpu.thread_id" else ids[kind]
                with ir.InsertionPoint(anchor):  # keep a per-phase definition
                    same = arith.AddIOp(value[_dim(op)], zero).result
                op.results[0].replace_all_uses_with(same)
                op.operation.erase()
            elif kind == "gpu.global_id":
                d = _dim(op)
                with ir.InsertionPoint(anchor):
                    gid = arith.AddIOp(arith.MulIOp(block_id[d], block_dim[d]).result,
                                       thread_id[d]).result
                op.results[0].replace_all_uses_with(gid)
                op.operation.erase()
            else:
                op.operation.move_before(anchor)
    if len(phases) > 1:
        _keep_values_per_thread(nests, block_dim, threads)
    for op in [o.name for o in walk(new, post_order=True)]:
        if op.startswith("gpu."):
            raise GpuLoweringError(f"emulator: kernel @{name} uses '{op}'"
                                   + (" inside control flow (only top-level barriers are "
                                      "supported)" if op == "gpu.barrier" else ""))
    return prefix + name, inputs


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


def _lower_warp_matrices(kernel, name: str) -> None:
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


def _lower_shuffles(kernel, name: str) -> None:
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


def _keep_values_per_thread(nests, block_dim, threads) -> None:
    """Values crossing a phase boundary: stored per thread after their definition in a
    block-sized buffer, loaded where a later phase uses them."""
    inner = [anchor.operation.parent for _, anchor in nests]  # innermost loop bodies
    loops = [body.parent.parent for body in inner]  # x loop -> y loop -> z loop
    lin = []
    for (thread_id, _), body in zip(nests, inner):
        with ir.InsertionPoint.at_block_begin(body.regions[0].blocks[0]):
            zy = arith.AddIOp(arith.MulIOp(thread_id[2], block_dim[1]).result, thread_id[1])
            lin.append(arith.AddIOp(arith.MulIOp(zy.result, block_dim[0]).result,
                                    thread_id[0]).result)
    for p, (_, anchor) in enumerate(nests):
        for op in list(inner[p].regions[0].blocks[0].operations):
            for result in op.results:
                later = [q for q in range(p + 1, len(nests))
                         if any(_inside(u.owner, loops[q]) for u in result.uses)]
                if not later:
                    continue
                if isinstance(result.type, ir.ShapedType):
                    raise GpuLoweringError("emulator: a memref value crosses a barrier")
                with ir.InsertionPoint(loops[0]):
                    dyn = ir.ShapedType.get_dynamic_size()
                    # i1 (a guard reused after a barrier) is kept as i8: memref
                    # lowering cannot store sub-byte elements.
                    flag = str(result.type) == "i1"
                    held = ir.IntegerType.get_signless(8) if flag else result.type
                    buf = memref.AllocaOp(ir.MemRefType.get([dyn], held),
                                          [threads], []).result
                with ir.InsertionPoint(anchor):
                    memref.StoreOp(arith.ExtUIOp(held, result).result if flag else result,
                                   buf, [lin[p]])
                for use in list(result.uses):
                    owner = use.owner
                    q = next((q for q in later if _inside(owner, loops[q])), None)
                    if q is None:
                        continue
                    with ir.InsertionPoint(owner):
                        value = memref.LoadOp(buf, [lin[q]]).result
                        if flag:
                            value = arith.TruncIOp(result.type, value).result
                    owner.operands[use.operand_number] = value


def _llvm_type(t: ir.Type) -> str:
    if isinstance(t, ir.MemRefType):
        return "!llvm.ptr"
    s = str(t)
    return "i64" if s == "index" else s


def _wrapper(name: str, inputs: list[ir.Type]) -> str:
    """LLVM-dialect `__lzemu_<k>(void **params, int64_t *ids)` calling the body."""
    lines = [f'llvm.func @"{ENTRY_PREFIX}{name}"(%params: !llvm.ptr, %ids: !llvm.ptr) {{']
    operands, types = [], []
    for i, t in enumerate(inputs):
        ty = _llvm_type(t)
        lines += [
            f"  %slot{i} = llvm.getelementptr %params[{i}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr",
            f"  %ptr{i} = llvm.load %slot{i} : !llvm.ptr -> !llvm.ptr",
            f"  %arg{i} = llvm.load %ptr{i} : !llvm.ptr -> {ty}",
        ]
        operands.append(f"%arg{i}")
        types.append(ty)
    for j in range(9):
        lines += [f"  %idp{j} = llvm.getelementptr %ids[{j}] : (!llvm.ptr) -> !llvm.ptr, i64",
                  f"  %id{j} = llvm.load %idp{j} : !llvm.ptr -> i64"]
        operands.append(f"%id{j}")
        types.append("i64")
    lines += [f'  llvm.call @"{BODY_PREFIX}{name}"({", ".join(operands)}) : '
              f'({", ".join(types)}) -> ()',
              "  llvm.return", "}",
              # Declaration for parsing on its own; dropped when merged (see below).
              f'llvm.func @"{BODY_PREFIX}{name}"({", ".join(types)})',
              f'llvm.mlir.global external constant @"{NARGS_PREFIX}{name}"'
              f"({len(inputs)} : i32) : i32"]
    return "\n".join(lines)


def emulation_module(gpu_module, verify: bool = False, prefix: str = "") -> str:
    """LLVM-dialect text of the CPU build of one gpu.module (consumes its ops); the
    kernels' symbols are named `__lzemu_<prefix><kernel>` (see `symbol_prefix`)."""
    context = gpu_module.context
    with context, ir.Location.unknown(context):
        module = ir.Module.create()
        kernels = []
        for op in list(gpu_module.regions[0].blocks[0].operations):
            kind = op.operation.name
            if kind == "gpu.func":
                if "gpu.kernel" not in op.attributes:
                    raise GpuLoweringError("emulator: device functions (non-kernel gpu.func) "
                                           "are not supported")
                kernels.append(_kernel_to_func(op, module, prefix))
            elif kind == "memref.global":
                op.operation.clone(ip=ir.InsertionPoint(module.body))
            else:
                raise GpuLoweringError(f"emulator: unexpected '{kind}' in a gpu.module")
        try:
            passmanager.PassManager.parse(_pipeline(verify)).run(module.operation)
        except ir.MLIRError as error:
            raise PipelineFailure(f"emulator: lowering the CPU build failed: {error}") from None
        wrappers = ir.Module.parse("\n".join(_wrapper(n, inputs) for n, inputs in kernels))
        for op in wrappers.body.operations:
            if op.operation.name == "llvm.func" and not len(op.regions[0].blocks):
                continue  # declaration of a body the module defines
            op.operation.clone(ip=ir.InsertionPoint(module.body))
        return module.operation.get_asm(enable_debug_info=False)


def emulator_images(module: ir.Module, verify: bool = False) -> list[tuple[str, bytes]]:
    """(gpu.module name, emulator image) for every gpu.module of a `gpu`/`plan`-stage
    module, in body order (the plan's module index). Consumes the kernels' ops. Kernels
    with workgroup memory must come through `emulator_images_from_text`.

    The modules are merged into as few shared objects as their symbols allow (usually
    one per graph, shared by all its modules: a training step has 100+ gpu.modules, and
    a build is four tool runs)."""

    names = [ir.StringAttr(gm.attributes["sym_name"]).value for gm in gpu_modules(module)]
    lowered = [emulation_module(gm, verify, symbol_prefix(name))
               for gm, name in zip(gpu_modules(module), names)]
    groups, owner = _merge(lowered, module.context)

    def build(llvm_text: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="lazymlir-emu-") as tmp:
            return Path(build_shared_object(llvm_text, Path(tmp))).read_bytes()

    # mlir-translate, llc and cc run as child processes: build the groups side by side.
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        objects = list(pool.map(build, groups))
    return [(name, image(objects[owner[i]], symbol_prefix(name)))
            for i, name in enumerate(names)]


def symbol_prefix(module_name: str) -> str:
    """Kernel names repeat across gpu.modules (`@main_kernel_3::@main_kernel`): a shared
    object holding several modules names each kernel after its module too."""
    return f"{module_name}."


def image(shared_object: bytes, prefix: str) -> bytes:
    """The module image: magic, uint64 .so size, uint64 prefix size, prefix, .so."""
    data = prefix.encode()
    return (EMULATOR_MAGIC + struct.pack("<QQ", len(shared_object), len(data)) + data
            + shared_object)


def _merge(lowered: list[str], context) -> tuple[list[str], list[int]]:
    """LLVM-dialect modules -> merged module texts and, per input, its merged module.
    A symbol defined twice the same way (a declaration of `expf`, a constant two kernels
    read) is kept once; a module whose symbol differs from one already in a group starts
    or joins another group."""
    # (symbol -> op text, op texts, dense_resource blob entries)
    groups: list[tuple[dict[str, str], list[str], dict[str, str]]] = []
    owner = []
    for text in lowered:
        with context:
            parsed = ir.Module.parse(text)
            ops = [(ir.StringAttr(op.attributes["sym_name"]).value
                    if "sym_name" in op.attributes else None, str(op))
                   for op in parsed.body.operations]
            blobs = _resource_blobs(parsed) if "dense_resource<" in text else {}
        fits = (g for g, (symbols, _, _) in enumerate(groups)
                if all(name is None or symbols.get(name, op) == op for name, op in ops))
        g = next(fits, None)
        if g is None:
            groups.append(({}, [], {}))
            g = len(groups) - 1
        symbols, body, resources = groups[g]
        for name, op in ops:
            if name is None or name not in symbols:
                body.append(op)
            if name is not None:
                symbols[name] = op
        resources.update(blobs)
        owner.append(g)
    return ["module {\n" + "\n".join(body) + "\n}\n" + _resource_section(resources)
            for _, body, resources in groups], owner


_BLOB = re.compile(r'^\s*([^\s:]+): "(0x[0-9A-Fa-f]*)"', re.M)


def _resource_blobs(module: ir.Module) -> dict[str, str]:
    """The dense_resource blobs a module's constants name (torch-mlir imports tensor
    constants, e.g. an as_strided's indices, as such). An op printed on its own names
    its blob but does not carry it, and parsing renames a key the context holds
    already: the names are read from this module's own printed form."""
    asm = module.operation.get_asm(enable_debug_info=False)
    start = asm.find("{-#")
    return dict(_BLOB.findall(asm[start:])) if start >= 0 else {}


def _resource_section(resources: dict[str, str]) -> str:
    if not resources:
        return ""
    entries = ",\n".join(f"      {key}: \"{blob}\"" for key, blob in resources.items())
    return "{-#\n  dialect_resources: {\n    builtin: {\n" + entries + "\n    }\n  }\n#-}\n"


def emulator_images_from_text(text: str, verify: bool = False) -> list[tuple[str, bytes]]:
    """Same, from `gpu`- or `plan`-stage text (a dumped stage file, or a stage result)."""

    # On the CPU there is one address space: workgroup memory is a per-block buffer.
    text = _GPU_ADDRESS_SPACE.sub("", text)
    return emulator_images(parse(text), verify)


_GPU_ADDRESS_SPACE = re.compile(r",\s*#gpu\.address_space<workgroup>")


def is_emulator_image(image: bytes) -> bool:
    return bytes(image[:len(EMULATOR_MAGIC)]) == EMULATOR_MAGIC
