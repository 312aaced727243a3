"""One function per graph entry: the body of `X` moved into its C interface `_mlir_ciface_X`.

Runs at the end of the CPU `llvm` stage. `convert-func-to-llvm` gives a function
marked `llvm.emit_c_interface` a wrapper that takes one memref descriptor pointer
per argument (what lazymlir/targets/cpu.py calls), loads every field and calls
the function with the fields as separate arguments: five to nine per memref. An
AdamW step of a small GPT takes 170 buffers, so that call had over a thousand
arguments, most of them on the stack, and `llc -O3`'s instruction selection spent
9.1 of its 10.2 s on that one call (`llc -time-trace`; the moved body: 1.7 s for
the whole module). LLVM does not inline the callee (it is public), and
`llvm-split` may put the two in different parts, so the move is done here: the
wrapper branches to the function's blocks with the loaded fields as the entry
block's arguments, and the function, which nothing else calls, is erased.

Then each C interface takes its descriptor pointers packed: one argument, an array
of pointers (`_mlir_ciface_X(void **buffers)`), loaded by a new entry block. A C call
through ctypes takes at most 1024 arguments, and a training step of a real model
has more buffers (MobileNetV3-Small: 1714); one argument also keeps every call
cheap in the callers' ABI (no thousand-argument stack frame).
"""

from __future__ import annotations

from collections import Counter

from ..mlir_runner import walk

PREFIX = "_mlir_ciface_"


def _symbol(op) -> str:
    return op.attributes["sym_name"].value


def _callee(op) -> str | None:
    if op.operation.name != "llvm.call" or "callee" not in op.operation.attributes:
        return None
    return op.operation.attributes["callee"].value


def _call_counts(module) -> Counter:
    """Callee name -> calls in the whole module, nested regions (OpenMP) included. The
    walk runs in C++: Python's generator walk took 0.18 s on a GPT backward graph."""
    counts: Counter = Counter()
    for op in walk(module.operation):
        callee = _callee(op)
        if callee is not None:
            counts[callee] += 1
    return counts


def fold_into_c_interfaces(module, called: set[str] | None = None) -> None:
    """Move each C-interface wrapper's callee into the wrapper (call inside the module's
    context). Wrappers of a different shape, and callees with other callers, are left.
    `called`: the functions the module used before its LLVM conversion (which adds
    only the wrappers' calls), if the caller knows them; else the module's calls are
    counted."""
    from mlir import ir
    from mlir.dialects import llvm

    funcs = {_symbol(op): op for op in module.body.operations
             if op.operation.name == "llvm.func"}
    calls = _call_counts(module) if called is None else \
        Counter({name: 1 + (name in called) for name in funcs})
    for name, wrapper in funcs.items():
        if not name.startswith(PREFIX) or name[len(PREFIX):] not in funcs:
            continue
        target = funcs[name[len(PREFIX):]]
        if not target.regions[0].blocks or len(wrapper.regions[0].blocks) != 1:
            continue  # a declaration, or not the one-block wrapper
        ops = list(wrapper.regions[0].blocks[0].operations)
        if len(ops) < 2 or _callee(ops[-2]) != _symbol(target) or \
                ops[-1].operation.name != "llvm.return" or list(ops[-2].results):
            continue
        if calls[_symbol(target)] != 1:
            continue  # called elsewhere too
        call, ret = ops[-2], ops[-1]
        blocks = list(target.regions[0].blocks)
        for block in blocks:
            block.append_to(wrapper.regions[0])
        with ir.InsertionPoint(call), call.location:
            llvm.BrOp(list(call.operands), blocks[0])
        call.erase()
        ret.erase()
        target.erase()
        # The entry is one long block of descriptor loads, allocations and calls of the
        # outlined loop nests (outline); on a Zen 3 host llc's post-RA list scheduler
        # (quadratic in a block's length) took 2.7 of the 2.7 s for an AdamW step over
        # 100 parameters, 0.03 s with generic tuning. The nests keep the host's tuning.
        wrapper.attributes["tune_cpu"] = ir.StringAttr.get("generic")
    for name, wrapper in funcs.items():
        if name.startswith(PREFIX) and wrapper.regions[0].blocks:
            _pack_arguments(wrapper)


def _pack_arguments(function) -> None:
    """`function(p0, ..., pn)` (every p a pointer) -> `function(ptr buffers)`: a new entry
    block loads p_i = buffers[i] and branches to the old entry, whose arguments become
    the loaded values."""
    from mlir import ir
    from mlir.dialects import llvm

    region = function.regions[0]
    entry = region.blocks[0]
    ptr = ir.Type.parse("!llvm.ptr")
    if any(arg.type != ptr for arg in entry.arguments):
        raise ValueError(f"{_symbol(function)}: a C interface takes pointers only")
    with function.location:
        packed = entry.create_before(ptr)
    buffers = packed.arguments[0]
    with ir.InsertionPoint(packed), function.location:
        loaded = []
        for i in range(len(entry.arguments)):
            slot = llvm.GEPOp(ptr, buffers, [], [i], ptr, 0) if i else buffers
            loaded.append(llvm.LoadOp(ptr, slot, alignment=8).result)
        llvm.BrOp(loaded, entry)
    function.attributes["function_type"] = ir.TypeAttr.get(
        ir.Type.parse("!llvm.func<void (ptr)>"))
    for attr in ("arg_attrs",):
        if attr in function.attributes:
            del function.attributes[attr]
