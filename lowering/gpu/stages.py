"""CUDA stage functions of the registry: `gpu`, `plan`, `nvvm`, `ptx`, `cubin`.

Each takes the previous stage's MLIR text, parses it in a fresh upstream context
(with the `lzrt` dialect loaded where the text holds lzrt ops), calls the GPU
lowering in `pipeline` / `launch_plan` and returns the upstream module whose
printed form is the stage output:

    gpu    outlined gpu.modules + the host func.func with gpu.launch_func
    plan   the same gpu.modules + `func.func @plan` of lzrt ops (the host func replaced)
    nvvm   gpu.modules lowered to NVVM/LLVM; the plan (or host func) unchanged
    ptx    gpu.binary ops holding PTX (gpu-module-to-binary format=isa) + the plan
    cubin  gpu.binary ops holding cubin (format=bin, needs ptxas) + the plan

Every output re-parses, so `lazymlir-opt` resumes from any of them. The later
stages also accept earlier CUDA text (nvvm/ptx from `gpu` or `plan` text, plan
from `nvvm` text) because the kernels and the host side lower independently.
Failures (parse errors, pass failures, GpuLoweringError) surface as
PipelineFailure with the collected diagnostics; the registry turns them into a
LoweringError naming the stage.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from mlir import ir, passmanager
from mlir.dialects import arith, cf, gpu

from . import launch_plan, pipeline
from .ir import GpuLoweringError, gpu_modules, holds_lzrt, host_func, top_funcs
from .lzrt import load_lzrt
from ..mlir_runner import UPSTREAM, PipelineFailure, run_pipeline, walk


def gpu_options(options) -> pipeline.GpuOptions:
    """stages.Options (or None/dict) -> the GPU lowering's options."""
    if options is None or isinstance(options, (dict, pipeline.GpuOptions)):
        return pipeline.resolve_options(options)
    return pipeline.GpuOptions(chip=getattr(options, "chip", "sm_90") or "sm_90")


def parse(text: str, transform=None) -> ir.Module:
    """Parse `text` upstream (lzrt loaded if used), apply `transform(module)`, keep diagnostics."""
    context = UPSTREAM.context()
    if "lzrt." in text:
        load_lzrt(context)
    return run_pipeline(UPSTREAM, text, None, before=transform, context=context)


def _has_plan(module: ir.Module) -> bool:
    return any(ir.StringAttr(f.attributes["sym_name"]).value == "plan"
               and holds_lzrt(f) for f in top_funcs(module))


def host_copies_to_linalg(module: ir.Module) -> None:
    """Host `memref.copy`s the launch plan cannot do become `linalg.copy`, which the gpu
    lowering turns into a kernel: copies between views that are not one contiguous byte
    range each (`x[:, 1:]` copied out whole), and copies of a constant
    (`memref.get_global`: the plan cannot upload data, the kernel reads the global)."""
    from mlir.dialects import linalg

    with module.context, ir.Location.unknown(module.context):
        for op in list(host_func(module).regions[0].blocks[0].operations):
            if op.operation.name != "memref.copy":
                continue
            src, dst = op.operands
            constant = (isinstance(src, ir.OpResult)
                        and src.owner.operation.name == "memref.get_global")
            if (not constant and launch_plan.is_contiguous(src.type)
                    and launch_plan.is_contiguous(dst.type)):
                continue
            with ir.InsertionPoint(op):
                linalg.copy(src, outs=[dst])
            op.operation.erase()


_ASSERT_MARK = "lazymlir.assert:"


def hide_asserts(module: ir.Module) -> None:
    """`cf.assert %ok, "msg"` (torch-mlir's index bounds checks in gather/embedding
    loops) -> `scf.if %bad { gpu.printf "lazymlir.assert:msg" }`: upstream
    convert-parallel-loops-to-gpu leaves a loop holding a cf.assert on the host, but
    carries this form into the kernel, where `restore_asserts` turns it back."""
    from mlir.dialects import gpu as gpu_d
    from mlir.dialects import scf

    with module.context, ir.Location.unknown(module.context):
        for op in [op for op in walk(module) if op.name == "cf.assert"]:
            ok = op.operands[0]
            message = ir.StringAttr(op.attributes["msg"]).value
            with ir.InsertionPoint(op), op.location:
                true = arith.ConstantOp(ok.type, 1).result
                bad = arith.XOrIOp(ok, true).result
                branch = scf.IfOp(bad)
                with ir.InsertionPoint(branch.then_block):
                    gpu_d.printf(_ASSERT_MARK + message)
                    scf.YieldOp([])
            op.operation.erase()


def restore_asserts(module: ir.Module) -> None:
    """Inverse of `hide_asserts`, wherever the ops went (kernels, or the host): a
    failing check is a device-side assert (`__assertfail` in PTX, as in CUDA PyTorch;
    an abort naming the check on the emulator and the CPU)."""
    with module.context, ir.Location.unknown(module.context):
        for op in [op for op in walk(module) if op.name == "gpu.printf"]:
            fmt = ir.StringAttr(op.attributes["format"]).value
            branch = op.parent
            if not fmt.startswith(_ASSERT_MARK) or branch.name != "scf.if":
                continue
            with ir.InsertionPoint(branch), branch.location:
                bad = branch.operands[0]
                ok = arith.XOrIOp(bad, arith.ConstantOp(bad.type, 1).result).result
                cf.AssertOp(ok, fmt[len(_ASSERT_MARK):])
            branch.erase()


def to_gpu(text: str, options) -> ir.Module:
    """`bufferized` -> `gpu`."""
    def run(module):
        host_copies_to_linalg(module)
        hide_asserts(module)
        pipeline.to_gpu(module, gpu_options(options))
        restore_asserts(module)
        # Constants now read inside kernels were copied into their gpu.modules by the
        # outlining; the host's private memref.globals are left unused.
        passmanager.PassManager.parse("builtin.module(symbol-dce)",
                                      module.context).run(module.operation)
    return parse(text, run)


def _replace_host_with_plan(module: ir.Module) -> None:
    if _has_plan(module):
        return
    plan = launch_plan.host_to_lzrt(module)
    for op in top_funcs(module):
        op.operation.erase()
    with module.context, ir.Location.unknown():
        ip = ir.InsertionPoint.at_block_begin(module.body)
        for op in plan.body.operations:
            op.operation.clone(ip=ip)
        # The kernels stay referenced by name from the plan: keep the container marker.
        module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()


def to_plan(text: str, options) -> ir.Module:
    """`gpu` -> `plan`: the host function becomes an lzrt launch plan (`func.func @plan`)."""
    def run(module):
        # The plan ops are generic lzrt IR: the context must know the dialect.
        load_lzrt(module.context)
        _replace_host_with_plan(module)
    return parse(text, run)


def to_nvvm(text: str, options) -> ir.Module:
    """`plan` -> `nvvm`: kernels to NVVM/LLVM; the plan (or a host func) is left as is."""
    return parse(text, lambda m: pipeline.to_nvvm(m, gpu_options(options)))


def to_ptx(text: str, options) -> ir.Module:
    """`nvvm` -> `ptx`: every gpu.module becomes a gpu.binary holding PTX text."""
    return parse(text, lambda m: pipeline.to_ptx(m, gpu_options(options)))


def to_cubin(text: str, options) -> ir.Module:
    """`ptx` (or earlier) -> `cubin`: gpu.binary ops holding cubin (needs ptxas)."""
    opts = gpu_options(options)

    def run(module):
        if gpu_modules(module):
            pipeline.to_cubin(module, opts)
        else:
            _ptx_binaries_to_cubin(module, opts)
    return parse(text, run)


def _ptxas(ptx: str, chip: str) -> bytes:
    exe = shutil.which("ptxas")
    if exe is None:
        raise GpuLoweringError("the cubin stage needs NVIDIA's `ptxas` on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        done = subprocess.run([exe, f"-arch={chip}", src, "-o", out],
                              capture_output=True, text=True)
        if done.returncode:
            raise GpuLoweringError(f"ptxas failed: {done.stderr.strip()}")
        with open(out, "rb") as f:
            return f.read()


def _ptx_binaries_to_cubin(module: ir.Module, opts) -> None:
    """Resume from `ptx` text: assemble each PTX object with ptxas, in place."""
    for op in module.body.operations:
        if op.operation.name != "gpu.binary":
            continue
        objects = []
        for attr in ir.ArrayAttr(op.attributes["objects"]):
            obj = gpu.ObjectAttr(attr)
            data = obj.object
            if not bytes(data).startswith(b"\x7fELF"):
                ptx = data.decode() if isinstance(data, bytes) else data
                data = _ptxas(ptx, opts.chip)
            objects.append(gpu.ObjectAttr.get(obj.target, gpu.CompilationTarget.Binary,
                                              data, obj.properties, None))
        op.attributes["objects"] = ir.ArrayAttr.get(objects)


def kernel_objects(text: str) -> list[tuple[str, bytes, str]]:
    """(module name, object bytes, 'ptx' | 'cubin') for every gpu.binary, in body order."""
    return _kernel_objects(parse(text))


def _kernel_objects(module: ir.Module) -> list[tuple[str, bytes, str]]:
    out = []
    for op in module.body.operations:
        if op.operation.name != "gpu.binary":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        obj = gpu.ObjectAttr(ir.ArrayAttr(op.attributes["objects"])[0]).object
        data = obj if isinstance(obj, bytes) else obj.encode("latin-1")
        out.append((name, data, "cubin" if data.startswith(b"\x7fELF") else "ptx"))
    return out


def executable_parts(text: str) -> tuple[str, list[tuple[str, bytes, str]]]:
    """From `ptx`/`cubin` stage text: (plan in the runtime text format, kernels).

    Kernels are in module-index order (gpu.binary body order, as the gpu.modules were).
    """
    module = parse(text)
    kernels = _kernel_objects(module)
    if not kernels and not _has_plan(module):  # a plan of copies only has no kernels
        raise PipelineFailure("no gpu.binary in the input: expected `ptx` or `cubin` stage text")
    with module.context:
        if _has_plan(module):
            plan_text = launch_plan.lzrt_to_plan_text(module)
        else:
            plan_text = launch_plan.host_to_plan_text(module)
    return plan_text, kernels
