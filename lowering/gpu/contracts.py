"""The contracts of the cuda stages (`gpu`, `plan`, `nvvm`, `ptx`, `cubin`).

Their output has two sides with different rules: the host side (the public
func.func, or the lzrt launch plan `func.func @plan`) and the kernels (inside
gpu.module). A dialect-level allow-list per stage cannot say that, so each stage
has a structural check. Each names the first offending op and where it sits, so a
kernel a later stage cannot lower (e.g. an atomic kind without an NVVM lowering)
fails at the stage that produced it.
"""

from __future__ import annotations

from ..mlir_runner import walk

# Ops the host function may hold after `gpu` (gpu.launch_plan turns exactly these into a plan).
_GPU_HOST_OPS = frozenset({
    "arith.constant", "memref.alloc", "memref.dealloc", "memref.copy", "gpu.memset",
    "memref.expand_shape", "memref.collapse_shape", "memref.subview",
    "memref.reinterpret_cast", "memref.cast", "gpu.launch_func", "func.return",
})
# Dialects of kernel bodies at `gpu`/`plan` (upstream convert-gpu-to-nvvm lowers them all).
_KERNEL_DIALECTS = frozenset({"gpu", "arith", "math", "memref", "scf", "cf", "index",
                              "vector", "complex"})
# Dialects of kernel bodies at `nvvm`: everything else must have been converted.
_NVVM_DIALECTS = frozenset({"llvm", "nvvm"})
# memref.atomic_rmw kinds MemRefToLLVM lowers to one llvm.atomicrmw (others, e.g. mulf/
# muli, are left behind as unrealized casts and must be generic_atomic_rmw instead).
# The attribute is the arith::AtomicRMWKind enum as an i64 (values of MLIR 22); this
# module does not import either MLIR binding, so the table is spelled out.
_ATOMIC_KIND_NAMES = ("addf", "addi", "andi", "assign", "maximumf", "maxnumf", "maxs", "maxu",
                      "minimumf", "minnumf", "mins", "minu", "mulf", "muli", "ori", "xori")
_NVVM_ATOMIC_KINDS = frozenset(_ATOMIC_KIND_NAMES) - {"mulf", "muli", "xori"}


def _atomic_kind(op) -> str:
    text = _attr_text(op, "kind").split(":")[0].strip()
    if text.isdigit() and int(text) < len(_ATOMIC_KIND_NAMES):
        return _ATOMIC_KIND_NAMES[int(text)]
    return text


def _children(op):
    for region in op.operation.regions:
        for block in region.blocks:
            yield from block.operations


def _attr_text(op, name: str) -> str:
    try:
        return str(op.operation.attributes[name])
    except (KeyError, IndexError):
        return ""


def _sym(op) -> str:
    return _attr_text(op, "sym_name").strip('"')


def _where(kernel_module) -> str:
    return f"in kernel module @{_sym(kernel_module)}"


def _check_kernels(stage: str, gpu_module, allowed: frozenset[str]) -> str | None:
    for op in walk(gpu_module)[1:]:  # the ops nested in the kernel module
        name = op.operation.name
        if name == "builtin.unrealized_conversion_cast":
            return (f"op '{name}' is left {_where(gpu_module)} after stage '{stage}': a "
                    f"conversion did not finish (look for the op it feeds)")
        dialect = name.split(".", 1)[0]
        if dialect not in allowed:
            return (f"op '{name}' is not allowed {_where(gpu_module)} after stage '{stage}' "
                    f"(kernel dialects: {', '.join(sorted(allowed))}); it has no lowering "
                    f"to the next stage")
        if name == "memref.atomic_rmw":
            kind = _atomic_kind(op)
            if kind not in _NVVM_ATOMIC_KINDS:
                return (f"op 'memref.atomic_rmw' of kind '{kind}' {_where(gpu_module)} "
                        f"after stage '{stage}': NVVM has no lowering for it (use "
                        f"memref.generic_atomic_rmw)")
    return None


def _check_host_func(stage: str, func) -> str | None:
    for op in _children(func):
        name = op.operation.name
        if name in _GPU_HOST_OPS or (name.startswith("arith.") and not op.operation.regions):
            continue
        return (f"op '{name}' is left in the host function @{_sym(func)} after stage "
                f"'{stage}'; the host may only allocate, view, copy, memset, launch and free")
    return None


def _check_plan_func(stage: str, func) -> str | None:
    for op in _children(func):
        name = op.operation.name
        if not (name.startswith("lzrt.") or name == "func.return"):
            return (f"op '{name}' is not allowed in the launch plan @plan after stage "
                    f"'{stage}' (only lzrt ops)")
    return None


def _is_plan(func) -> bool:
    return _sym(func) == "plan" and any(
        op.operation.name.startswith("lzrt.") for op in _children(func))


def check_contract(stage: str, module_operation) -> str | None:
    """None when the module satisfies the cuda stage's contract, else a message naming
    the first offending op and where it sits."""
    top = list(_children(module_operation))
    funcs = [op for op in top if op.operation.name == "func.func"]
    kernels = [op for op in top if op.operation.name == "gpu.module"]
    binaries = [op for op in top if op.operation.name == "gpu.binary"]
    for op in top:
        if op.operation.name not in ("func.func", "gpu.module", "gpu.binary"):
            return (f"op '{op.operation.name}' is not allowed at the top level after stage "
                    f"'{stage}' (expected func.func, gpu.module, gpu.binary)")
    if stage == "plan" and not any(_is_plan(f) for f in funcs):
        return "stage 'plan' produced no launch plan (`func.func @plan` of lzrt ops)"
    for func in funcs:
        check = _check_plan_func if _is_plan(func) else _check_host_func
        if stage == "plan" and not _is_plan(func):
            return f"func.func @{_sym(func)} is left next to the launch plan after stage 'plan'"
        problem = check(stage, func)
        if problem:
            return problem
    if stage in ("gpu", "plan", "nvvm") and binaries:
        return f"gpu.binary found after stage '{stage}' (kernels are serialised at 'ptx')"
    if stage in ("ptx", "cubin"):
        if kernels:
            return (f"gpu.module @{_sym(kernels[0])} was not serialised after stage "
                    f"'{stage}'")
        launches = [op for f in funcs for op in _children(f)
                    if op.operation.name in ("lzrt.launch", "gpu.launch_func")]
        if launches and not binaries:  # a graph of copies/memsets only has no kernels
            return f"stage '{stage}' produced no gpu.binary for its {len(launches)} launches"
        return None
    allowed = _NVVM_DIALECTS if stage == "nvvm" else _KERNEL_DIALECTS
    for gm in kernels:
        problem = _check_kernels(stage, gm, allowed)
        if problem:
            return problem
    return None
