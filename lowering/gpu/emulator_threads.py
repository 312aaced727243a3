"""The CUDA kernels as CPU loops, for their CPU builds (gpu/emulator.py): each `gpu.func`
kernel becomes a function running one block.

No PTX emulator runs sm_90 code on a CPU, and upstream MLIR has no pass that runs
`gpu.func` kernels as CPU loops, so the kernels are rewritten here, at the `gpu` stage
(the same IR the PTX is made from):

    gpu.func @k(%a: memref<..>, %s: f32) kernel { body }
 -> func.func @__lzemu_body_k(%a, %s, %bx, %by, %bz, %gx, %gy, %gz, %dx, %dy, %dz) {
      scf.for %tz < %dz { scf.for %ty < %dy { scf.for %tx < %dx { body } } }
    }

`gpu.block_id`/`grid_dim`/`block_dim` become the function's index arguments and
`gpu.thread_id` the loop variables: the function runs one block, and the driver loops
over the grid (in either order). The body keeps the kernel's memref types (gpu/emulator.py
lowers it with the bare-pointer calling convention of the PTX kernels).

Top-level `gpu.barrier`s split the thread loops into one loop nest per phase (loop
fission, as in Polygeist's CPUify); values live across a barrier are kept per thread in
a block-sized buffer, and workgroup memory is a buffer per block (address spaces are
dropped: the CPU has one). Barriers inside control flow and private memory attributions
are rejected (no generated kernel has them yet). Warp shuffles and matrix fragments are
lowered to workgroup buffers and barriers first (gpu/emulator_warps.py), so they take
part in the fission like the kernel's own.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, memref, scf

from .emulator_warps import lower_shuffles, lower_warp_matrices
from .kernels.matmul import unroll_barrier_loops
from .ir import GpuLoweringError
from ..mlir_runner import walk

BODY_PREFIX = "__lzemu_body_"


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


def kernel_to_func(kernel, module: ir.Module, prefix: str = "") -> tuple[str, list[ir.Type]]:
    """Build `@__lzemu_body_<prefix><k>` in `module` from gpu.func `kernel` (whose ops it
    takes); returns (`<prefix><k>`, the kernel's argument types).

    Top-level `gpu.barrier`s split the body into phases, each its own loop nest over
    the block's threads (loop fission, as in Polygeist's CPUify): every thread finishes
    phase k before any starts phase k+1. A value defined in one phase and used in a
    later one is kept per thread in a block-sized buffer. Workgroup memory becomes a
    buffer per block (the function runs one block)."""
    name = ir.StringAttr(kernel.attributes["sym_name"]).value
    unroll_barrier_loops(kernel)  # tiled matmul: its k loop holds the barriers
    lower_warp_matrices(kernel, name)  # tensor-core matmul: per-warp fragment buffers
    lower_shuffles(kernel, name)  # warp shuffles: per-thread buffer + barrier
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
