"""Half/bfloat16 ops computed in float32 and rounded once, as eager's CPU kernels compute
them (lowering.front.numerics applies these rules).

Eager's rule: a kernel for float16/bfloat16 computes in float32 (`opmath_type`) and rounds
its result once; a Python number (or a 0-d tensor, Scalar arguments) enters that float32
computation as float(number) unless the kernel casts it to the tensor's dtype first.
torch-mlir instead computes an op in the tensor's dtype: it rounds a number to bfloat16
before using it (`truncf f64 -> bf16`), and each step of an op it decomposes (gelu,
sigmoid, elu, log_softmax) is rounded to the half type. So, for ops on half tensors:

- `opmath`: ops whose kernel is float32 end to end (activations, log_softmax, pools,
  fmod, ...) run on float32 copies of their half tensors, numbers left as they are
  (torch-mlir converts them to float32: float(number), as eager), and are rounded once.
- `scalar_opmath`: mul and the divisions read a second operand that is one value
  (a number, or a 0-d tensor of a wider float type) at full precision
  (`iter.original_scalar_value<opmath_t>` in BinaryOpsKernel.cpp): `a * 1e-3` is
  float(a) * float(1e-3), rounded once. With two half tensors nothing changes: a
  bfloat16 product rounded once is what the bf16 lowering already computes.
- `alpha_opmath`: add/sub/rsub *cast* their number operand and alpha to the tensor's
  dtype (the ufunc kernels: `alpha.to<scalar_t>()`, the operand by TensorIterator's
  common-dtype cast), then compute `fmadd(other, alpha, self)` in float32 and round once
  (Vectorized<BFloat16>'s fmadd). torch-mlir rounded `alpha * other` before the add.
  A product of two half values is exact in float32, so mul then add in float32 is that
  fma. (`a + 0.1` with no alpha already matched: it is left alone.)
- `log_softmax` over the last dim: eager rounds the row's sum and its log to the half type.
- `elu` (any float type): eager's expm1 formula; torch-mlir's exp(x) - 1 lost small values.

Where eager's scalar tail loop (the last elements not filling a vector) computes
`self + alpha * other` in the half type, eager differs from its own vector loop; these
rules give the vector loop's values.
"""

from __future__ import annotations

import numbers

import torch
import torch.fx

from .fx_rewrite import Builder, cast, is_tensor, meta_val

aten = torch.ops.aten

HALF_TYPES = (torch.float16, torch.bfloat16)

# Ops whose eager CPU kernel computes half/bfloat16 in float32 (acc/opmath type)
# and rounds once; torch-mlir computes them in the half type (avg_pool sums a
# window in f16, fmod rounds x / y before truncating it, gelu's erf formula and
# sigmoid's 1 / (1 + exp(-x)) were rounded at each step: gelu differed from eager in
# 3152 of 8192 bfloat16 values, some near zero by 100%).
# _trilinear (bilinear's product) sums products in half in torch-mlir; eager's bmms
# accumulate in float32 (computed here in one float32 pass and rounded once: eager
# rounds between its two bmms, so results may differ from eager by that rounding, and
# are then closer to the exact product).
OPMATH = {
    aten.avg_pool2d.default, aten.avg_pool3d.default,
    aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default,
    aten.fmod.Tensor, aten.fmod.Scalar, aten._trilinear.default,
    # Activation.cpp / UnaryOpsKernel.cpp / SoftMaxKernel.cpp: float32 for reduced types.
    aten.gelu.default, aten.sigmoid.default, aten.elu.default, aten.leaky_relu.default,
    aten.softplus.default, aten.hardsigmoid.default, aten.hardswish.default,
    aten.mish.default, aten.silu.default,
    aten._log_softmax.default, aten._softmax.default,
}

# Eager reads their second operand at full precision when it is one value.
SCALAR_OPMATH = {aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar,
                 aten.div.Tensor_mode, aten.div.Scalar_mode}

# `self + alpha * other` (rsub: `other - alpha * self`), numbers cast to the dtype.
ALPHA_OPS = {aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar,
             aten.rsub.Tensor, aten.rsub.Scalar}


def _half_result(node: torch.fx.Node):
    """The half dtype of `node`'s (tensor) result, or None."""
    val = meta_val(node)
    if isinstance(val, torch.Tensor) and val.dtype in HALF_TYPES:
        return val.dtype
    return None


def opmath(b: Builder, node: torch.fx.Node):
    dtype = _half_result(node)
    if node.target not in OPMATH or dtype is None:
        return None
    args = tuple(cast(b, a, torch.float32) if is_tensor(a, dtype) else a for a in node.args)
    return cast(b, b(node.target, *args, **node.kwargs), dtype)


def _is_number(x) -> bool:
    """A Python number (not a bool) or a graph value holding one (a scalar input)."""
    if isinstance(x, torch.fx.Node):
        val = meta_val(x)
        return isinstance(val, numbers.Number) and not isinstance(val, bool)
    return isinstance(x, numbers.Number) and not isinstance(x, bool)


def _wide_scalar(x) -> bool:
    """A 0-d tensor of a float type wider than half (eager's `is_scalar` operand whose
    original value is not a half one)."""
    return is_tensor(x, torch.float32, torch.float64) and meta_val(x).dim() == 0


def scalar_opmath(b: Builder, node: torch.fx.Node):
    dtype = _half_result(node)
    if node.target not in SCALAR_OPMATH or dtype is None or len(node.args) < 2:
        return None
    self, other = node.args[:2]
    if not is_tensor(self, dtype) or not (_is_number(other) or _wide_scalar(other)):
        return None
    if isinstance(other, torch.fx.Node) and is_tensor(other):
        other = cast(b, other, torch.float32)  # (a double: rounded to float, as eager)
    wide = b(node.target, cast(b, self, torch.float32), other, *node.args[2:], **node.kwargs)
    return cast(b, wide, dtype)


def _in_dtype(b: Builder, x, dtype: torch.dtype):
    """Number `x` rounded to `dtype` (through float, as c10's conversions): a Python
    float, or for a graph value, a float32 0-d tensor holding the rounded value."""
    if not isinstance(x, torch.fx.Node):
        return float(torch.tensor(float(x), dtype=torch.float32).to(dtype))
    return cast(b, b(aten.scalar_tensor.default, x, dtype=dtype), torch.float32)


def _mul(b: Builder, x, y):
    """x * y for a float32 tensor or a Python float x and a Python float or 0-d tensor y."""
    if not isinstance(x, torch.fx.Node) and not isinstance(y, torch.fx.Node):
        return x * y  # (two half values: exact in a double, and in float)
    if not isinstance(x, torch.fx.Node):
        x, y = y, x
    return b(aten.mul.Tensor if isinstance(y, torch.fx.Node) else aten.mul.Scalar, x, y)


def alpha_opmath(b: Builder, node: torch.fx.Node):
    dtype = _half_result(node)
    if node.target not in ALPHA_OPS or dtype is None or len(node.args) < 2:
        return None
    alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
    if not isinstance(alpha, torch.fx.Node) and alpha == 1:
        return None  # one rounding of a sum: what the bf16 lowering computes
    self, other = node.args[:2]
    if not _is_number(alpha) or not is_tensor(self, dtype) or not (
            is_tensor(other, dtype) or _is_number(other)):
        return None
    self = cast(b, self, torch.float32)
    other = cast(b, other, torch.float32) if is_tensor(other) else _in_dtype(b, other, dtype)
    alpha = _in_dtype(b, alpha, dtype)
    if node.target in (aten.rsub.Tensor, aten.rsub.Scalar):  # other - alpha * self
        out = b(aten.rsub.Tensor if isinstance(other, torch.fx.Node) else aten.rsub.Scalar,
                _mul(b, self, alpha), other)
    else:
        scaled = _mul(b, other, alpha)  # exact: a product of two half values
        subtract = node.target in (aten.sub.Tensor, aten.sub.Scalar)
        out = b(aten.sub.Tensor if subtract else aten.add.Tensor, self, scaled)
    return cast(b, out, dtype)


def log_softmax(b: Builder, node: torch.fx.Node):
    """_log_softmax of a half tensor over a dim with nothing after it (inner size 1):
    eager's `_vec_log_softmax_lastdim` computes in float32 but keeps the row's sum of
    exp and its log in the half type (`scalar_t tmp_sum_scalar[]`): out =
    round(x - max - round(log(round(sum)))). In float32 throughout, 1303 of 8192
    bfloat16 values differed. Over other dims eager is float32 throughout (`opmath`)."""
    dtype = _half_result(node)
    if node.target is not aten._log_softmax.default or dtype is None:
        return None
    x, dim = node.args[:2]
    shape = list(meta_val(x).shape)
    if not is_tensor(x, dtype) or not shape or any(s != 1 for s in shape[dim % len(shape) + 1:]):
        return None

    def rounded(t):
        return cast(b, cast(b, t, dtype), torch.float32)

    wide = cast(b, x, torch.float32)
    high = b(aten.amax.default, wide, [dim], True)
    shifted = b(aten.sub.Tensor, wide, high)
    total = b(aten.sum.dim_IntList, b(aten.exp.default, shifted), [dim], True)
    return cast(b, b(aten.sub.Tensor, shifted, rounded(b(aten.log.default, rounded(total)))),
                dtype)


def elu(b: Builder, node: torch.fx.Node):
    """elu (and celu, selu, which PyTorch traces as elu) as eager's kernel: x >= 0 ?
    x * scale : expm1(x * input_scale) * (alpha * scale), the coefficient computed in the
    tensor's type (float32 for half types, which `opmath` has already widened).
    torch-mlir's decomposition computes exp(x) - 1: elu(-1e-39) was 0 (eager -1e-39),
    and float32 results near zero were 4e-5 off."""
    if node.target is not aten.elu.default or not is_tensor(node, torch.float32, torch.float64):
        return None
    x, *params = node.args
    params = dict(zip(("alpha", "scale", "input_scale"), params), **node.kwargs)
    alpha, scale, input_scale = (params.get(k, 1.0) for k in ("alpha", "scale", "input_scale"))
    if any(isinstance(p, torch.fx.Node) for p in (alpha, scale, input_scale)):
        return None  # (numbers known only at run time: torch-mlir's decomposition)
    dtype = meta_val(node).dtype
    negcoef = float(torch.tensor(alpha, dtype=dtype) * torch.tensor(scale, dtype=dtype))
    scaled = x if input_scale == 1 else b(aten.mul.Scalar, x, input_scale)
    negative = b(aten.mul.Scalar, b(aten.expm1.default, scaled), negcoef)
    positive = x if scale == 1 else b(aten.mul.Scalar, x, scale)
    return b(aten.where.self, b(aten.ge.Scalar, x, 0), positive, negative)
