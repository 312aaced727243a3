"""double -> bfloat16 conversions go through float32: run before the LLVM conversion.

LLVM lowers `fptrunc double to bfloat` on x86 to a call to `__truncdfbf2`,
which neither libgcc (12) nor anything the CPU `.so` links provides: every
bfloat16 graph with a double constant or value (`full(..., 2.5)`, a float64
intermediate) failed to load with "undefined symbol: __truncdfbf2". float32 to
bfloat16 LLVM expands inline. Eager PyTorch converts a double to bfloat16 the
same two-step way (`c10::BFloat16` is built from a float: the double is
rounded to float first), so `arith.truncf f64 -> bf16` becomes
`truncf f64 -> f32` then `truncf f32 -> bf16`, which is also what eager computes.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from ..mlir_runner import walk


def _element(t: ir.Type) -> ir.Type:
    return t.element_type if isinstance(t, ir.ShapedType) else t


def _with_element(t: ir.Type, element: ir.Type) -> ir.Type:
    if isinstance(t, ir.VectorType):
        return ir.VectorType.get(t.shape, element, scalable=t.scalable_dims)
    if isinstance(t, ir.RankedTensorType):
        return ir.RankedTensorType.get(t.shape, element)
    return element


def split_double_to_bfloat16(module: ir.Module) -> None:
    """Rewrite every `arith.truncf` from f64 to bf16 in `module` in place."""
    found: list[ir.Operation] = []

    def collect(op: ir.Operation) -> None:
        if op.name == "arith.truncf" and isinstance(_element(op.results[0].type), ir.BF16Type) \
                and isinstance(_element(op.operands[0].type), ir.F64Type):
            found.append(op)

    for op in walk(module.operation):
        collect(op)
    for op in found:
        source = op.operands[0]
        f32 = _with_element(source.type, ir.F32Type.get())
        narrowed = arith.TruncFOp(f32, source, loc=op.location, ip=ir.InsertionPoint(op))
        op.operands[0] = narrowed.result
