"""`math.expm1` and `math.log1p` without cancellation, for the CPU builds (the cpu target
and the CUDA emulator). Run on a loops-stage module, before `convert-math-to-llvm`.

`convert-math-to-llvm` lowers `expm1(x)` to `exp(x) - 1` and `log1p(x)` to
`log(1 + x)`, which lose everything near zero: float32 expm1(1e-10) and log1p(1e-10)
were 0 (eager 1e-10), and the float16/bfloat16 results of expm1, log1p, elu, celu,
softplus and mish differed from eager's in up to 4093 of 8192 randn values (100% near
zero). The PTX path calls libdevice's `__nv_expm1f`/`__nv_log1pf` and needs none of this.

Instead, the classic corrections (Kahan; Higham, "Accuracy and Stability of Numerical
Algorithms", 1.14.1), which need only `exp` and `log` (so the schedule's vector loops
still become libmvec calls) and are accurate to a few ulps:

    expm1(x) = x                    where u = exp(x) == 1
             = -1                   where u - 1 == -1
             = u                    where u == +inf
             = (u - 1) * (x / log(u)) otherwise
    log1p(x) = x                    where u = 1 + x == 1
             = u                    where u == +inf
             = log(u) * (x / (u - 1)) otherwise

(-0.0 and subnormal x: u == 1, so x itself; NaN propagates.)
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math

from ..mlir_runner import walk


def _splat(t: ir.Type, value: float, loc: ir.Location, ip: ir.InsertionPoint) -> ir.Value:
    """A float constant of type `t` (a vector type: a splat)."""
    element = t.element_type if isinstance(t, ir.ShapedType) else t
    attr = ir.FloatAttr.get(element, value)
    if isinstance(t, ir.ShapedType):
        attr = ir.DenseElementsAttr.get_splat(t, attr)
    return arith.ConstantOp(t, attr, loc=loc, ip=ip).result


def _expm1(x: ir.Value, loc: ir.Location, ip: ir.InsertionPoint) -> ir.Value:
    t = x.type
    one, minus_one = _splat(t, 1.0, loc, ip), _splat(t, -1.0, loc, ip)
    inf = _splat(t, float("inf"), loc, ip)
    u = math.ExpOp(x, loc=loc, ip=ip).result
    um1 = arith.SubFOp(u, one, loc=loc, ip=ip).result
    # (u - 1) * (x / log(u)): x / log(u) is near 1, where (u - 1) * x overflowed for
    # x near 88 (expm1(88) is finite in float32).
    general = arith.MulFOp(um1, arith.DivFOp(x, math.LogOp(u, loc=loc, ip=ip).result,
                                             loc=loc, ip=ip).result, loc=loc, ip=ip).result
    out = general
    for where, value in ((arith.CmpFOp(arith.CmpFPredicate.OEQ, u, inf, loc=loc, ip=ip), u),
                         (arith.CmpFOp(arith.CmpFPredicate.OEQ, um1, minus_one,
                                       loc=loc, ip=ip), minus_one),
                         (arith.CmpFOp(arith.CmpFPredicate.OEQ, u, one, loc=loc, ip=ip), x)):
        out = arith.SelectOp(where.result, value, out, loc=loc, ip=ip).result
    return out


def _log1p(x: ir.Value, loc: ir.Location, ip: ir.InsertionPoint) -> ir.Value:
    t = x.type
    one, inf = _splat(t, 1.0, loc, ip), _splat(t, float("inf"), loc, ip)
    u = arith.AddFOp(one, x, loc=loc, ip=ip).result
    # log(u) * (x / (u - 1)): log(u) * x overflowed for x near the largest floats.
    general = arith.MulFOp(
        math.LogOp(u, loc=loc, ip=ip).result,
        arith.DivFOp(x, arith.SubFOp(u, one, loc=loc, ip=ip).result, loc=loc, ip=ip).result,
        loc=loc, ip=ip).result
    out = general
    for where, value in ((arith.CmpFOp(arith.CmpFPredicate.OEQ, u, inf, loc=loc, ip=ip), u),
                         (arith.CmpFOp(arith.CmpFPredicate.OEQ, u, one, loc=loc, ip=ip), x)):
        out = arith.SelectOp(where.result, value, out, loc=loc, ip=ip).result
    return out


_EXPANSIONS = {"math.expm1": _expm1, "math.log1p": _log1p}


def expand(module: ir.Module) -> int:
    """Rewrite every `math.expm1`/`math.log1p` in `module` in place; returns how many."""
    ops = [op for op in walk(module.operation) if op.name in _EXPANSIONS]
    for op in ops:
        with op.location:  # (the result types are inferred at a location)
            value = _EXPANSIONS[op.name](op.operands[0], op.location, ir.InsertionPoint(op))
        op.results[0].replace_all_uses_with(value)
        op.erase()
    return len(ops)
