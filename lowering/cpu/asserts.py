"""Run-time asserts in compiled CPU code set a flag the runtime reads; they never abort.

Some torch-mlir lowerings check values at run time with `cf.assert` (index bounds in
gather/embedding loops, "tensor with zero element" in `aten.reciprocal`, broadcast
sizes with dynamic shapes). Upstream `convert-cf-to-llvm` lowers a failed one to
`puts` + `abort()`, which kills the user's Python process. At the start of the `llvm`
stage each `cf.assert %ok, "msg"` becomes

    scf.if !%ok { atomic or of 1 into @lazymlir_assert_flag }

and the module gets a public function `lazymlir_failed_asserts() -> i32` that returns
the flag and clears it, and `lazymlir_peek_asserts() -> i32` that returns it (a read of
one output of a graph still running: targets/cpu.py). After the LLVM conversions
(`share_flag`) the flag is a weak
hidden global: codegen.py compiles a large module's nests in separate objects, each
with a copy of the module's globals (lowering/cpu/units.py), and weak copies link as
one variable per library where internal ones would be one per object.
lazymlir/targets/cpu.py calls the getter after every run of a graph whose library has
it; a set flag makes the executor run the graph eagerly, as a set bounds-check flag
does (lowering/front/checks.py): eager raises its own error, or gives its own result
where the check was stricter than eager.

Why a global and not the graph's check-flag output: the asserts appear inside
torch-mlir's lowerings, far below the fx graph where check flags are added, and in
outlined loop nests that have no path to the graph's outputs. The flag is per loaded
library: two threads running one graph at once may both see the other's failure, which
costs an eager rerun, never a wrong value.
"""

from __future__ import annotations

from ..mlir_runner import walk

FLAG_FUNCTION = "lazymlir_failed_asserts"
PEEK_FUNCTION = "lazymlir_peek_asserts"
_FLAG_GLOBAL = "lazymlir_assert_flag"


def flag_asserts(module) -> int:
    """Rewrites every `cf.assert` of `module` (upstream bindings) as above; returns how
    many there were. A module without one is left as it is (no flag, no function)."""
    from mlir import ir
    from mlir.dialects import arith, func, memref, scf

    asserts = [op for op in walk(module.operation) if op.name == "cf.assert"]
    if not asserts:
        return 0
    with module.context, ir.Location.unknown(module.context):
        i32 = ir.IntegerType.get_signless(32)
        flag_type = ir.MemRefType.get([], i32)
        with ir.InsertionPoint.at_block_begin(module.body):
            memref.GlobalOp(sym_name=_FLAG_GLOBAL, type_=ir.TypeAttr.get(flag_type),
                            initial_value=ir.DenseElementsAttr.get_splat(
                                ir.RankedTensorType.get([], i32), ir.IntegerAttr.get(i32, 0)),
                            sym_visibility="private")
        for op in asserts:
            ok = op.operands[0]
            with ir.InsertionPoint(op), op.location:
                bad = arith.XOrIOp(ok, arith.ConstantOp(ok.type, 1).result).result
                branch = scf.IfOp(bad)
                with ir.InsertionPoint(branch.then_block):
                    flag = memref.GetGlobalOp(flag_type, _FLAG_GLOBAL).result
                    # Atomic: the assert may sit in a parallel loop (an OpenMP region).
                    memref.AtomicRMWOp(arith.AtomicRMWKind.ori,
                                       arith.ConstantOp(i32, 1).result, flag, [])
                    scf.YieldOp([])
            op.operation.erase()
        with ir.InsertionPoint(module.body):
            getter = func.FuncOp(FLAG_FUNCTION, ir.FunctionType.get([], [i32]))
            with ir.InsertionPoint(getter.add_entry_block()):
                flag = memref.GetGlobalOp(flag_type, _FLAG_GLOBAL).result
                zero = arith.ConstantOp(i32, 0).result
                value = memref.AtomicRMWOp(arith.AtomicRMWKind.assign, zero, flag, []).result
                func.ReturnOp([value])
            peek = func.FuncOp(PEEK_FUNCTION, ir.FunctionType.get([], [i32]))
            with ir.InsertionPoint(peek.add_entry_block()):
                flag = memref.GetGlobalOp(flag_type, _FLAG_GLOBAL).result
                zero = arith.ConstantOp(i32, 0).result  # (or 0: the flag as it is)
                value = memref.AtomicRMWOp(arith.AtomicRMWKind.ori, zero, flag, []).result
                func.ReturnOp([value])
    return len(asserts)


def share_flag(module) -> None:
    """The flag's `llvm.mlir.global` (private after finalize-memref-to-llvm) made weak
    and hidden: one variable per shared library, however the module is cut."""
    from mlir import ir

    with module.context:
        for op in module.body.operations:
            if op.operation.name == "llvm.mlir.global" and \
                    op.attributes["sym_name"].value == _FLAG_GLOBAL:
                op.attributes["linkage"] = ir.Attribute.parse("#llvm.linkage<weak>")
                op.attributes["visibility_"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), 1)  # hidden
