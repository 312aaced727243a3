"""Rewrites that give float arithmetic eager's precision (lowering.front.numerics applies
them): half/bfloat16 reductions accumulate in float32, long float32 cumsums
in float64, long float sums/means and layer_norm statistics are blocked, logcumsumexp
is computed in blocks, gelu(tanh) follows eager's formula.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.fx

from .fx_rewrite import Builder, meta_val, is_tensor, replace, cast, reduced_dims, position

aten = torch.ops.aten

HALF_TYPES = (torch.float16, torch.bfloat16)
# A reduction over more elements than this is blocked; each block has BLOCK.
# Rows of 1024 keep a 50M-element sum within 1e-7 of eager (4096: 4e-6).
BLOCK_THRESHOLD = 1 << 13
BLOCK = 1024


# -- half-precision reductions -------------------------------------------------

_ACCUMULATING = {aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default,
                 aten.cumsum.default, aten.prod.default, aten.prod.dim_int,
                 aten.linalg_vector_norm.default, aten.norm.Scalar, aten.norm.ScalarOpt_dim}


def half_accumulation(b: Builder, node: torch.fx.Node):
    x = node.args[0]
    if node.target not in _ACCUMULATING or not is_tensor(x):
        return None
    if node.kwargs.get("dtype") not in (None, meta_val(x).dtype):
        return None
    if meta_val(x).dtype in HALF_TYPES:
        wide_type = torch.float32
    elif (node.target is aten.cumsum.default and meta_val(x).dtype == torch.float32
          and meta_val(x).dim() and meta_val(x).shape[node.args[1]] > BLOCK_THRESHOLD):
        # A scan cannot be blocked like a sum; eager's CPU cumsum accumulates
        # float in double (acc_type), and so does this one when it is long.
        wide_type = torch.float64
    else:
        return None
    kwargs = {k: v for k, v in node.kwargs.items() if k != "dtype"}
    wide = b(node.target, cast(b, x, wide_type), *node.args[1:], **kwargs)
    return cast(b, wide, meta_val(node).dtype)


def gelu_tanh(b: Builder, node: torch.fx.Node):
    """gelu(approximate='tanh') as eager's formula: torch-mlir's lowering of it
    was 5e-5 off in float32."""
    if node.target is not aten.gelu.default or node.kwargs.get("approximate") != "tanh":
        return None
    x = node.args[0]
    if not is_tensor(x, torch.float32, torch.float64, *HALF_TYPES):
        return None
    dtype = meta_val(x).dtype
    if dtype in HALF_TYPES:
        x = cast(b, x, torch.float32)
    cube = b(aten.mul.Tensor, b(aten.mul.Tensor, x, x), x)
    inner = b(aten.mul.Scalar, b(aten.add.Tensor, x, b(aten.mul.Scalar, cube, 0.044715)),
              math.sqrt(2.0 / math.pi))
    out = b(aten.mul.Tensor, b(aten.mul.Scalar, x, 0.5),
            b(aten.add.Scalar, b(aten.tanh.default, inner), 1.0))
    return cast(b, out, dtype)


# -- blocked float sums ----------------------------------------------------------
# (view/slice, not view_copy/slice_copy: torch-mlir lowers the view forms, as the
# tracer records them.)

def _blocked_sum_dim(b: Builder, x: torch.fx.Node, dim: int, keepdim: bool):
    """Sum of x over one dim, in blocks of BLOCK elements, then over the blocks."""
    shape = list(meta_val(x).shape)
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


def blocked(b: Builder, node: torch.fx.Node):
    if node.target not in (aten.sum.dim_IntList, aten.sum.default,
                           aten.mean.dim, aten.mean.default):
        return None
    x = node.args[0]
    if not is_tensor(x, torch.float32, torch.float64):
        return None
    if node.kwargs.get("dtype") not in (None, meta_val(x).dtype):
        return None
    shape = list(meta_val(x).shape)
    dims = reduced_dims(x, node.args[1] if len(node.args) > 1 else None)
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


def layer_norm(b: Builder, node: torch.fx.Node):
    """native_layer_norm over many elements: its mean and variance are blocked
    sums too (torch-mlir's decomposition sums sequentially: 9e-5 off over 2^24
    elements, eager 4e-7). Results are (out, mean, rstd), taken by getitem."""
    if node.target is not aten.native_layer_norm.default:
        return None
    x, shape, weight, bias, eps = node.args
    if not is_tensor(x, torch.float32, torch.float64):
        return None
    full = list(meta_val(x).shape)
    lead = full[:len(full) - len(shape)]
    count = 1
    for size in shape:
        count *= size
    if count <= BLOCK_THRESHOLD:
        return None
    users = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    if len(users) != len(node.users):
        return None
    b = Builder(b.graph, max(users.values(), key=position).next, b.mode, b.created)
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
        replace(user, new[index], b.created)
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


def half_tuple_opmath(b: Builder, node: torch.fx.Node):
    if node.target not in _HALF_OPMATH_TUPLES or not is_tensor(node.args[0], *HALF_TYPES):
        return None
    if node.target is aten.native_batch_norm.default and (
            not node.args[5] or any(is_tensor(a) for a in node.args[3:5])):
        # Only batch statistics without running ones (instance_norm): training updates
        # running statistics in place (not a float32 copy of them), and evaluation
        # computes no statistics (its (0,)-shaped results stay as they are).
        return None
    users = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    if len(users) != len(node.users):
        return None
    dtype = meta_val(node.args[0]).dtype
    b = Builder(b.graph, max(users.values(), key=position).next, b.mode, b.created)
    wide = [cast(b, t, torch.float32) if is_tensor(t, dtype) else t for t in node.args]
    norm = b(node.target, *wide, **node.kwargs)
    for index, user in users.items():
        item = b(operator.getitem, norm, index)
        replace(user, cast(b, item, meta_val(user).dtype if is_tensor(user) else dtype),
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


def _lse_triangle(b: Builder, x: torch.fx.Node) -> torch.fx.Node:
    """logcumsumexp of x over its last dim (L elements) as L masked logsumexps."""
    shape = list(meta_val(x).shape)
    size = shape[-1]
    rows = b(aten.expand.default, b(aten.unsqueeze.default, x, -2), shape[:-1] + [size, size])
    r = b(aten.arange.default, size, dtype=torch.int64, device=meta_val(x).device)
    later = b(aten.gt.Tensor, b(aten.unsqueeze.default, r, 0), b(aten.unsqueeze.default, r, 1))
    rows = b(aten.masked_fill.Scalar, rows, later, -math.inf)
    high = b(aten.amax.default, rows, [-1], True)
    # An all -inf or a +inf row: shift by 0 (inf - inf would be NaN), as eager's logsumexp.
    high = b(aten.masked_fill.Scalar, high, b(aten.isinf.default, high), 0.0)
    total = b(aten.sum.dim_IntList, b(aten.exp.default, b(aten.sub.Tensor, rows, high)), [-1])
    return b(aten.add.Tensor, b(aten.log.default, total), b(aten.squeeze.dim, high, -1))


def _log_add_exp(b: Builder, x: torch.fx.Node, y: torch.fx.Node) -> torch.fx.Node:
    high = b(aten.maximum.default, x, y)
    gap = b(aten.neg.default, b(aten.abs.default, b(aten.sub.Tensor, x, y)))
    out = b(aten.add.Tensor, high, b(aten.log1p.default, b(aten.exp.default, gap)))
    # inf and inf (or -inf and -inf): the gap is NaN, the sum is that infinity.
    same_inf = b(aten.logical_and.default, b(aten.eq.Tensor, x, y), b(aten.isinf.default, x))
    return b(aten.where.self, same_inf, x, out)


def _lse_scan(b: Builder, x: torch.fx.Node) -> torch.fx.Node:
    """logcumsumexp of a contiguous x over its last dim."""
    shape = list(meta_val(x).shape)
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


def logcumsumexp(b: Builder, node: torch.fx.Node):
    if node.target is not aten.logcumsumexp.default:
        return None
    x, dim = node.args[:2]
    if not is_tensor(x, torch.float32, torch.float64, *HALF_TYPES):
        return None
    dtype = meta_val(x).dtype
    if meta_val(x).dim() == 0 or meta_val(x).numel() == 0:
        return b(aten.clone.default, x)
    dim = dim % meta_val(x).dim()
    # Half types scan in float32 (eager's opmath type) and round once.
    wide = cast(b, x, torch.float32) if dtype in HALF_TYPES else x
    last = meta_val(x).dim() - 1
    if dim != last:
        wide = b(aten.transpose.int, wide, dim, last)
    out = _lse_scan(b, b(aten.clone.default, wide, memory_format=torch.contiguous_format))
    if dim != last:
        out = b(aten.transpose.int, out, dim, last)
    return cast(b, out, dtype)
