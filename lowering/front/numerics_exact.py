"""Rewrites that give integer, bool and NaN semantics eager's results (lowering.front.
numerics applies them): byte arithmetic widened to int16, integer negation and // -1,
reciprocals,
integer scatter means, NaN propagation in maximum/minimum/clamp and first-NaN indices,
x == x for NaN, bool addition and bool orders.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from .fx_rewrite import Builder, meta_val, is_tensor, replace, cast, position

aten = torch.ops.aten

# -- bytes -----------------------------------------------------------------------

# uint8: torch-mlir extends and divides these as signed i8 ([200, 201, 200].sum()
# gave -167). int8: it cannot lower the scalar and rounding-mode forms ("for
# conversion to byte or char type dstOriginalDtype has to be passed") and fell
# back to eager. Both are computed in int16 and truncated back, which wraps
# exactly as eager's byte arithmetic does.
_WIDEN_BYTES = {aten.sum.dim_IntList, aten.sum.default, aten.prod.default,
                aten.prod.dim_int, aten.cumsum.default, aten.mean.dim,
                aten.remainder.Tensor, aten.remainder.Scalar, aten.div.Tensor,
                aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode,
                aten.floor_divide.default, aten.fmod.Tensor, aten.fmod.Scalar,
                aten.mul.Scalar, aten.add.Scalar, aten.sub.Scalar}
# ...and these when an operand is a Python number (`i8 * 3` crashed the compiler).
_WIDEN_BYTES_WITH_NUMBER = {aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor,
                            aten.rsub.Scalar, aten.rsub.Tensor}
BYTES = (torch.uint8, torch.int8)


def widen_bytes(b: Builder, node: torch.fx.Node):
    with_number = node.target in _WIDEN_BYTES_WITH_NUMBER and any(
        isinstance(a, (int, float, bool)) for a in node.args)
    if node.target not in _WIDEN_BYTES and not with_number:
        return None
    if not any(is_tensor(a, *BYTES) for a in node.args):
        return None
    # int16 holds every uint8 and int8 exactly; reductions accumulate in their
    # int64 result type anyway.
    args = tuple(cast(b, a, torch.int16) if is_tensor(a, *BYTES) else a
                 for a in node.args)
    wide = b(node.target, *args, **node.kwargs)
    return cast(b, wide, meta_val(node).dtype)


# -- reciprocal ----------------------------------------------------------------------

def reciprocal(b: Builder, node: torch.fx.Node):
    """reciprocal as 1 / x: torch-mlir's lowering asserts the input is nonzero ("cf.assert
    ... unimplemented: tensor with zero element", for floats too), so a 0 aborted the
    process; eager gives inf. Integers and bools convert to the float result type first,
    as eager does."""
    if node.target is not aten.reciprocal.default or not is_tensor(node.args[0]):
        return None
    if meta_val(node.args[0]).dtype.is_complex or not meta_val(node).dtype.is_floating_point:
        return None
    x = cast(b, node.args[0], meta_val(node).dtype)
    return b(aten.div.Tensor, b(aten.full_like.default, x, 1.0), x)


_ROUNDED_DIVISIONS = {aten.div.Tensor_mode, aten.div.Scalar_mode, aten.floor_divide.default,
                      aten.floor_divide.Scalar}


def divide_by_minus_one(b: Builder, node: torch.fx.Node):
    """An integer divided by the number -1 (floor or trunc) is its negation, which wraps at
    the minimum as eager does; torch-mlir's folder gave 0 for a constant INT64_MIN // -1."""
    if node.target not in _ROUNDED_DIVISIONS or not is_tensor(node.args[0]):
        return None
    divisor = node.args[1]
    if type(divisor) is not int or divisor != -1 or not _is_integer(node.args[0]) or \
            meta_val(node).dtype != meta_val(node.args[0]).dtype:
        return None
    return b(aten.mul.Scalar, node.args[0], -1)


def integer_neg(b: Builder, node: torch.fx.Node):
    """-x of an integer as x * -1: torch-mlir negates integers through float32
    (-123456789012345678 came out -123456790519087104)."""
    if node.target is not aten.neg.default or not _is_integer(node.args[0]):
        return None
    return b(aten.mul.Scalar, node.args[0], -1)


def _is_integer(x) -> bool:
    if not is_tensor(x):
        return False
    dtype = meta_val(x).dtype
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


# -- integer scatter mean ----------------------------------------------------------

def int_scatter_mean(b: Builder, node: torch.fx.Node):
    """scatter_reduce(reduce='mean') of integers: eager divides the sum by the count
    rounding down (floor); torch-mlir's integer division truncates toward zero
    (-7 / 2 gave -3, eager -4). Computed as a sum and a count, floor-divided."""
    if node.target is not aten.scatter_reduce.two:
        return None
    self, dim, index, src, reduce = node.args[:5]
    include_self = node.args[5] if len(node.args) > 5 else node.kwargs.get("include_self", True)
    if reduce != "mean" or not is_tensor(node) or meta_val(node).dtype.is_floating_point \
            or meta_val(node).dtype.is_complex or meta_val(node).dtype == torch.bool:
        return None
    total = b(aten.scatter_reduce.two, self, dim, index, src, "sum", include_self=include_self)
    start = b(aten.full_like.default, self, 1 if include_self else 0)
    count = b(aten.scatter_reduce.two, start, dim, index, b(aten.full_like.default, src, 1),
              "sum", include_self=True)
    count = b(aten.masked_fill.Scalar, count, b(aten.eq.Scalar, count, 0), 1)
    return b(aten.div.Tensor_mode, total, count, rounding_mode="floor")


# -- NaN propagation -------------------------------------------------------------

def _float(x) -> bool:
    return is_tensor(x) and meta_val(x).dtype.is_floating_point


def nan_minmax(b: Builder, node: torch.fx.Node):
    """Eager's maximum/minimum/clamp/hardtanh return NaN where an operand is NaN;
    torch-mlir's cmpf+select returns the other operand."""
    if node.target in (aten.maximum.default, aten.minimum.default):
        x, y = node.args[:2]
        if not (_float(x) and _float(y)):
            return None
        nan = b(aten.logical_or.default, b(aten.isnan.default, x), b(aten.isnan.default, y))
        # x + y is NaN exactly where either is, in the promoted dtype.
        return b(aten.where.self, nan, b(aten.add.Tensor, x, y), node)
    if node.target in (aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default,
                       aten.clamp_max.default, aten.clamp_min.Tensor, aten.clamp_max.Tensor,
                       aten.hardtanh.default, aten.relu6.default):
        x = node.args[0]
        if not _float(x) or meta_val(node).dtype != meta_val(x).dtype:
            return None
        return b(aten.where.self, b(aten.isnan.default, x), x, node)
    return None


def first_nan_index(b: Builder, node: torch.fx.Node):
    """argmax/argmin/max.dim/min.dim: eager returns the index of the first NaN."""
    if node.target in (aten.argmax.default, aten.argmin.default):
        x = node.args[0]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        index = node
    elif node.target in (aten.max.dim, aten.min.dim):
        x, dim = node.args[:2]
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        index = next((u for u in node.users if u.target is operator.getitem
                      and u.args[1] == 1), None)
        if index is None:
            return None
        b = Builder(b.graph, index.next, b.mode, b.created)
    else:
        return None
    if not _float(x):
        return None
    nan = b(aten.isnan.default, x)
    # argmax of the NaN mask (as int32, not bool/uint8, see _WIDEN_BYTES)
    # is its first NaN.
    first = b(aten.argmax.default, cast(b, nan, torch.int32), dim, keepdim)
    if dim is None:
        has = b(aten.any.default, nan)
        if keepdim:
            has = b(aten.view.default, has, list(meta_val(first).shape))
    else:
        has = b(aten.any.dim, nan, dim, keepdim)
    fixed = b(aten.where.self, has, first, index)
    if index is node:
        return fixed
    replace(index, fixed, b.created)
    return None


def bool_add(b: Builder, node: torch.fx.Node):
    """bool + bool is logical or in eager (True + True is True); torch-mlir adds a bool
    tensor and a Python bool as i1 integers, so `bool_tensor + True` wrapped to False."""
    if node.target not in (aten.add.Tensor, aten.add.Scalar) or not is_tensor(node, torch.bool):
        return None
    x, y = node.args[:2]
    if isinstance(y, torch.fx.Node):
        return b(aten.logical_or.default, x, y)
    if not y:
        return x
    # all True; not ones_like, which becomes a bool literal torch-mlir mistypes as si8
    return b(aten.logical_or.default, x, b(aten.logical_not.default, x))


def self_equal(b: Builder, node: torch.fx.Node):
    """x == x is False where x is NaN; torch-mlir folds `eq.Tensor(x, x)` to True
    (isfinite(NaN) came out True: PyTorch writes isfinite as (x == x) * (|x| != inf))."""
    if node.target is not aten.eq.Tensor or node.args[0] is not node.args[1]:
        return None
    x = node.args[0]
    if not _float(x):
        return None
    return b(aten.logical_not.default, b(aten.isnan.default, x))


# -- bool order ------------------------------------------------------------------

_BOOL_CLAMPS = {aten.clamp_min.Tensor, aten.clamp_max.Tensor, aten.clamp.Tensor}
_SORTS = {aten.sort.default, aten.sort.stable}
_BOOL_SUMS = {aten.index_put.default, aten._unsafe_index_put.default, aten.index_add.default,
              aten.scatter_add.default, aten.scatter_reduce.two}


def bool_order(b: Builder, node: torch.fx.Node):
    """torch-mlir orders i1 as signed (True is -1, below False): clamps and sorts
    of bools are computed on int32 (False < True, as eager) and cast back."""
    if node.target in _BOOL_CLAMPS:
        if not is_tensor(node.args[0], torch.bool) or meta_val(node).dtype != torch.bool:
            return None
        args = tuple(cast(b, a, torch.int32) if is_tensor(a, torch.bool) else a
                     for a in node.args)
        return cast(b, b(node.target, *args, **node.kwargs), torch.bool)
    if node.target in _BOOL_SUMS and is_tensor(node, torch.bool):
        # Accumulating bools is a logical or in eager; i1 addition wraps (xor).
        args = tuple(cast(b, a, torch.int32) if is_tensor(a, torch.bool) else a
                     for a in node.args)
        return cast(b, b(node.target, *args, **node.kwargs), torch.bool)
    if node.target in _SORTS and is_tensor(node.args[0], torch.bool):
        users = list(node.users)
        if not users or not all(u.target is operator.getitem for u in users):
            return None
        b = Builder(b.graph, max(users, key=position).next, b.mode, b.created)
        wide = b(node.target, cast(b, node.args[0], torch.int32), *node.args[1:],
                 **node.kwargs)
        for user in users:
            item = b(operator.getitem, wide, user.args[1])
            replace(user, cast(b, item, torch.bool) if user.args[1] == 0 else item,
                     b.created)
        if not node.users:
            node.graph.erase_node(node)
    return None
