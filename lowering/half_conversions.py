"""double -> bfloat16/float16 conversions rounded as eager PyTorch rounds them: through
float32, on both targets.

Eager converts a double to `c10::Half` or `c10::BFloat16` through a float (both are
built from one): the double is rounded to float first, then to the half type, on the
CPU and in CUDA kernels alike. A single `arith.truncf` from f64 rounds once: LLVM's
`fptrunc double to half` on x86 (libgcc's `__truncdfhf2`), and NVPTX's
`cvt.rn.f16.f64` / `cvt.rn.bf16.f64` on a GPU. A double just above a float16 tie
(1.4901161194e-07: 2.5 float16 subnormal steps and a bit) then rounds up where eager
rounds to the float tie and then to even, down. Found on an H200: the cuda target's
kernels differed from eager in float64 -> float16/bfloat16 conversions
(docs/gpu-results.md, session 24), while the CPU builds (cpu target, emulator) had
this rewrite already (lowering/cpu/bf16_rounding.py).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from .mlir_runner import walk


def element_of(t: ir.Type) -> ir.Type:
    return t.element_type if isinstance(t, ir.ShapedType) else t


def with_element(t: ir.Type, element: ir.Type) -> ir.Type:
    if isinstance(t, ir.VectorType):
        return ir.VectorType.get(t.shape, element, scalable=t.scalable_dims)
    if isinstance(t, ir.RankedTensorType):
        return ir.RankedTensorType.get(t.shape, element)
    return element


def truncations(module: ir.Module, source: type,
                 results: tuple[type, ...] = (ir.BF16Type,)) -> list[ir.Operation]:
    """The `arith.truncf` ops from `source` (an ir type class) to one of `results`
    in `module`."""
    return [op for op in walk(module.operation)
            if op.name == "arith.truncf" and isinstance(element_of(op.results[0].type), results)
            and isinstance(element_of(op.operands[0].type), source)]


def split_double_to_half(module: ir.Module) -> None:
    """Rewrite every `arith.truncf` from f64 to bf16 or f16 in `module` in place."""
    for op in truncations(module, ir.F64Type, (ir.BF16Type, ir.F16Type)):
        source = op.operands[0]
        with op.location:  # (vector types are built at a location)
            f32 = with_element(source.type, ir.F32Type.get())
            narrowed = arith.TruncFOp(f32, source, ip=ir.InsertionPoint(op))
        op.operands[0] = narrowed.result
