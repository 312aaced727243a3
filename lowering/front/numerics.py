"""FX-level rewrites that give compiled graphs eager PyTorch's numerics.

Applied to the GraphModule that `fx_graph.to_graph_module` rebuilds, before
torch-mlir imports it, so both targets (CPU and CUDA) get them. Each rewrite
replaces one ATen op by ATen ops torch-mlir already lowers; none needs a new
lowering. Why at this level rather than in MLIR: the facts they depend on (the
op's meaning, unsigned dtypes, which result is an index) are lost by the
`linalg` stage (ui8 becomes signless i8, `maximum` becomes cmpf+select that
cannot be told apart from a deliberate select).

- Half/bfloat16 reductions accumulate in float32 (eager's accumulate type),
  and so do pools and fmod;
  torch-mlir's `sum` adds in f16 and stops at 2048. Long float32 cumsums
  accumulate in float64, as eager's CPU kernel does.
- uint8 operands of ops whose result depends on signedness (sum, prod,
  remainder, true division) are widened first: torch-mlir extends and divides
  them as signed i8; int8 operands of scalar/rounding ops too (torch-mlir
  cannot lower them).
- Long float sums/means (and layer_norm's statistics) are blocked: the
  reduced dim of R elements becomes [R // B, B], summed over B, then over the
  blocks (recursively while long), plus the tail. Sequential accumulation
  lost ~2e-5 relative over 50M elements; eager's cascade sum is ~1e-8.
- NaN propagates through maximum/minimum/clamp as in eager, and argmax/argmin/
  max.dim/min.dim return the index of the first NaN.
- Integer negation is x * -1 (torch-mlir negates integers through float32), and so is
  an integer // -1 (torch-mlir folded INT64_MIN // -1 to 0; eager wraps).
- x == x is False for NaN (torch-mlir folds it to True; isfinite uses it).
- bool + bool is a logical or (torch-mlir added a bool tensor and `True` as i1).
- Clamps (by tensors) and sorts of bools run on int32: torch-mlir orders i1
  as signed, True below False; so do accumulating index_put/index_add/
  scatter_add of bools (eager ors them, i1 addition wraps).
"""

from __future__ import annotations

import math
import operator

import torch
import torch.fx

from .fx_graph import meta_values

aten = torch.ops.aten

HALF_TYPES = (torch.float16, torch.bfloat16)
# A reduction over more elements than this is blocked; each block has BLOCK.
# Rows of 1024 keep a 50M-element sum within 1e-7 of eager (4096: 4e-6).
BLOCK_THRESHOLD = 1 << 13
BLOCK = 1024


class _Builder:
    """Inserts nodes before `anchor`, with FakeTensor `val` metadata."""

    def __init__(self, graph: torch.fx.Graph, anchor: torch.fx.Node, mode, created=None):
        self.graph, self.anchor, self.mode = graph, anchor, mode
        self.created = set() if created is None else created

    def __call__(self, op, *args, **kwargs) -> torch.fx.Node:
        with self.graph.inserting_before(self.anchor):
            node = self.graph.call_function(op, args, kwargs)
        self.created.add(node)
        with self.mode:
            node.meta["val"] = op(*meta_values(args), **meta_values(kwargs))
        return node


def _val(x):
    return x.meta.get("val") if isinstance(x, torch.fx.Node) else None


def _is_tensor(x, *dtypes) -> bool:
    val = _val(x)
    return isinstance(val, torch.Tensor) and (not dtypes or val.dtype in dtypes)


def _fake_mode(gm: torch.fx.GraphModule):
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and hasattr(val, "fake_mode"):
            return val.fake_mode
    return None


def _replace(node: torch.fx.Node, new: torch.fx.Node, created: set) -> None:
    """Uses of `node` now use `new`, except in the nodes built to compute `new`."""
    node.replace_all_uses_with(new, delete_user_cb=lambda user: user not in created)
    if not node.users:
        node.graph.erase_node(node)


def _cast(b: _Builder, x: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
    if _val(x).dtype == dtype:
        return x
    return b(aten._to_copy.default, x, dtype=dtype)


def _reduced_dims(x: torch.fx.Node, dims) -> list[int]:
    rank = _val(x).dim()
    if dims is None or len(dims) == 0 or rank == 0:
        return list(range(rank))  # a 0-d tensor reduced over dim 0 or -1: nothing to block
    return sorted(d % rank for d in dims)


# -- half-precision reductions -------------------------------------------------

_ACCUMULATING = {aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default,
                 aten.cumsum.default, aten.prod.default, aten.prod.dim_int,
                 aten.linalg_vector_norm.default, aten.norm.Scalar, aten.norm.ScalarOpt_dim}


def _half_accumulation(b: _Builder, node: torch.fx.Node):
    x = node.args[0]
    if node.target not in _ACCUMULATING or not _is_tensor(x):
        return None
    if node.kwargs.get("dtype") not in (None, _val(x).dtype):
        return None
    if _val(x).dtype in HALF_TYPES:
        wide_type = torch.float32
    elif (node.target is aten.cumsum.default and _val(x).dtype == torch.float32
          and _val(x).dim() and _val(x).shape[node.args[1]] > BLOCK_THRESHOLD):
        # A scan cannot be blocked like a sum; eager's CPU cumsum accumulates
        # float in double (acc_type), and so does this one when it is long.
        wide_type = torch.float64
    else:
        return None
    kwargs = {k: v for k, v in node.kwargs.items() if k != "dtype"}
    wide = b(node.target, _cast(b, x, wide_type), *node.args[1:], **kwargs)
    return _cast(b, wide, _val(node).dtype)


# Ops whose eager CPU kernel computes half/bfloat16 in float32 (acc/opmath type)
# and rounds once; torch-mlir computes them in the half type (avg_pool sums a
# window in f16, fmod rounds x / y before truncating it).
# _trilinear (bilinear's product) sums products in half in torch-mlir; eager's bmms
# accumulate in float32 (computed here in one float32 pass and rounded once: eager
# rounds between its two bmms, so results may differ from eager by that rounding, and
# are then closer to the exact product).
_HALF_OPMATH = {aten.avg_pool2d.default, aten.avg_pool3d.default,
                aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default,
                aten.fmod.Tensor, aten.fmod.Scalar, aten._trilinear.default}


def _half_opmath(b: _Builder, node: torch.fx.Node):
    if node.target not in _HALF_OPMATH or not _is_tensor(node, *HALF_TYPES):
        return None
    dtype = _val(node).dtype
    args = tuple(_cast(b, a, torch.float32) if _is_tensor(a, dtype) else a for a in node.args)
    return _cast(b, b(node.target, *args, **node.kwargs), dtype)


def _gelu_tanh(b: _Builder, node: torch.fx.Node):
    """gelu(approximate='tanh') as eager's formula: torch-mlir's lowering of it
    was 5e-5 off in float32."""
    if node.target is not aten.gelu.default or node.kwargs.get("approximate") != "tanh":
        return None
    x = node.args[0]
    if not _is_tensor(x, torch.float32, torch.float64, *HALF_TYPES):
        return None
    dtype = _val(x).dtype
    if dtype in HALF_TYPES:
        x = _cast(b, x, torch.float32)
    cube = b(aten.mul.Tensor, b(aten.mul.Tensor, x, x), x)
    inner = b(aten.mul.Scalar, b(aten.add.Tensor, x, b(aten.mul.Scalar, cube, 0.044715)),
              math.sqrt(2.0 / math.pi))
    out = b(aten.mul.Tensor, b(aten.mul.Scalar, x, 0.5),
            b(aten.add.Scalar, b(aten.tanh.default, inner), 1.0))
    return _cast(b, out, dtype)


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


def _widen_bytes(b: _Builder, node: torch.fx.Node):
    with_number = node.target in _WIDEN_BYTES_WITH_NUMBER and any(
        isinstance(a, (int, float, bool)) for a in node.args)
    if node.target not in _WIDEN_BYTES and not with_number:
        return None
    if not any(_is_tensor(a, *BYTES) for a in node.args):
        return None
    # int16 holds every uint8 and int8 exactly; reductions accumulate in their
    # int64 result type anyway.
    args = tuple(_cast(b, a, torch.int16) if _is_tensor(a, *BYTES) else a
                 for a in node.args)
    wide = b(node.target, *args, **node.kwargs)
    return _cast(b, wide, _val(node).dtype)


# -- blocked float sums ----------------------------------------------------------
# (view/slice, not view_copy/slice_copy: torch-mlir lowers the view forms, as the
# tracer records them.)

def _blocked_sum_dim(b: _Builder, x: torch.fx.Node, dim: int, keepdim: bool):
    """Sum of x over one dim, in blocks of BLOCK elements, then over the blocks."""
    shape = list(_val(x).shape)
    size = shape[dim]
    if size <= BLOCK_THRESHOLD:
        return b(aten.sum.dim_IntList, x, [dim], keepdim)
    blocks = size // BLOCK
    main = x
    if blocks * BLOCK != size:
        main = b(aten.slice.Tensor, x, dim, 0, blocks * BLOCK)
    main = b(aten.view.default, main, shape[:dim] + [blocks, BLOCK] + shape[dim + 1:])
    partial = b(aten.sum.dim_IntList, main, [dim + 1], False)
    total = _blocked_sum_dim(b, partial, dim, keepdim)
    if blocks * BLOCK != size:
        tail = b(aten.slice.Tensor, x, dim, blocks * BLOCK, size)
        total = b(aten.add.Tensor, total, b(aten.sum.dim_IntList, tail, [dim], keepdim))
    return total


def _blocked(b: _Builder, node: torch.fx.Node):
    if node.target not in (aten.sum.dim_IntList, aten.sum.default,
                           aten.mean.dim, aten.mean.default):
        return None
    x = node.args[0]
    if not _is_tensor(x, torch.float32, torch.float64):
        return None
    if node.kwargs.get("dtype") not in (None, _val(x).dtype):
        return None
    shape = list(_val(x).shape)
    dims = _reduced_dims(x, node.args[1] if len(node.args) > 1 else None)
    keepdim = bool(node.args[2]) if len(node.args) > 2 else bool(node.kwargs.get("keepdim"))
    count = 1
    for d in dims:
        count *= shape[d]
    if count <= BLOCK_THRESHOLD:
        return None
    if len(dims) == 1:
        total = _blocked_sum_dim(b, x, dims[0], keepdim)
    elif dims == list(range(len(shape))):
        flat = b(aten.view.default, x, [count])
        total = _blocked_sum_dim(b, flat, 0, False)
        if keepdim:
            total = b(aten.view.default, total, [1] * len(shape))
    else:
        return None  # several but not all dims: left sequential (docs/known-issues.md)
    if node.target in (aten.mean.dim, aten.mean.default):
        total = b(aten.div.Scalar, total, count)
    return total


def _layer_norm(b: _Builder, node: torch.fx.Node):
    """native_layer_norm over many elements: its mean and variance are blocked
    sums too (torch-mlir's decomposition sums sequentially: 9e-5 off over 2^24
    elements, eager 4e-7). Results are (out, mean, rstd), taken by getitem."""
    if node.target is not aten.native_layer_norm.default:
        return None
    x, shape, weight, bias, eps = node.args
    if not _is_tensor(x, torch.float32, torch.float64):
        return None
    full = list(_val(x).shape)
    lead = full[:len(full) - len(shape)]
    count = 1
    for size in shape:
        count *= size
    if count <= BLOCK_THRESHOLD:
        return None
    users = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    if len(users) != len(node.users):
        return None
    b = _Builder(b.graph, max(users.values(), key=_position).next, b.mode, b.created)
    flat = b(aten.view.default, x, lead + [count])
    dim = len(lead)
    mean = b(aten.div.Scalar, _blocked_sum_dim(b, flat, dim, True), count)
    diff = b(aten.sub.Tensor, flat, mean)
    var = b(aten.div.Scalar, _blocked_sum_dim(b, b(aten.mul.Tensor, diff, diff), dim, True), count)
    rstd = b(aten.rsqrt.default, b(aten.add.Scalar, var, eps))
    out = b(aten.view.default, b(aten.mul.Tensor, diff, rstd), full)
    if weight is not None:
        out = b(aten.mul.Tensor, out, weight)
    if bias is not None:
        out = b(aten.add.Tensor, out, bias)
    stats = lead + [1] * len(shape)
    new = {0: out, 1: b(aten.view.default, mean, stats), 2: b(aten.view.default, rstd, stats)}
    for index, user in users.items():
        _replace(user, new[index], b.created)
    if not node.users:
        node.graph.erase_node(node)
    return None


# Ops with several results whose eager CPU kernel computes half/bfloat16 inputs in
# float32 and rounds each result once; torch-mlir computes them in the half type:
# layer_norm normalized in float16 (3e-3 off), var_mean's mean summed in bfloat16
# (0.02 off).
# batch_norm's statistics too (instance_norm over 65536 float16 elements: 1.7 off).
_HALF_OPMATH_TUPLES = {aten.native_layer_norm.default, aten.var_mean.correction,
                       aten.native_batch_norm.default}


def _half_tuple_opmath(b: _Builder, node: torch.fx.Node):
    if node.target not in _HALF_OPMATH_TUPLES or not _is_tensor(node.args[0], *HALF_TYPES):
        return None
    if node.target is aten.native_batch_norm.default and (
            not node.args[5] or any(_is_tensor(a) for a in node.args[3:5])):
        # Only batch statistics without running ones (instance_norm): training updates
        # running statistics in place (not a float32 copy of them), and evaluation
        # computes no statistics (its (0,)-shaped results stay as they are).
        return None
    users = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    if len(users) != len(node.users):
        return None
    dtype = _val(node.args[0]).dtype
    b = _Builder(b.graph, max(users.values(), key=_position).next, b.mode, b.created)
    wide = [_cast(b, t, torch.float32) if _is_tensor(t, dtype) else t for t in node.args]
    norm = b(node.target, *wide, **node.kwargs)
    for index, user in users.items():
        item = b(operator.getitem, norm, index)
        _replace(user, _cast(b, item, _val(user).dtype if _is_tensor(user) else dtype),
                 b.created)
    if not node.users:
        node.graph.erase_node(node)
    return None


# -- logcumsumexp ------------------------------------------------------------------
# torch-mlir lowers logcumsumexp as log(cumsum(exp(x))): exp(10000) overflows and the
# whole scan became inf. Eager scans with log-add-exp. Here a prefix of L <= LSE_BLOCK
# elements is a logsumexp over a masked [L, L] triangle (each row shifted by its own
# max, so nothing overflows); a longer dim is cut into blocks of LSE_BLOCK, scanned
# that way, and each block log-add-exp'ed with the (recursive) scan of the block totals
# before it: O(n * LSE_BLOCK) work and memory, not O(n^2).
LSE_BLOCK = 128


def _lse_triangle(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """logcumsumexp of x over its last dim (L elements) as L masked logsumexps."""
    shape = list(_val(x).shape)
    size = shape[-1]
    rows = b(aten.expand.default, b(aten.unsqueeze.default, x, -2), shape[:-1] + [size, size])
    r = b(aten.arange.default, size, dtype=torch.int64, device=_val(x).device)
    later = b(aten.gt.Tensor, b(aten.unsqueeze.default, r, 0), b(aten.unsqueeze.default, r, 1))
    rows = b(aten.masked_fill.Scalar, rows, later, -math.inf)
    high = b(aten.amax.default, rows, [-1], True)
    # An all -inf or a +inf row: shift by 0 (inf - inf would be NaN), as eager's logsumexp.
    high = b(aten.masked_fill.Scalar, high, b(aten.isinf.default, high), 0.0)
    total = b(aten.sum.dim_IntList, b(aten.exp.default, b(aten.sub.Tensor, rows, high)), [-1])
    return b(aten.add.Tensor, b(aten.log.default, total), b(aten.squeeze.dim, high, -1))


def _log_add_exp(b: _Builder, x: torch.fx.Node, y: torch.fx.Node) -> torch.fx.Node:
    high = b(aten.maximum.default, x, y)
    gap = b(aten.neg.default, b(aten.abs.default, b(aten.sub.Tensor, x, y)))
    out = b(aten.add.Tensor, high, b(aten.log1p.default, b(aten.exp.default, gap)))
    # inf and inf (or -inf and -inf): the gap is NaN, the sum is that infinity.
    same_inf = b(aten.logical_and.default, b(aten.eq.Tensor, x, y), b(aten.isinf.default, x))
    return b(aten.where.self, same_inf, x, out)


def _lse_scan(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """logcumsumexp of a contiguous x over its last dim."""
    shape = list(_val(x).shape)
    size = shape[-1]
    if size <= LSE_BLOCK:
        return _lse_triangle(b, x)
    blocks = -(-size // LSE_BLOCK)
    # -inf padding at the end changes no prefix of the real elements.
    padded = b(aten.constant_pad_nd.default, x, [0, blocks * LSE_BLOCK - size], -math.inf)
    inner = _lse_triangle(b, b(aten.view.default, padded, shape[:-1] + [blocks, LSE_BLOCK]))
    totals = b(aten.clone.default, b(aten.select.int, inner, -1, LSE_BLOCK - 1))
    before = _lse_scan(b, totals)
    before = b(aten.constant_pad_nd.default,
               b(aten.slice.Tensor, before, -1, 0, blocks - 1), [1, 0], -math.inf)
    out = _log_add_exp(b, inner, b(aten.unsqueeze.default, before, -1))
    out = b(aten.view.default, out, shape[:-1] + [blocks * LSE_BLOCK])
    return b(aten.slice.Tensor, out, -1, 0, size)


def _logcumsumexp(b: _Builder, node: torch.fx.Node):
    if node.target is not aten.logcumsumexp.default:
        return None
    x, dim = node.args[:2]
    if not _is_tensor(x, torch.float32, torch.float64, *HALF_TYPES):
        return None
    dtype = _val(x).dtype
    if _val(x).dim() == 0 or _val(x).numel() == 0:
        return b(aten.clone.default, x)
    dim = dim % _val(x).dim()
    # Half types scan in float32 (eager's opmath type) and round once.
    wide = _cast(b, x, torch.float32) if dtype in HALF_TYPES else x
    last = _val(x).dim() - 1
    if dim != last:
        wide = b(aten.transpose.int, wide, dim, last)
    out = _lse_scan(b, b(aten.clone.default, wide, memory_format=torch.contiguous_format))
    if dim != last:
        out = b(aten.transpose.int, out, dim, last)
    return _cast(b, out, dtype)


# -- reciprocal ----------------------------------------------------------------------

def _reciprocal(b: _Builder, node: torch.fx.Node):
    """reciprocal as 1 / x: torch-mlir's lowering asserts the input is nonzero ("cf.assert
    ... unimplemented: tensor with zero element", for floats too), so a 0 aborted the
    process; eager gives inf. Integers and bools convert to the float result type first,
    as eager does."""
    if node.target is not aten.reciprocal.default or not _is_tensor(node.args[0]):
        return None
    if _val(node.args[0]).dtype.is_complex or not _val(node).dtype.is_floating_point:
        return None
    x = _cast(b, node.args[0], _val(node).dtype)
    return b(aten.div.Tensor, b(aten.full_like.default, x, 1.0), x)


_ROUNDED_DIVISIONS = {aten.div.Tensor_mode, aten.div.Scalar_mode, aten.floor_divide.default,
                      aten.floor_divide.Scalar}


def _divide_by_minus_one(b: _Builder, node: torch.fx.Node):
    """An integer divided by the number -1 (floor or trunc) is its negation, which wraps at
    the minimum as eager does; torch-mlir's folder gave 0 for a constant INT64_MIN // -1."""
    if node.target not in _ROUNDED_DIVISIONS or not _is_tensor(node.args[0]):
        return None
    divisor = node.args[1]
    if type(divisor) is not int or divisor != -1 or not _is_integer(node.args[0]) or \
            _val(node).dtype != _val(node.args[0]).dtype:
        return None
    return b(aten.mul.Scalar, node.args[0], -1)


def _integer_neg(b: _Builder, node: torch.fx.Node):
    """-x of an integer as x * -1: torch-mlir negates integers through float32
    (-123456789012345678 came out -123456790519087104)."""
    if node.target is not aten.neg.default or not _is_integer(node.args[0]):
        return None
    return b(aten.mul.Scalar, node.args[0], -1)


def _is_integer(x) -> bool:
    if not _is_tensor(x):
        return False
    dtype = _val(x).dtype
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


# -- integer scatter mean ----------------------------------------------------------

def _int_scatter_mean(b: _Builder, node: torch.fx.Node):
    """scatter_reduce(reduce='mean') of integers: eager divides the sum by the count
    rounding down (floor); torch-mlir's integer division truncates toward zero
    (-7 / 2 gave -3, eager -4). Computed as a sum and a count, floor-divided."""
    if node.target is not aten.scatter_reduce.two:
        return None
    self, dim, index, src, reduce = node.args[:5]
    include_self = node.args[5] if len(node.args) > 5 else node.kwargs.get("include_self", True)
    if reduce != "mean" or not _is_tensor(node) or _val(node).dtype.is_floating_point \
            or _val(node).dtype.is_complex or _val(node).dtype == torch.bool:
        return None
    total = b(aten.scatter_reduce.two, self, dim, index, src, "sum", include_self=include_self)
    start = b(aten.full_like.default, self, 1 if include_self else 0)
    count = b(aten.scatter_reduce.two, start, dim, index, b(aten.full_like.default, src, 1),
              "sum", include_self=True)
    count = b(aten.masked_fill.Scalar, count, b(aten.eq.Scalar, count, 0), 1)
    return b(aten.div.Tensor_mode, total, count, rounding_mode="floor")


def _position(node: torch.fx.Node) -> int:
    return list(node.graph.nodes).index(node)


# -- NaN propagation -------------------------------------------------------------

def _float(x) -> bool:
    return _is_tensor(x) and _val(x).dtype.is_floating_point


def _nan_minmax(b: _Builder, node: torch.fx.Node):
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
        if not _float(x) or _val(node).dtype != _val(x).dtype:
            return None
        return b(aten.where.self, b(aten.isnan.default, x), x, node)
    return None


def _first_nan_index(b: _Builder, node: torch.fx.Node):
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
        b = _Builder(b.graph, index.next, b.mode, b.created)
    else:
        return None
    if not _float(x):
        return None
    nan = b(aten.isnan.default, x)
    # argmax of the NaN mask (as int32, not bool/uint8, see _WIDEN_BYTES)
    # is its first NaN.
    first = b(aten.argmax.default, _cast(b, nan, torch.int32), dim, keepdim)
    if dim is None:
        has = b(aten.any.default, nan)
        if keepdim:
            has = b(aten.view.default, has, list(_val(first).shape))
    else:
        has = b(aten.any.dim, nan, dim, keepdim)
    fixed = b(aten.where.self, has, first, index)
    if index is node:
        return fixed
    _replace(index, fixed, b.created)
    return None


def _bool_add(b: _Builder, node: torch.fx.Node):
    """bool + bool is logical or in eager (True + True is True); torch-mlir adds a bool
    tensor and a Python bool as i1 integers, so `bool_tensor + True` wrapped to False."""
    if node.target not in (aten.add.Tensor, aten.add.Scalar) or not _is_tensor(node, torch.bool):
        return None
    x, y = node.args[:2]
    if isinstance(y, torch.fx.Node):
        return b(aten.logical_or.default, x, y)
    if not y:
        return x
    # all True; not ones_like, which becomes a bool literal torch-mlir mistypes as si8
    return b(aten.logical_or.default, x, b(aten.logical_not.default, x))


def _self_equal(b: _Builder, node: torch.fx.Node):
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


def _bool_order(b: _Builder, node: torch.fx.Node):
    """torch-mlir orders i1 as signed (True is -1, below False): clamps and sorts
    of bools are computed on int32 (False < True, as eager) and cast back."""
    if node.target in _BOOL_CLAMPS:
        if not _is_tensor(node.args[0], torch.bool) or _val(node).dtype != torch.bool:
            return None
        args = tuple(_cast(b, a, torch.int32) if _is_tensor(a, torch.bool) else a
                     for a in node.args)
        return _cast(b, b(node.target, *args, **node.kwargs), torch.bool)
    if node.target in _BOOL_SUMS and _is_tensor(node, torch.bool):
        # Accumulating bools is a logical or in eager; i1 addition wraps (xor).
        args = tuple(_cast(b, a, torch.int32) if _is_tensor(a, torch.bool) else a
                     for a in node.args)
        return _cast(b, b(node.target, *args, **node.kwargs), torch.bool)
    if node.target in _SORTS and _is_tensor(node.args[0], torch.bool):
        users = list(node.users)
        if not users or not all(u.target is operator.getitem for u in users):
            return None
        b = _Builder(b.graph, max(users, key=_position).next, b.mode, b.created)
        wide = b(node.target, _cast(b, node.args[0], torch.int32), *node.args[1:],
                 **node.kwargs)
        for user in users:
            item = b(operator.getitem, wide, user.args[1])
            _replace(user, _cast(b, item, torch.bool) if user.args[1] == 0 else item,
                     b.created)
        if not node.users:
            node.graph.erase_node(node)
    return None


REWRITES = (_logcumsumexp, _reciprocal, _divide_by_minus_one, _integer_neg, _int_scatter_mean,
            _half_tuple_opmath, _half_accumulation, _half_opmath, _widen_bytes, _blocked,
            _layer_norm, _nan_minmax, _first_nan_index, _self_equal, _bool_add, _bool_order,
            _gelu_tanh)


def apply(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Run every rewrite over the graph; new nodes are visited by later rewrites."""
    mode = _fake_mode(gm)
    if mode is None:
        return gm
    for rewrite in REWRITES:
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or getattr(node, "_erased", False):
                continue
            builder = _Builder(gm.graph, node.next, mode)
            new = rewrite(builder, node)
            if new is not None:
                _replace(node, new, builder.created)
    gm.graph.lint()
    gm.recompile()
    return gm
