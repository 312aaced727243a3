"""Complex arithmetic torch-mlir cannot lower, rewritten on (real, imaginary) pairs.

An FX-level rewrite, applied before torch-mlir imports the graph (so on both entry
points). torch-mlir lowers complex `mul`, `mm`, `view_as_real`, `view_as_complex` and
`complex`, and the cpu stages lower the `complex` dialect they leave; its lowerings of
`add`/`sub` (an integer multiply by alpha), `div`, `abs`, `exp`, `neg`, `angle`,
`_conj`, `sum`, `polar` (broadcast) and casts from real fail on complex operands.
Each of those becomes real arithmetic on `view_as_real` of its operands ([..., 2]:
real and imaginary parts) and, for a complex result, `view_as_complex` of the pair. Division is the
textbook formula (eager's CPU kernel scales by the larger part first), so results can
differ from eager's in the last bits, and overflow earlier for parts above ~1e154
(complex128) or ~1e19 (complex64).
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
    re, im = b.parts(node.args[0])
    squares = b(aten.add.Tensor, b(aten.mul.Tensor, re, re), b(aten.mul.Tensor, im, im))
    return b(aten.sqrt.default, squares)


def _angle(b, node):
    re, im = b.parts(node.args[0])
    return b(aten.atan2.default, im, re)


def _exp(b, node):
    re, im = b.parts(node.args[0])
    scale = b(aten.exp.default, re)
    return b.complex(b(aten.mul.Tensor, scale, b(aten.cos.default, im)),
                     b(aten.mul.Tensor, scale, b(aten.sin.default, im)), meta_val(node).dtype)


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
    den = b(aten.add.Tensor, b(aten.mul.Tensor, br, br), b(aten.mul.Tensor, bi, bi))
    re = b(aten.add.Tensor, b(aten.mul.Tensor, ar, br), b(aten.mul.Tensor, ai, bi))
    im = b(aten.sub.Tensor, b(aten.mul.Tensor, ai, br), b(aten.mul.Tensor, ar, bi))
    return b.complex(b(aten.div.Tensor, re, den), b(aten.div.Tensor, im, den), dtype)


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
