"""Complex arithmetic torch-mlir cannot lower, rewritten on (real, imaginary) pairs.

An FX-level rewrite, applied before torch-mlir imports the graph (so on both entry
points). torch-mlir lowers complex `mul`, `mm`, `view_as_real`, `view_as_complex` and
`complex`, and the cpu stages lower the `complex` dialect they leave; its lowerings of
`add`/`sub` (an integer multiply by alpha), `div`, `abs`, `exp`, `neg`, `angle`,
`_conj`, `sum`, `polar` (broadcast) and casts from real fail on complex operands, and
it has no complex `sqrt`, `rsqrt`, `log`, `pow`, `reciprocal`, `sin`/`cos`/`sinh`/`cosh`,
`tanh` or `sigmoid`. Each of those becomes real arithmetic on `view_as_real` of its
operands ([..., 2]: real and imaginary parts) and, for a complex result, `view_as_complex`
of the pair. Division is the textbook formula (eager's CPU kernel scales by the larger
part first), so results can differ from eager's in the last bits, and overflow earlier for
parts above ~1e154 (complex128) or ~1e19 (complex64); the same holds for |z| inside sqrt
and log. sqrt and log take eager's side of the branch cut for -0.0 imaginary parts;
`0 ** w` with a complex `w` is 0, where eager's C `cpow` gives NaNs for a zero with a
-0.0 part.
"""

from __future__ import annotations

import torch
import torch.fx

from .fx_rewrite import Builder, fake_mode, meta_val

aten = torch.ops.aten


class _PairBuilder(Builder):
    """fx_rewrite's builder, plus complex values as (real, imaginary) pairs."""

    def pair(self, x) -> torch.fx.Node:
        """`x` as [..., 2] real and imaginary parts (a real tensor: imaginary 0)."""
        if meta_val(x).dtype.is_complex:
            return self(aten.view_as_real.default, x)
        zero = self(aten.mul.Scalar, x, 0)
        return self(aten.stack.default, [x, zero], -1)

    def parts(self, x) -> tuple[torch.fx.Node, torch.fx.Node]:
        pair = self.pair(x)
        return (self(aten.select.int, pair, -1, 0), self(aten.select.int, pair, -1, 1))

    def complex(self, re, im, dtype) -> torch.fx.Node:
        pair = self(aten.stack.default, [re, im], -1)
        return self.from_pair(pair, dtype)

    def from_pair(self, pair, dtype) -> torch.fx.Node:
        real = _real_of(dtype)
        if meta_val(pair).dtype != real:
            pair = self(aten._to_copy.default, pair, dtype=real)
        return self(aten.view_as_complex.default, pair)


def _real_of(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64,
            torch.complex32: torch.float16}[dtype]


def _complex_tensor(x) -> bool:
    val = meta_val(x)
    return isinstance(val, torch.Tensor) and val.dtype.is_complex


def _real_number(x) -> bool:
    """A real Python number, or a graph's scalar input (a float that changes per step)."""
    if isinstance(x, torch.fx.Node):
        return isinstance(meta_val(x), (int, float, torch.SymInt, torch.SymFloat))
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _tensor(x) -> bool:
    return isinstance(meta_val(x), torch.Tensor)


def _squared_modulus(b, re, im):
    """re^2 + im^2."""
    return b(aten.add.Tensor, b(aten.mul.Tensor, re, re), b(aten.mul.Tensor, im, im))


def _add(b, node, sign):
    a, other = node.args[0], node.args[1]
    alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
    dtype = meta_val(node).dtype
    if not isinstance(alpha, (int, float)) or not _tensor(a):
        return None
    if _tensor(other):
        scaled = b(aten.mul.Scalar, b.pair(other), sign * alpha)
    elif isinstance(other, torch.fx.Node):
        return None  # a scalar input: too rare to be worth a form
    elif _real_number(other) or isinstance(other, complex):
        value = complex(other) * sign * alpha
        re, im = b.parts(a)
        return b.complex(b(aten.add.Scalar, re, value.real), b(aten.add.Scalar, im, value.imag),
                         dtype)
    else:
        return None
    return b.from_pair(b(aten.add.Tensor, b.pair(a), scaled), dtype)


def _neg(b, node):
    return b.from_pair(b(aten.neg.default, b.pair(node.args[0])), meta_val(node).dtype)


def _conj(b, node):
    re, im = b.parts(node.args[0])
    return b.complex(re, b(aten.neg.default, im), meta_val(node).dtype)


def _abs(b, node):
    return b(aten.sqrt.default, _squared_modulus(b, *b.parts(node.args[0])))


def _angle(b, node):
    re, im = b.parts(node.args[0])
    return b(aten.atan2.default, im, re)


def _exp(b, node):
    return b.complex(*_exp_parts(b, *b.parts(node.args[0])), meta_val(node).dtype)


def _div(b, node):
    a, other = node.args[0], node.args[1]
    if not _tensor(a) or node.kwargs.get("rounding_mode") is not None:
        return None
    dtype = meta_val(node).dtype
    if not _tensor(other):
        if not _real_number(other):
            return None
        return b.from_pair(b(aten.div.Tensor, b.pair(a), other), dtype)
    if not _complex_tensor(other):  # a real divisor divides both parts
        return b.from_pair(b(aten.div.Tensor, b.pair(a), b(aten.unsqueeze.default, other, -1)),
                           dtype)
    ar, ai = b.parts(a)
    br, bi = b.parts(other)
    den = _squared_modulus(b, br, bi)
    re = b(aten.add.Tensor, b(aten.mul.Tensor, ar, br), b(aten.mul.Tensor, ai, bi))
    im = b(aten.sub.Tensor, b(aten.mul.Tensor, ai, br), b(aten.mul.Tensor, ar, bi))
    return b.complex(b(aten.div.Tensor, re, den), b(aten.div.Tensor, im, den), dtype)


def _reciprocal_parts(b, re, im):
    """1 / (re + i im) = (re - i im) / (re^2 + im^2), as parts."""
    den = _squared_modulus(b, re, im)
    return b(aten.div.Tensor, re, den), b(aten.div.Tensor, b(aten.neg.default, im), den)


def _reciprocal(b, node):
    return b.complex(*_reciprocal_parts(b, *b.parts(node.args[0])), meta_val(node).dtype)


def _negative(b, x):
    """x < 0, -0.0 included: the side of a branch cut eager takes. atan2(x, -1) is -pi
    for -0.0 and pi for +0.0 (torch-mlir's `reciprocal`, the other way to tell them
    apart, asserts on zeros: numerics_exact.py rewrites it before this pass runs)."""
    return b(aten.lt.Scalar, b(aten.atan2.default, x, b(aten.full_like.default, x, -1)), 0)


def _sqrt_parts(b, re, im):
    """The principal square root without cancellation (Kahan): t = sqrt((|z| + |re|) / 2);
    re >= 0: (t, im / 2t); re < 0: (|im| / 2t, +-t with im's sign, -0.0 included)."""
    modulus = b(aten.sqrt.default, _squared_modulus(b, re, im))
    t = b(aten.sqrt.default, b(aten.mul.Scalar, b(aten.add.Tensor, modulus,
                                                   b(aten.abs.default, re)), 0.5))
    twice = b(aten.mul.Scalar, t, 2)
    zero = b(aten.eq.Scalar, t, 0)  # z = 0: sqrt is z itself (not 0 / 0)
    other = b(aten.where.self, zero, im, b(aten.div.Tensor, im, twice))
    other_abs = b(aten.where.self, zero, b(aten.abs.default, im),
                  b(aten.div.Tensor, b(aten.abs.default, im), twice))
    signed_t = b(aten.where.self, _negative(b, im), b(aten.neg.default, t), t)
    left = _negative(b, re)
    return (b(aten.where.self, left, other_abs, t), b(aten.where.self, left, signed_t, other))


def _sqrt(b, node):
    return b.complex(*_sqrt_parts(b, *b.parts(node.args[0])), meta_val(node).dtype)


def _rsqrt(b, node):
    root = _sqrt_parts(b, *b.parts(node.args[0]))
    return b.complex(*_reciprocal_parts(b, *root), meta_val(node).dtype)


def _log_parts(b, re, im):
    """log z = log|z| + i arg z (log 0 = -inf + 0i, as eager)."""
    return (b(aten.mul.Scalar, b(aten.log.default, _squared_modulus(b, re, im)), 0.5),
            b(aten.atan2.default, im, re))


def _log(b, node):
    return b.complex(*_log_parts(b, *b.parts(node.args[0])), meta_val(node).dtype)


def _exp_parts(b, re, im):
    scale = b(aten.exp.default, re)
    return (b(aten.mul.Tensor, scale, b(aten.cos.default, im)),
            b(aten.mul.Tensor, scale, b(aten.sin.default, im)))


def _pow(b, node):
    """z ** w = exp(w log z), as libstdc++'s std::pow, which eager's CPU kernel calls: a
    real exponent scales both parts of log z; a complex one multiplies, and 0 ** w = 0."""
    base, exponent = node.args[0], node.args[1]
    dtype = meta_val(node).dtype
    if node.target == aten.pow.Scalar or not _tensor(base):
        return None
    lr, li = _log_parts(b, *b.parts(base))
    if _real_number(exponent) and not isinstance(exponent, torch.fx.Node):
        return b.complex(*_exp_parts(b, b(aten.mul.Scalar, lr, exponent),
                                     b(aten.mul.Scalar, li, exponent)), dtype)
    if not _tensor(exponent):
        return None
    wr, wi = b.parts(exponent)
    re = b(aten.sub.Tensor, b(aten.mul.Tensor, wr, lr), b(aten.mul.Tensor, wi, li))
    im = b(aten.add.Tensor, b(aten.mul.Tensor, wr, li), b(aten.mul.Tensor, wi, lr))
    er, ei = _exp_parts(b, re, im)
    br, bi = b.parts(base)
    zero = b(aten.logical_and.default, b(aten.eq.Scalar, br, 0), b(aten.eq.Scalar, bi, 0))
    nothing = b(aten.full_like.default, er, 0)  # not er * 0: er is NaN there
    return b.complex(b(aten.where.self, zero, nothing, er),
                     b(aten.where.self, zero, nothing, ei), dtype)


def _trig(b, node):
    """sin, cos, sinh, cosh of re + i im through real sin/cos/sinh/cosh of the parts:
    sin z = sin re cosh im + i cos re sinh im, cos z = cos re cosh im - i sin re sinh im;
    sinh z = -i sin(iz), cosh z = cos(iz): the same products with the parts' roles
    swapped, sinh re cos im + i cosh re sin im and cosh re cos im + i sinh re sin im."""
    re, im = b.parts(node.args[0])
    if node.target in (aten.sin.default, aten.cos.default):
        sin, cos = b(aten.sin.default, re), b(aten.cos.default, re)
        sinh, cosh = b(aten.sinh.default, im), b(aten.cosh.default, im)
        if node.target == aten.sin.default:
            parts = (b(aten.mul.Tensor, sin, cosh), b(aten.mul.Tensor, cos, sinh))
        else:
            parts = (b(aten.mul.Tensor, cos, cosh),
                     b(aten.neg.default, b(aten.mul.Tensor, sin, sinh)))
    else:
        sinh, cosh = b(aten.sinh.default, re), b(aten.cosh.default, re)
        sin, cos = b(aten.sin.default, im), b(aten.cos.default, im)
        first = sinh if node.target == aten.sinh.default else cosh
        second = cosh if node.target == aten.sinh.default else sinh
        parts = (b(aten.mul.Tensor, first, cos), b(aten.mul.Tensor, second, sin))
    return b.complex(*parts, meta_val(node).dtype)


def _tanh(b, node):
    """Kahan's tanh: t = tan im, s = sinh re, beta = 1 + t^2, rho = sqrt(1 + s^2):
    (beta rho s + i t) / (1 + beta s^2). Past |re| = 20 (where s^2 would overflow
    float32 and tanh re is 1 in both float types) it is sign(re) + 0i, as C's ctanh
    gives up to an imaginary part below 1e-17."""
    re, im = b.parts(node.args[0])
    t, s = b(aten.tan.default, im), b(aten.sinh.default, re)
    beta = b(aten.add.Scalar, b(aten.mul.Tensor, t, t), 1)
    s2 = b(aten.mul.Tensor, s, s)
    rho = b(aten.sqrt.default, b(aten.add.Scalar, s2, 1))
    den = b(aten.add.Scalar, b(aten.mul.Tensor, beta, s2), 1)
    out_re = b(aten.div.Tensor, b(aten.mul.Tensor, b(aten.mul.Tensor, beta, rho), s), den)
    out_im = b(aten.div.Tensor, t, den)
    far = b(aten.gt.Scalar, b(aten.abs.default, re), 20)
    return b.complex(b(aten.where.self, far, b(aten.sign.default, re), out_re),
                     b(aten.where.self, far, b(aten.full_like.default, t, 0), out_im),
                     meta_val(node).dtype)


def _sigmoid(b, node):
    """1 / (1 + exp(-z))."""
    re, im = b.parts(node.args[0])
    er, ei = _exp_parts(b, b(aten.neg.default, re), b(aten.neg.default, im))
    return b.complex(*_reciprocal_parts(b, b(aten.add.Scalar, er, 1), ei),
                     meta_val(node).dtype)


def _mul_scalar(b, node):
    a, other = node.args[0], node.args[1]
    if not _tensor(a) or not _real_number(other):
        return None
    return b.from_pair(b(aten.mul.Tensor, b.pair(a), other), meta_val(node).dtype)


def _mul_tensor(b, node):
    """A complex tensor times a real tensor or number (complex x complex lowers)."""
    a, other = node.args[0], node.args[1]
    dtype = meta_val(node).dtype
    if not _tensor(other) or not _tensor(a):
        return _mul_scalar(b, node)
    if _complex_tensor(a) and _complex_tensor(other):
        return None
    x, y = (a, other) if _complex_tensor(a) else (other, a)
    return b.from_pair(b(aten.mul.Tensor, b.pair(x), b(aten.unsqueeze.default, y, -1)), dtype)


def _sum(b, node):
    a = node.args[0]
    dims = None
    if node.target == aten.sum.dim_IntList:
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    rank = meta_val(a).dim()
    dims = list(range(rank)) if not dims else [d % rank for d in dims]
    return b.from_pair(b(aten.sum.dim_IntList, b.pair(a), dims, keepdim), meta_val(node).dtype)


def _to_copy(b, node):
    """A real tensor cast to complex (complex to complex and to real lower)."""
    a = node.args[0]
    dtype = meta_val(node).dtype
    if _complex_tensor(a) or not dtype.is_complex or set(node.kwargs) - {"dtype"}:
        return None
    real = b(aten._to_copy.default, a, dtype=_real_of(dtype))
    return b.complex(real, b(aten.mul.Scalar, real, 0), dtype)


def _polar(b, node):
    magnitude, angle = node.args[0], node.args[1]
    return b.complex(b(aten.mul.Tensor, magnitude, b(aten.cos.default, angle)),
                     b(aten.mul.Tensor, magnitude, b(aten.sin.default, angle)),
                     meta_val(node).dtype)


_REWRITES = {
    aten.polar.default: _polar,
    aten.add.Tensor: lambda b, n: _add(b, n, 1),
    aten.sub.Tensor: lambda b, n: _add(b, n, -1),
    aten.neg.default: _neg,
    aten._conj.default: _conj,
    aten.conj_physical.default: _conj,
    aten._conj_physical.default: _conj,
    aten.abs.default: _abs,
    aten.angle.default: _angle,
    aten.exp.default: _exp,
    aten.div.Tensor: _div,
    aten.mul.Tensor: _mul_tensor,
    aten.mul.Scalar: _mul_scalar,
    aten.sum.dim_IntList: _sum,
    aten.sum.default: _sum,
    aten._to_copy.default: _to_copy,
    aten.reciprocal.default: _reciprocal,
    aten.sqrt.default: _sqrt,
    aten.rsqrt.default: _rsqrt,
    aten.log.default: _log,
    aten.pow.Tensor_Scalar: _pow,
    aten.pow.Tensor_Tensor: _pow,
    aten.sin.default: _trig,
    aten.cos.default: _trig,
    aten.sinh.default: _trig,
    aten.cosh.default: _trig,
    aten.tanh.default: _tanh,
    aten.sigmoid.default: _sigmoid,
}


def apply(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Rewrite the complex ops torch-mlir cannot lower (a graph without complex values
    is returned untouched after one scan)."""
    targets = [node for node in gm.graph.nodes
               if node.op == "call_function" and node.target in _REWRITES
               and (any(_complex_tensor(a) for a in node.args) or _complex_tensor(node))]
    if not targets:
        return gm
    mode = fake_mode(gm)
    if mode is None:
        return gm
    for node in targets:
        new = _REWRITES[node.target](_PairBuilder(gm.graph, node, mode), node)
        if new is not None:
            node.replace_all_uses_with(new)
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    return gm
