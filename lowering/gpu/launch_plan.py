"""Host launch plan of the CUDA path: host func -> `Plan` -> `lzrt` IR / runtime text.

After `pipeline.to_gpu` the public host function only allocates, launches, copies,
memsets and frees. This module reads it (the `gpu` or `nvvm` stage: kernels may already
be NVVM, gpu.binary ops count as modules too) into a `Plan`, which can be written as

* the runtime's text format (`lazymlir-plan 1`, parsed by cuda_runtime/lib/Plan.cpp),
* JSON-able dicts (tests),
* `lzrt` dialect IR, the `plan` stage (dialects/lzrt.irdl.mlir), and back.

Slots: memref argument i of the host function is slot i; each memref.alloc gets the next
slot. Views (expand/collapse_shape, static subview) alias their source slot plus a byte
offset. A kernel argument is passed as the pointer its memref type's static offset is
relative to (kernels take bare pointers and add that offset themselves), so a launch
argument carries only the part of the view offset the type does not. Each temporary
is freed right after the last op that uses it (through any view): the runtime runs the
plan on one stream and its caching allocator hands a freed block out again at once
(the stream orders the reuse), so a long graph (a training step's forward and
backward) holds only the temporaries still to be read, not all of them until its end.
"""

from __future__ import annotations

import math
import struct
from dataclasses import asdict, dataclass, field

from mlir import ir

from .ir import GpuLoweringError, host_func
from .lzrt import load_lzrt


@dataclass
class Arg:
    kind: str  # "ptr" | "i32" | "i64" | "f32" | "f64"
    slot: int = -1
    offset: int = 0
    value: int | float = 0
    nbytes: int = 0  # ptr: bytes the kernel may touch from the pointer (0: unknown)

    def text(self) -> str:
        if self.kind == "ptr":
            return (f"p{self.slot}" + (f"+{self.offset}" if self.offset else "")
                    + (f"[{self.nbytes}]" if self.nbytes else ""))
        if self.kind in ("i32", "i64"):
            return f"{self.kind}:{int(self.value)}"
        if self.kind == "f32":
            return "f32:" + struct.pack(">f", self.value).hex()
        return "f64:" + struct.pack(">d", self.value).hex()


@dataclass
class Op:
    kind: str  # "alloc" | "free" | "copy" | "memset" | "launch"
    slot: int = -1
    src: int = -1
    offset: int = 0      # copy: byte offset into the destination slot
    src_offset: int = 0  # copy: byte offset into the source slot
    nbytes: int = 0
    byte: int = 0
    module_index: int = 0
    module: str = ""
    kernel: str = ""
    grid: tuple = (1, 1, 1)
    block: tuple = (1, 1, 1)
    shared_bytes: int = 0
    args: list = field(default_factory=list)

    def text(self) -> str:
        if self.kind == "alloc":
            return f"alloc {self.slot} {self.nbytes}"
        if self.kind == "free":
            return f"free {self.slot}"
        if self.kind == "copy":
            dst = f"{self.slot}" + (f"+{self.offset}" if self.offset else "")
            src = f"{self.src}" + (f"+{self.src_offset}" if self.src_offset else "")
            return f"copy {dst} {src} {self.nbytes}"
        if self.kind == "memset":
            return f"memset {self.slot} {self.byte} {self.nbytes}"
        dims = " ".join(str(d) for d in (*self.grid, *self.block))
        args = " ".join(a.text() for a in self.args)
        return (
            f"launch {self.module_index} {self.kernel} {dims} {self.shared_bytes} "
            f"{len(self.args)}" + (f" {args}" if args else "")
        )


@dataclass
class Plan:
    num_buffers: int = 0
    args: list = field(default_factory=list)  # (slot, arg index, nbytes)
    ops: list = field(default_factory=list)


def plan_to_text(plan: Plan) -> str:
    lines = ["lazymlir-plan 1", f"buffers {plan.num_buffers}"]
    lines += [f"arg {slot} {index} {nbytes}" for slot, index, nbytes in plan.args]
    lines += [op.text() for op in plan.ops]
    return "\n".join(lines) + "\n"


def plan_to_json(plan: Plan) -> dict:
    return asdict(plan)


# --------------------------------------------------------------------------------------
# Host function -> Plan.


def memref_nbytes(t: ir.Type) -> int:
    mt = ir.MemRefType(t)
    if not mt.has_static_shape:
        raise GpuLoweringError(f"dynamic shape {mt} in the launch plan (static shapes only)")
    return math.prod(mt.shape) * element_bytes(mt.element_type)


def _static_offset(t: ir.Type) -> int:
    """Element offset of a memref type (0 for identity layouts)."""
    mt = ir.MemRefType(t)
    _, offset = mt.get_strides_and_offset()
    if mt.is_dynamic_stride_or_offset(offset):
        raise GpuLoweringError(f"dynamic view offset in {mt}")
    return offset


def is_contiguous(t: ir.Type) -> bool:
    """Row-major dense layout, whatever its offset (a whole-buffer copy is possible)."""
    mt = ir.MemRefType(t)
    strides, _ = mt.get_strides_and_offset()
    expect = 1
    for size, stride in reversed(list(zip(mt.shape, strides))):
        if size != 1 and stride != expect:
            return False
        expect *= size
    return True


def span_bytes(t: ir.Type) -> int:
    """Bytes from the pointer a kernel gets for memref type `t` (offset relative to it)
    to one past the last element the type can address."""
    mt = ir.MemRefType(t)
    strides, offset = mt.get_strides_and_offset()
    if any(size == 0 for size in mt.shape):
        return 0
    last = offset + sum((size - 1) * stride for size, stride in zip(mt.shape, strides))
    return (last + 1) * _elem_bytes(t)


def _elem_bytes(t: ir.Type) -> int:
    return element_bytes(ir.MemRefType(t).element_type)


def element_bytes(e: ir.Type) -> int:
    """Bytes per element of a memref with element type `e` (index: 64 bits)."""
    if isinstance(e, ir.ComplexType):  # complex<fN>: two parts, real first
        return 2 * element_bytes(ir.ComplexType(e).element_type)
    # i1 and other sub-byte types are stored one per byte (LLVM's memref lowering).
    return max(1, (getattr(e, "width", 64) + 7) // 8)


_FOLD = {
    "arith.addi": lambda a, b: a + b,
    "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b,
    "arith.divui": lambda a, b: a // b,
    "arith.divsi": lambda a, b: int(a / b),
    "arith.remui": lambda a, b: a % b,
    "arith.addf": lambda a, b: a + b,
    "arith.subf": lambda a, b: a - b,
    "arith.mulf": lambda a, b: a * b,
    "arith.divf": lambda a, b: a / b,
}
_CASTS = ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui",
          "arith.trunci", "arith.sitofp", "arith.extf", "arith.truncf")


def _scalar_kind(t: ir.Type) -> str:
    s = str(t)
    if s in ("index", "i64"):
        return "i64"
    if s in ("i32", "f32", "f64"):
        return s
    if s in ("i1", "i8", "i16"):
        return "i32"  # sub-word integers are passed widened
    raise GpuLoweringError(f"kernel scalar argument of type {s} is not supported by the plan")


class _Extractor:
    def __init__(self, module: ir.Module):
        self.module = module
        self.func = host_func(module)
        self.plan = Plan()
        self.buf = {}  # ir.Value -> (slot, byte offset)
        self.const = {}  # ir.Value -> python number
        self.temps = []
        self.freed = set()
        order = [
            op for op in module.body.operations
            if op.operation.name in ("gpu.module", "gpu.binary")
        ]
        self.mod_index = {
            ir.StringAttr(op.attributes["sym_name"]).value: i for i, op in enumerate(order)
        }

    def run(self) -> Plan:
        block = self.func.regions[0].blocks[0]
        for i, a in enumerate(block.arguments):
            if not isinstance(a.type, ir.MemRefType):
                raise GpuLoweringError(f"host argument {i} is not a memref: {a.type}")
            self.buf[a] = (i, 0)
            self.plan.args.append((i, i, memref_nbytes(a.type)))
        self.plan.num_buffers = len(block.arguments)
        for op in block.operations:
            self.visit(op.operation)
        free_after_last_use(self.plan)
        return self.plan

    def slot_of(self, v: ir.Value, op) -> tuple:
        if v not in self.buf:
            raise GpuLoweringError(f"'{op.name}' uses a buffer that is not an argument or a "
                                   f"memref.alloc: {v}")
        return self.buf[v]

    def scalar(self, v: ir.Value, op):
        if v not in self.const:
            raise GpuLoweringError(f"'{op.name}' uses a non-constant scalar {v}")
        return self.const[v]

    def visit(self, op: ir.Operation) -> None:
        name = op.name
        if name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, ir.IntegerAttr):
                self.const[op.results[0]] = ir.IntegerAttr(attr).value
            elif isinstance(attr, ir.FloatAttr):
                self.const[op.results[0]] = ir.FloatAttr(attr).value
        elif name in _FOLD:
            a, b = (self.scalar(v, op) for v in op.operands)
            self.const[op.results[0]] = _FOLD[name](a, b)
        elif name in _CASTS:
            self.const[op.results[0]] = self.scalar(op.operands[0], op)
        elif name == "memref.alloc":
            if len(op.operands):
                raise GpuLoweringError("memref.alloc with dynamic sizes in the launch plan")
            slot = self.plan.num_buffers
            self.plan.num_buffers += 1
            self.buf[op.results[0]] = (slot, 0)
            self.temps.append(slot)
            self.plan.ops.append(Op("alloc", slot=slot, nbytes=memref_nbytes(op.results[0].type)))
        elif name in ("memref.expand_shape", "memref.collapse_shape", "memref.subview",
                      "memref.reinterpret_cast", "memref.cast"):
            slot, off = self.slot_of(op.operands[0], op)
            res = op.results[0]
            extra = _static_offset(res.type) - _static_offset(op.operands[0].type)
            self.buf[res] = (slot, off + extra * _elem_bytes(res.type))
        elif name == "memref.dealloc":
            slot, _ = self.slot_of(op.operands[0], op)
            if slot not in self.temps:
                raise GpuLoweringError("memref.dealloc of a function argument")
            self.freed.add(slot)
            self.plan.ops.append(Op("free", slot=slot))
        elif name == "memref.copy":
            (s, so), (d, do) = self.slot_of(op.operands[0], op), self.slot_of(op.operands[1], op)
            nbytes = memref_nbytes(op.operands[0].type)
            src_t, dst_t = op.operands[0].type, op.operands[1].type
            # A dense view (a block of rows, a chunk along the first dim) is one byte
            # range at its offset; the gpu stage makes other copies kernels
            # (stages.host_copies_to_linalg).
            if not is_contiguous(src_t) or not is_contiguous(dst_t):
                raise GpuLoweringError(f"memref.copy of a strided view is not a contiguous "
                                       f"byte range: {op}")
            self.plan.ops.append(Op("copy", slot=d, src=s, nbytes=nbytes, offset=do,
                                    src_offset=so))
        elif name == "gpu.memset":
            slot, off = self.slot_of(op.operands[0], op)
            value = op.operands[1]
            byte = _memset_byte(self.scalar(value, op), value.type)
            if off or byte is None:
                raise GpuLoweringError(f"gpu.memset not expressible as a byte memset: {op}")
            self.plan.ops.append(Op("memset", slot=slot, byte=byte,
                                    nbytes=memref_nbytes(op.operands[0].type)))
        elif name == "gpu.launch_func":
            self.launch(op)
        elif name == "func.return":
            for slot in self.temps:
                if slot not in self.freed:
                    self.plan.ops.append(Op("free", slot=slot))
        else:
            raise GpuLoweringError(
                f"op '{name}' on the host side cannot be part of the launch plan (the host "
                f"may only allocate, launch, copy, memset and free): {str(op)[:200]}"
            )

    def launch(self, op: ir.Operation) -> None:
        lf = op.opview
        if len(lf.asyncDependencies):
            raise GpuLoweringError("async gpu.launch_func is not supported by the plan")
        kernel = ir.SymbolRefAttr(op.attributes["kernel"])
        mod, kname = kernel.value[0], kernel.value[-1]
        grid = tuple(self.scalar(v, op) for v in (lf.gridSizeX, lf.gridSizeY, lf.gridSizeZ))
        block = tuple(
            self.scalar(v, op) for v in (lf.blockSizeX, lf.blockSizeY, lf.blockSizeZ)
        )
        shared = lf.dynamicSharedMemorySize
        shared = self.scalar(shared, op) if shared is not None else 0
        args = []
        for v in lf.kernelOperands:
            if isinstance(v.type, ir.MemRefType):
                slot, off = self.slot_of(v, op)
                # The kernel gets a bare pointer and rebuilds the descriptor from the
                # memref type, static offset included (convert-gpu-to-nvvm with
                # use-bare-ptr-memref-call-conv): pass the pointer the type's offset is
                # relative to, or the offset is applied twice.
                off -= _static_offset(v.type) * _elem_bytes(v.type)
                if off < 0:
                    raise GpuLoweringError(f"kernel argument view starts before its buffer "
                                           f"(byte offset {off}): {v.type}")
                args.append(Arg("ptr", slot=slot, offset=off, nbytes=span_bytes(v.type)))
            else:
                args.append(Arg(_scalar_kind(v.type), value=self.scalar(v, op)))
        if mod not in self.mod_index:
            raise GpuLoweringError(f"gpu.launch_func of unknown module @{mod}")
        self.plan.ops.append(Op("launch", module_index=self.mod_index[mod], module=mod,
                                kernel=kname, grid=grid, block=block, shared_bytes=shared,
                                args=args))


def _slots_used(op: Op) -> set[int]:
    if op.kind == "launch":
        return {a.slot for a in op.args if a.kind == "ptr"}
    if op.kind == "copy":
        return {op.slot, op.src}
    if op.kind == "memset":
        return {op.slot}
    return set()


def free_after_last_use(plan: Plan) -> None:
    """Move every temporary's free right after the last op that uses it (in place)."""
    allocated = {op.slot for op in plan.ops if op.kind == "alloc"}
    ops = [op for op in plan.ops if not (op.kind == "free" and op.slot in allocated)]
    last: dict[int, int] = {}
    for index, op in enumerate(ops):
        for slot in _slots_used(op) & allocated:
            last[slot] = index
        if op.kind == "alloc":
            last.setdefault(op.slot, index)  # never used: freed right away
    frees_after: dict[int, list[int]] = {}
    for slot, index in last.items():
        frees_after.setdefault(index, []).append(slot)
    plan.ops = []
    for index, op in enumerate(ops):
        plan.ops.append(op)
        plan.ops.extend(Op("free", slot=slot) for slot in sorted(frees_after.get(index, ())))


def peak_temporary_bytes(plan: Plan) -> int:
    """The most bytes of temporaries alive at once along the plan."""
    sizes = {op.slot: op.nbytes for op in plan.ops if op.kind == "alloc"}
    live = peak = 0
    for op in plan.ops:
        if op.kind == "alloc":
            live += op.nbytes
            peak = max(peak, live)
        elif op.kind == "free" and op.slot in sizes:
            live -= sizes[op.slot]
    return peak


def _memset_byte(value, t: ir.Type) -> int | None:
    """The byte a memset needs to produce `value` of type `t`, if all bytes are equal."""
    s = str(t)
    if s == "f32":
        raw = struct.pack("<f", value)
    elif s == "f64":
        raw = struct.pack("<d", value)
    elif s.startswith("i"):
        width = max(8, int(s[1:]))
        raw = (int(value) & ((1 << width) - 1)).to_bytes(width // 8, "little")
    else:
        return None
    return raw[0] if len(set(raw)) == 1 else None


def extract_plan(module: ir.Module) -> Plan:
    """Plan of the public host function of a `gpu`/`nvvm`/`ptx`-stage module."""
    with module.context:
        return _Extractor(module).run()


def host_to_plan_text(module: ir.Module) -> str:
    return plan_to_text(extract_plan(module))


# --------------------------------------------------------------------------------------
# Plan <-> lzrt IR (the `plan` stage).


def _i64(n: int) -> str:
    return f"{int(n)} : i64"


def _scalar_attr(a: Arg) -> str:
    if a.kind in ("f32", "f64"):
        bits = a.text().split(":")[1]
        return f"0x{bits.upper()} : {a.kind}"
    return f"{int(a.value)} : {a.kind}"


def plan_to_lzrt_text(plan: Plan) -> str:
    """Generic-form lzrt IR: `func.func @plan()` whose body replays the plan."""
    buf = "!lzrt.buffer"
    lines, name, views = [], {}, {}
    for slot, index, nbytes in plan.args:
        name[slot] = f"%b{slot}"
        lines.append(f'%b{slot} = "lzrt.arg"() {{index = {_i64(index)}, '
                     f'nbytes = {_i64(nbytes)}}} : () -> {buf}')

    def ref(slot, off):
        if not off:
            return name[slot]
        key = (slot, off)
        if key not in views:
            views[key] = f"%v{slot}_{off}"
            lines.append(f'{views[key]} = "lzrt.view"({name[slot]}) {{offset = {_i64(off)}}} '
                         f": ({buf}) -> {buf}")
        return views[key]

    for op in plan.ops:
        if op.kind == "alloc":
            name[op.slot] = f"%b{op.slot}"
            lines.append(f'%b{op.slot} = "lzrt.alloc"() {{nbytes = {_i64(op.nbytes)}}} '
                         f": () -> {buf}")
        elif op.kind == "free":
            lines.append(f'"lzrt.free"({name[op.slot]}) : ({buf}) -> ()')
        elif op.kind == "copy":
            lines.append(f'"lzrt.copy"({ref(op.slot, op.offset)}, {ref(op.src, op.src_offset)}) '
                         f"{{nbytes = {_i64(op.nbytes)}}} : ({buf}, {buf}) -> ()")
        elif op.kind == "memset":
            lines.append(f'"lzrt.memset"({name[op.slot]}) {{value = {_i64(op.byte)}, '
                         f"nbytes = {_i64(op.nbytes)}}} : ({buf}) -> ()")
        else:
            operands = [ref(a.slot, a.offset) for a in op.args if a.kind == "ptr"]
            args = ", ".join("unit" if a.kind == "ptr" else _scalar_attr(a) for a in op.args)
            sizes = ", ".join(str(a.nbytes if a.kind == "ptr" else 0) for a in op.args)
            lines.append(
                f'"lzrt.launch"({", ".join(operands)}) {{module_index = '
                f'{_i64(op.module_index)}, module = "{op.module}", kernel = "{op.kernel}", '
                f"grid = array<i64: {', '.join(map(str, op.grid))}>, "
                f"block = array<i64: {', '.join(map(str, op.block))}>, "
                f"shared_bytes = {_i64(op.shared_bytes)}, args = [{args}], "
                f"arg_bytes = array<i64{': ' + sizes if sizes else ''}>}} : "
                f"({', '.join([buf] * len(operands))}) -> ()"
            )
    body = "\n".join("  " + line for line in lines + ["func.return"])
    return f"func.func @plan() {{\n{body}\n}}\n"


def plan_to_lzrt(plan: Plan, context: ir.Context) -> ir.Module:
    load_lzrt(context)
    return ir.Module.parse(plan_to_lzrt_text(plan), context)


def host_to_lzrt(module: ir.Module) -> ir.Module:
    """`gpu`/`nvvm` stage -> `plan` stage (a module with `func.func @plan` of lzrt ops)."""
    return plan_to_lzrt(extract_plan(module), module.context)


def lzrt_to_plan(module: ir.Module) -> Plan:
    """Read a `plan`-stage module back (slots renumbered: args first, then allocs)."""
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1:
        raise GpuLoweringError("a plan module holds exactly one func.func")
    plan, slot_of = Plan(), {}
    ops = list(funcs[0].regions[0].blocks[0].operations)
    for op in ops:
        if op.operation.name == "lzrt.arg":
            index = ir.IntegerAttr(op.attributes["index"]).value
            slot_of[op.results[0]] = (index, 0)
            plan.args.append((index, index, ir.IntegerAttr(op.attributes["nbytes"]).value))
    plan.num_buffers = max((i for _, i, _ in plan.args), default=-1) + 1
    for op in ops:
        name = op.operation.name
        attr = op.attributes
        if name == "lzrt.alloc":
            slot_of[op.results[0]] = (plan.num_buffers, 0)
            plan.ops.append(Op("alloc", slot=plan.num_buffers,
                               nbytes=ir.IntegerAttr(attr["nbytes"]).value))
            plan.num_buffers += 1
        elif name == "lzrt.view":
            slot, off = slot_of[op.operands[0]]
            slot_of[op.results[0]] = (slot, off + ir.IntegerAttr(attr["offset"]).value)
        elif name == "lzrt.free":
            plan.ops.append(Op("free", slot=slot_of[op.operands[0]][0]))
        elif name == "lzrt.copy":
            (dst, dst_off), (src, src_off) = slot_of[op.operands[0]], slot_of[op.operands[1]]
            plan.ops.append(Op("copy", slot=dst, src=src, offset=dst_off, src_offset=src_off,
                               nbytes=ir.IntegerAttr(attr["nbytes"]).value))
        elif name == "lzrt.memset":
            plan.ops.append(Op("memset", slot=slot_of[op.operands[0]][0],
                               byte=ir.IntegerAttr(attr["value"]).value,
                               nbytes=ir.IntegerAttr(attr["nbytes"]).value))
        elif name == "lzrt.launch":
            plan.ops.append(_launch_from_lzrt(op, slot_of))
        elif name not in ("lzrt.arg", "func.return"):
            raise GpuLoweringError(f"unexpected op '{name}' in a lzrt plan")
    return plan


def _launch_from_lzrt(op, slot_of) -> Op:
    attr = op.attributes
    operands = iter(op.operands)
    args = []
    sizes = list(ir.DenseI64ArrayAttr(attr["arg_bytes"])) if "arg_bytes" in attr else []
    for i, a in enumerate(ir.ArrayAttr(attr["args"])):
        if isinstance(a, ir.UnitAttr):
            slot, off = slot_of[next(operands)]
            args.append(Arg("ptr", slot=slot, offset=off,
                            nbytes=sizes[i] if i < len(sizes) else 0))
        elif isinstance(a, ir.IntegerAttr):
            args.append(Arg(_scalar_kind(a.type), value=ir.IntegerAttr(a).value))
        elif isinstance(a, ir.FloatAttr):
            args.append(Arg(str(a.type), value=ir.FloatAttr(a).value))
        else:
            raise GpuLoweringError(f"lzrt.launch argument {a} is neither unit nor a scalar")
    return Op("launch", module_index=ir.IntegerAttr(attr["module_index"]).value,
              module=ir.StringAttr(attr["module"]).value,
              kernel=ir.StringAttr(attr["kernel"]).value,
              grid=tuple(ir.DenseI64ArrayAttr(attr["grid"])),
              block=tuple(ir.DenseI64ArrayAttr(attr["block"])),
              shared_bytes=ir.IntegerAttr(attr["shared_bytes"]).value, args=args)


def lzrt_to_plan_text(module: ir.Module) -> str:
    return plan_to_text(lzrt_to_plan(module))


def lzrt_text_to_plan_text(text: str, context: ir.Context | None = None) -> str:
    """A dumped `plan`-stage file -> the runtime's `lazymlir-plan 1` text."""
    context = context or ir.Context()
    load_lzrt(context)
    return lzrt_to_plan_text(ir.Module.parse(text, context))
