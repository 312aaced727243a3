"""CPU builds of the CUDA kernels, for the emulator driver (cuda_runtime/lib/EmulatorDriver.cpp).

Each `gpu.module` of the `gpu` stage (the same IR the PTX is made from) is built for the
CPU: its kernels become functions running one block as thread loops
(gpu/emulator_threads.py, with warp shuffles and matrix fragments lowered to workgroup
buffers first by gpu/emulator_warps.py); this module lowers those functions to the LLVM
dialect, adds the entry points the driver calls, and builds and merges the images. The
functions are lowered with `convert-func-to-llvm{use-bare-ptr-memref-call-conv=1}`,
the calling convention `convert-gpu-to-nvvm` gives the PTX kernels: arguments are
bare pointers and the descriptor (static offset included) is rebuilt from the type, so
the CPU build takes exactly the launch-plan arguments the GPU build does. Atomics
lower to CPU atomics.

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

from .emulator_threads import BODY_PREFIX, kernel_to_func
from .ir import GpuLoweringError, gpu_modules
from .stages import parse
from ..cpu import bf16_rounding
from ..cpu.codegen import build_shared_object
from ..mlir_runner import PipelineFailure

EMULATOR_MAGIC = b"LZEMU2\0\0"
ENTRY_PREFIX = "__lzemu_"
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
                kernels.append(kernel_to_func(op, module, prefix))
            elif kind == "memref.global":
                op.operation.clone(ip=ir.InsertionPoint(module.body))
            else:
                raise GpuLoweringError(f"emulator: unexpected '{kind}' in a gpu.module")
        # Rounding to bfloat16/float16 and expm1/log1p as the cpu target's (eager's):
        # LLVM's own CPU lowering of `bfloat` depends on the host (cpu/bf16_rounding.py).
        # The PTX keeps its own: sm_90's `cvt.rn.bf16.f32` keeps subnormals, libdevice
        # has expm1/log1p (not checked on a GPU, docs/known-issues.md).
        bf16_rounding.apply(module)
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
