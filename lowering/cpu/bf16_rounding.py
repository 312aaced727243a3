"""How the CPU builds round to bfloat16 and float16: as eager PyTorch does, on every
host. `apply` runs it on a loops-stage module, before the LLVM conversions: the cpu
target's graphs and the CUDA emulator's CPU builds of the gpu kernels (whose
`fptrunc double to bfloat` failed to link just the same, and whose bfloat16 products
flushed subnormals to zero on an AVX512-BF16 host, where the PTX rounds as eager).

1. double -> bfloat16 and double -> float16 go through float32
   (`split_double_to_half`, lowering/half_conversions.py: the cuda target's kernels
   need it too), as eager converts (`c10::BFloat16` and `c10::Half`
   are built from a float: the double is rounded to float first). LLVM lowers
   `fptrunc double to bfloat` on x86 to a call to `__truncdfbf2`, which neither
   libgcc (12) nor anything the CPU `.so` links provides: every bfloat16 graph
   with a double constant or value (`full(..., 2.5)`, a float64 intermediate)
   failed to load with "undefined symbol: __truncdfbf2". `fptrunc double to half`
   links (libgcc's `__truncdfhf2`) but rounds once: a double just above a float16
   tie (1.4901161194e-07, 2.5 float16 subnormal steps and a bit) rounded up where
   eager's double rounding (to the float tie, then to even) rounds down.

2. float32 -> bfloat16 is rounded with integer instructions (`round_in_integers`),
   and arithmetic on bfloat16 values first becomes float32 arithmetic with such
   a rounding after each op (BF16_ARITHMETIC_PIPELINE). LLVM's own lowering of
   `fptrunc float to bfloat` (explicit, or the one it inserts after each op on
   `bfloat` values it computes in float) depends on the host: with AVX512-BF16
   (AMD Zen 4, Intel Cooper Lake and later) it is `vcvtneps2bf16`, which treats
   subnormal inputs as zero, so 1e-40 became 0 where eager keeps 9.18e-41; on
   CPUs without it, a call of `__truncsfbf2` per element (lazymlir/targets/
   cpu_builtins.py), even in vector code (16 calls for a vector of 16). Eager's
   rounding (`c10::BFloat16`, and its AVX2/AVX-512 kernels, `cvtfp32_bf16`) is
   integer arithmetic: add 0x7fff plus the lowest kept bit, keep the high half,
   which rounds to nearest, ties to even, keeps subnormals, and overflows to
   infinity. This is that sequence, in `arith`, for scalars and vectors alike.
   NaN: eager's vectorized kernels give 0xffff for every NaN (c10's scalar
   conversion 0x7fc0; either is a NaN); this gives eager's kernels' bits.

3. bfloat16 -> float32 is exact everywhere (the bits shifted into the high half);
   it is written as that shift (`widen_in_integers`), so that LLVM is left no
   `bfloat` op: with its `fpext bfloat` kept, the loop vectorizer vectorized the
   loop of a 4M-element bfloat16 `(a*a+a)*a` by 4 lanes (by 32 with the shift),
   and the graph took 3.12 ms instead of 1.46 ms (call by call, 2 threads).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from . import small_math
from ..half_conversions import element_of, split_double_to_half, truncations, with_element
from ..mlir_runner import UPSTREAM, run_pipeline, walk

# bfloat16 arithmetic -> float32 ops between `extf` and `truncf` (which
# `round_in_integers` then rewrites): what LLVM's type promotion does, but with the
# rounding explicit in the IR.
BF16_ARITHMETIC_PIPELINE = (
    "builtin.module(func.func("
    "arith-emulate-unsupported-floats{source-types=bf16 target-type=f32}))"
)

# `math` ops on bfloat16 and float16 -> the float32 op between `extf` and `truncf`: one
# rounding of the float result, as eager's kernels (Vectorized<Half>::rsqrt and the
# others convert to float, compute, convert back). Left on f16, the `math` lowerings
# that expand an op into several (rsqrt -> 1 / sqrt, expm1 -> exp - 1, log1p ->
# log(1 + x)) had LLVM round each step to float16: float16 rsqrt differed from eager
# in 2356 of 8192 randn values, expm1 and log1p in ~4000 (100% near zero). The f16
# truncf is LLVM's `fptrunc float to half` (F16C's `vcvtps2ph`: rounds to nearest
# even and keeps subnormals, as eager).
HALF_MATH_PIPELINE = "builtin.module(func.func(math-extend-to-supported-types{target-type=f32}))"

# What a NaN rounds to: eager's vectorized kernels' all-ones (negative, quiet) NaN.
NAN_BITS = 0xFFFF


def _constant(t: ir.Type, value: int, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """An integer constant of type `t` (a vector type: a splat)."""
    element = element_of(t)
    attr = ir.IntegerAttr.get(element, value)
    if isinstance(t, ir.ShapedType):
        attr = ir.DenseElementsAttr.get_splat(t, attr)
    return arith.ConstantOp(t, attr, loc=loc, ip=ip).result


def _round(op: ir.Operation) -> ir.Value:
    """The bits of eager's bfloat16 rounding of `op`'s f32 operand, as a bf16 value,
    built just before `op`."""
    source = op.operands[0]
    loc, ip = op.location, ir.InsertionPoint(op)
    with loc:  # (vector types are built at a location)
        i32 = with_element(source.type, ir.IntegerType.get_signless(32))
        i16 = with_element(source.type, ir.IntegerType.get_signless(16))
    bits = arith.BitcastOp(i32, source, loc=loc, ip=ip).result
    sixteen = _constant(i32, 16, ip, loc)
    kept_low_bit = arith.AndIOp(arith.ShRUIOp(bits, sixteen, loc=loc, ip=ip).result,
                                _constant(i32, 1, ip, loc), loc=loc, ip=ip).result
    bias = arith.AddIOp(kept_low_bit, _constant(i32, 0x7FFF, ip, loc), loc=loc, ip=ip).result
    # (a carry out of the mantissa raises the exponent: the next binade, or infinity)
    rounded = arith.ShRUIOp(arith.AddIOp(bits, bias, loc=loc, ip=ip).result, sixteen,
                            loc=loc, ip=ip).result
    half = arith.TruncIOp(i16, rounded, loc=loc, ip=ip).result
    # (a NaN whose payload is all in the low half would round to infinity, and
    # 0x7fffffff carry into the sign bit)
    is_nan = arith.CmpFOp(arith.CmpFPredicate.UNO, source, source, loc=loc, ip=ip).result
    half = arith.SelectOp(is_nan, _constant(i16, NAN_BITS, ip, loc), half, loc=loc, ip=ip).result
    return arith.BitcastOp(op.results[0].type, half, loc=loc, ip=ip).result


def _widen(op: ir.Operation) -> ir.Value:
    """`op`'s bf16 operand as f32 (exact: the bits shifted into the high half), then as
    `op`'s result type (f32 or f64), built just before `op`."""
    source = op.operands[0]
    loc, ip = op.location, ir.InsertionPoint(op)
    with loc:
        i32 = with_element(source.type, ir.IntegerType.get_signless(32))
        i16 = with_element(source.type, ir.IntegerType.get_signless(16))
        f32 = with_element(source.type, ir.F32Type.get())
    half = arith.BitcastOp(i16, source, loc=loc, ip=ip).result
    wide = arith.ExtUIOp(i32, half, loc=loc, ip=ip).result
    bits = arith.ShLIOp(wide, _constant(i32, 16, ip, loc), loc=loc, ip=ip).result
    value = arith.BitcastOp(f32, bits, loc=loc, ip=ip).result
    if value.type != op.results[0].type:
        value = arith.ExtFOp(op.results[0].type, value, loc=loc, ip=ip).result
    return value


def round_in_integers(module: ir.Module) -> None:
    """Rewrite every `arith.truncf` from f32 to bf16 in `module` (in place) into
    eager's integer rounding. A truncf with an explicit rounding mode (torch-mlir
    emits none) is left to LLVM."""
    for op in truncations(module, ir.F32Type):
        if "roundingmode" in op.attributes:
            continue
        op.results[0].replace_all_uses_with(_round(op))
        op.erase()


def widen_in_integers(module: ir.Module) -> None:
    """Rewrite every `arith.extf` from bf16 to f32 or f64 in `module` (in place) into
    a 16-bit shift (and f32 -> f64)."""
    for op in walk(module.operation):
        if op.name == "arith.extf" and isinstance(element_of(op.operands[0].type), ir.BF16Type) \
                and isinstance(element_of(op.results[0].type), (ir.F32Type, ir.F64Type)):
            op.results[0].replace_all_uses_with(_widen(op))
            op.erase()


def _keep_conversions(module: ir.Module) -> None:
    """Drop the `fastmath<contract>` that math-extend-to-supported-types puts on the
    extf/truncf it adds: it allows folding a truncf-extf pair away (eager rounds after
    each op), and convert-arith-to-llvm left it on llvm.fpext/fptrunc as an `arith`
    attribute that mlir-translate could not parse (the CUDA emulator's float16 rsqrt)."""
    for op in walk(module.operation):
        if op.name in ("arith.extf", "arith.truncf") and "fastmath" in op.attributes:
            del op.attributes["fastmath"]


def apply(module: ir.Module, text: str | None = None) -> None:
    """Every rewrite of this module, in order, and small_math's expm1/log1p, in place.
    `text`: the module's text if the caller has it (what it lacks is skipped)."""
    text = str(module) if text is None else text
    if "f16" in text:  # (also "bf16")
        split_double_to_half(module)
        if "math." in text:
            run_pipeline(UPSTREAM, None, HALF_MATH_PIPELINE, module=module)
            _keep_conversions(module)
    if "bf16" in text:
        run_pipeline(UPSTREAM, None, BF16_ARITHMETIC_PIPELINE, module=module)
        round_in_integers(module)
        widen_in_integers(module)
    # expm1/log1p without exp(x) - 1's cancellation (small_math.py).
    if "math.expm1" in text or "math.log1p" in text:
        small_math.expand(module)
