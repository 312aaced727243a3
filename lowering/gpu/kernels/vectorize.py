"""16-byte global accesses for elementwise kernels: 4 elements per thread, aligned params.

An elementwise kernel with one thread per element issues 4-byte loads and stores; a
thread that asks for 16 bytes at once (`ld.global.v4.b32`) needs a quarter of the
memory instructions for the same bytes. Two parts, both needed for NVPTX to emit them:

1. `vector_width(loop)` (gpu stage, before `gpu.pipeline` maps the loop to threads): an
   `scf.parallel` whose body is flat (loads, stores, arith/math; no nested loops) and
   whose every access that depends on the innermost induction variable is contiguous in
   it (the last index, stride 1, 4-byte elements, other strides and the static offset
   multiples of 4, so each group of 4 starts 16 bytes apart from the buffer's base), with
   an innermost extent divisible by 4, gets width 4. `gpu.loop_mapping.map_host_loops`
   then gives each thread 4 consecutive elements and `vectorize_body` emits one
   `vector.load` / `vector.store` of 4 elements per contiguous access, the scalar body
   once per lane in between. (4 unrolled scalar accesses left to LLVM's load/store
   vectorizer were merged only sometimes: InstCombine rewrites the lane addresses of a
   2-d access into forms whose common base it no longer sees.) Everything else keeps
   one element per thread: an odd row, a transposed operand, a view 4 bytes in.
2. `align_kernel_params(module)` (nvvm stage): a `vector<4xf32>` load becomes 16-byte
   wide only when its address is provably 16-byte aligned, which needs the base
   pointer's alignment. The runtime's buffers come from `cuMemAlloc` (256-byte aligned)
   through the caching allocator, which hands out whole blocks; imported DLPack memory
   that is not 16-byte aligned is copied (lazymlir/targets/cuda.py), and
   `LaunchPlan.run` refuses unaligned buffers. So a kernel pointer argument is 16-byte
   aligned when the plan's byte offset for it (the part of a view's offset its memref
   type does not carry) is a multiple of 16 at every launch of the kernel: those get
   `llvm.align = 16` (PTX `.ptr .align 16`). Without the claim NVPTX splits a vector
   access into 4-byte ones, so part 1 is correct at any offset.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, vector

from ..ir import cidx, gpu_modules, holds_lzrt
from ..launch_plan import extract_plan, lzrt_to_plan

WIDTH = 4  # elements per thread: 16 bytes of f32/i32
ALIGN = 16  # bytes claimed for a kernel pointer argument
_ELEM_BYTES = 4

# Ops a vectorizable body may hold besides memref.load/store (pure, no regions).
_PURE_PREFIXES = ("arith.", "math.", "index.")


def _defined_inside(value: ir.Value, loop) -> bool:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return owner == loop.regions[0].blocks[0] or _encloses(loop, owner.owner)
    owner = getattr(owner, "operation", owner)
    return _encloses(loop, owner)


def _encloses(loop, op) -> bool:
    while op is not None:
        if op == loop.operation:
            return True
        op = op.parent
    return False


def _constant(value: ir.Value) -> bool:
    owner = value.owner
    return not isinstance(owner, ir.Block) and \
        getattr(owner, "operation", owner).name == "arith.constant"


def _access_ok(memref_value: ir.Value, indices: list, iv: ir.Value, ivs: list,
               loop) -> bool | None:
    """True: contiguous in `iv` (a vector candidate); None: does not depend on `iv`;
    False: depends on it some other way (strided, computed index, other width)."""
    for index in indices:
        if index not in ivs and _defined_inside(index, loop) and not _constant(index):
            return False  # a computed index: its stride is not known here
    if iv not in indices:
        return None
    mt = ir.MemRefType(memref_value.type)
    if indices.index(iv) != len(indices) - 1 or indices.count(iv) != 1:
        return False
    elem = mt.element_type
    width = getattr(elem, "width", None)
    if width is None or width != 8 * _ELEM_BYTES:
        return False
    strides, offset = mt.get_strides_and_offset()
    if mt.is_dynamic_stride_or_offset(offset) or strides[-1] != 1:
        return False
    return offset % WIDTH == 0 and all(s % WIDTH == 0 for s in strides[:-1])


def vector_width(loop, extents: list[tuple[int, int, int]]) -> int:
    """Elements per thread for a top-level `scf.parallel` (see the module docstring);
    `extents` are its (lower bound, step, trip count) per dim."""
    lb, step, trip = extents[-1]
    if lb != 0 or step != 1 or trip % WIDTH or trip < WIDTH:
        return 1
    body = loop.regions[0].blocks[0]
    ivs = list(body.arguments)
    iv = ivs[-1]
    contiguous = False
    for op in list(body.operations)[:-1]:
        op = op.operation
        if op.regions:
            return 1
        name = op.name
        if name == "memref.load":
            ok = _access_ok(op.operands[0], list(op.operands)[1:], iv, ivs, loop)
        elif name == "memref.store":
            ok = _access_ok(op.operands[1], list(op.operands)[2:], iv, ivs, loop)
        elif name.startswith(_PURE_PREFIXES) or name == "memref.get_global":
            continue
        else:
            return 1  # atomics, calls, anything with effects we do not model
        if ok is False:
            return 1
        contiguous |= bool(ok)
    return WIDTH if contiguous else 1


def _contiguous_access(op, iv: ir.Value, ivs: list, loop) -> bool:
    name = op.name
    if name == "memref.load":
        return bool(_access_ok(op.operands[0], list(op.operands)[1:], iv, ivs, loop))
    if name == "memref.store":
        return bool(_access_ok(op.operands[1], list(op.operands)[2:], iv, ivs, loop))
    return False


def vectorize_body(loop, ivs: list[ir.Value], width: int, anchor) -> None:
    """Emit the body of `loop` (all ops but its terminator) before `anchor` for `width`
    consecutive elements: lane u reads the innermost induction variable as
    `ivs[-1] + u`, the others as `ivs`. Accesses contiguous in it become one
    `vector.load` / `vector.store` of `width` elements (lanes split off with
    `vector.extract`, joined with `vector.from_elements`); other ops are cloned per lane,
    op by op (loads of values that do not depend on the lane fold together later)."""
    old_body = loop.regions[0].blocks[0]
    iv = old_body.arguments[len(ivs) - 1]
    old_ivs = list(old_body.arguments)
    with ir.InsertionPoint(anchor), anchor.location:
        lanes = [ivs[-1]] + [arith.AddIOp(ivs[-1], cidx(u)).result for u in range(1, width)]
    maps = []
    for u in range(width):
        mapping = {old: new for old, new in zip(old_body.arguments, ivs)}
        mapping[iv] = lanes[u]
        maps.append(mapping)

    def mapped(value, u):
        return maps[u].get(value, value)

    for op in list(old_body.operations)[:-1]:
        op = op.operation
        if not _contiguous_access(op, iv, old_ivs, loop):
            for mapping in maps:
                clone = op.clone(ip=ir.InsertionPoint(anchor))
                for i, operand in enumerate(clone.operands):
                    if operand in mapping:
                        clone.operands[i] = mapping[operand]
                for old, new in zip(op.results, clone.results):
                    mapping[old] = new
            continue
        with ir.InsertionPoint(anchor), op.location:
            if op.name == "memref.load":
                base = mapped(op.operands[0], 0)  # a global sunk into the loop: cloned
                vtype = ir.VectorType.get([width], ir.MemRefType(base.type).element_type)
                indices = [mapped(v, 0) for v in list(op.operands)[1:]]
                loaded = vector.LoadOp(vtype, base, indices).result
                for u in range(width):
                    maps[u][op.results[0]] = vector.extract(loaded, [], [u])
            else:
                value, base = op.operands[0], mapped(op.operands[1], 0)
                vtype = ir.VectorType.get([width], ir.MemRefType(base.type).element_type)
                joined = vector.FromElementsOp(
                    vtype, [mapped(value, u) for u in range(width)]).result
                vector.StoreOp(joined, base, [mapped(v, 0) for v in list(op.operands)[2:]])


def align_kernel_params(module: ir.Module) -> None:
    """`llvm.align = 16` on every kernel pointer argument the plan passes at a multiple
    of 16 bytes from a buffer's start at all its launches (nvvm stage)."""
    # The host side is a func.func with launches (gpu.pipeline.to_nvvm on a `gpu` module)
    # or already the lzrt plan (the `nvvm` stage after `plan`).
    host_is_plan = any(op.operation.name == "func.func" and holds_lzrt(op)
                       for op in module.body.operations)
    plan = lzrt_to_plan(module) if host_is_plan else extract_plan(module)
    aligned: dict[tuple[int, str], list[bool]] = {}
    for op in plan.ops:
        if op.kind != "launch":
            continue
        flags = [a.kind == "ptr" and a.offset % ALIGN == 0 for a in op.args]
        key = (op.module_index, op.kernel)
        prev = aligned.get(key)
        aligned[key] = flags if prev is None else [a and b for a, b in zip(prev, flags)]
    for index, gm in enumerate(gpu_modules(module)):
        for func in gm.regions[0].blocks[0].operations:
            if func.operation.name != "llvm.func":
                continue
            name = ir.StringAttr(func.attributes["sym_name"]).value
            flags = aligned.get((index, name))
            if flags is None:
                continue
            args = func.regions[0].blocks[0].arguments
            if len(args) != len(flags):
                continue  # not the bare-pointer signature the plan describes
            old = (list(ir.ArrayAttr(func.attributes["arg_attrs"]))
                   if "arg_attrs" in func.attributes else [])
            old = old or [None] * len(args)
            new = []
            for arg, flag, attrs in zip(args, flags, old):
                entries = {}
                if attrs is not None:
                    attrs = ir.DictAttr(attrs)
                    for i in range(len(attrs)):
                        entries[attrs[i].name] = attrs[i].attr
                if flag and isinstance(arg.type, ir.Type) and "ptr" in str(arg.type):
                    entries["llvm.align"] = ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(64), ALIGN)
                new.append(ir.DictAttr.get(entries))
            func.attributes["arg_attrs"] = ir.ArrayAttr.get(new)
