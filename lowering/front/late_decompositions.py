"""Decompositions applied when a graph is compiled, not when it is traced.

The lazy device decomposes most composite ops while it traces (tracing/decompose.py:
PyTorch's reference decompositions, replayed from templates), which costs Python work at
every call of every step. The ops here are recorded whole instead, so the C++ entry
records them with no Python frame: the optimizers' element ops (AdamW calls addcmul,
addcdiv and lerp once per parameter per step: a third of its tracing time went to their
templates). They are decomposed here, once per compiled graph (a graph found in the
cache never gets here), into the ATen ops the tracer would have recorded: the same
decomposition functions, traced by make_fx on meta tensors with the tracer's table for
the ops they call, `prims.convert_element_type` as the `_to_copy` the tracer records
for it.

A float the tracer lifted to a scalar graph input (an `aten.item` node here) is traced
as a sentinel float and replaced by that node: these decompositions use such a float
only as an operand of the arithmetic they record, never in a branch. That is why lerp's
number weight is decomposed by PyTorch's reference (the weight as a 0-d tensor, its
|weight| >= 0.5 choice made by `where` in the graph), not by the tracer's `lerp_scalar`
(the choice made in Python, on the value): both compute `coeff * (end - start) + base`
with the weight rounded to the tensor's dtype and `weight - 1` rounded once, so the bits
are the same.

Also the backward ops and the loss of a transformer's step (layer norm's, GELU's,
softmax's and the embedding's backward, `masked_fill`, `nll_loss`): their static list
arguments (`normalized_shape`, `output_mask`) are keyed by value, as the tracer's
templates key them; their decompositions branch only on shapes, dtypes and static
arguments, and make_fx traces them at the graph's sizes (so not in a graph with
symbolic sizes: torch.compile's graphs, decomposed by AOTAutograd, never hold them).
Likewise `ones_like`/`zeros_like` (one `full_like`) and `stack` (a `cat` and a `view`),
whose list of graph tensors is traced as placeholders in the list's order.
"""

from __future__ import annotations

import operator

import torch
import torch.fx
from torch.utils._pytree import tree_map_only

from . import decompositions
from .fx_rewrite import Builder, fake_mode, replace

aten = torch.ops.aten
prims = torch.ops.prims


def _masked_fill_scalar(a, mask, value):
    """PyTorch's reference, which converts a number value to `a`'s Python type first: a
    lifted float (the sentinel here) filling an integer, bool or complex tensor is made
    a 0-d float64 tensor and converted in the graph (to an integer truncated toward 0,
    as Python's int() does), not here, where the sentinel's int or complex would be
    baked in. (The tracer's decomposition could not record a complex fill value.)"""
    if type(value) is float and not a.dtype.is_floating_point:
        value = torch.scalar_tensor(value, dtype=torch.float64, device=a.device)
    return torch._refs.masked_fill(a, mask, value)


# Op -> the decomposition this stage applies; the tracer records these ops whole.
LATE = {
    aten.addcmul.default: None,  # (None: the tracer's table's own, looked up on first use)
    aten.addcdiv.default: None,
    aten.lerp.Tensor: None,
    aten.lerp.Scalar: torch._refs.lerp,  # value-independent (see above)
    # A transformer's backward and loss (a GPT step: 16 of its 28 entries of the Python
    # tracer). Their decompositions branch on shapes, dtypes and static arguments only.
    aten.native_layer_norm_backward.default: None,
    aten.gelu_backward.default: None,
    aten._softmax_backward_data.default: None,
    aten._log_softmax_backward_data.default: None,
    aten.embedding_dense_backward.default: None,
    aten.masked_fill.Scalar: _masked_fill_scalar,
    aten.nll_loss_forward.default: None,
    aten.nll_loss_backward.default: None,
    # A new tensor like another (autograd's gradient seed of `loss.backward()` is a
    # `ones_like`): their decompositions record one `full_like`, which the C++ entry
    # could record itself, but a decomposition is a route of the Python tracer.
    aten.ones_like.default: None,
    aten.zeros_like.default: None,
    # (gradient clipping stacks the parameters' norms: a `cat` and a `view`)
    aten.stack.default: None,
}
# LATE's elementwise ops: traced at a symbolic graph's size hints (which sizes are 1 is
# all that matters to them). The others use their sizes (a reduction's count, a new
# tensor's shape) and refuse symbolic ones.
ELEMENTWISE = {aten.addcmul.default, aten.addcdiv.default, aten.lerp.Tensor, aten.lerp.Scalar,
               aten.gelu_backward.default, aten.masked_fill.Scalar, aten.ones_like.default,
               aten.zeros_like.default}

_CPU = torch.device("cpu")
_SENTINEL = 0.7853981633974483  # stands for a lifted float while make_fx traces
_traced: dict = {}  # (op, argument signature) -> the decomposition's traced GraphModule
_TRACED_LIMIT = 1024  # (a process compiling graphs of ever new shapes)
_tracer_table = None  # tracer_table()
_make_fx_table = None  # tracer_table() and LATE's, prims.convert_element_type as a _to_copy


def _decomposition(op):
    function = LATE[op]
    if function is None:
        function = LATE[op] = decompositions.tracing_table()[op]
    return function


def _signature(op, value):
    """An argument as make_fx gets it (a meta tensor, a number, the sentinel, a static
    list) and its key."""
    if isinstance(value, torch.fx.Node):
        val = value.meta.get("val")
        if isinstance(val, torch.Tensor):
            if op not in ELEMENTWISE and not all(isinstance(s, int) for s in val.shape):
                raise NotImplementedError(f"{op} with symbolic sizes")
            # (an elementwise op's sizes from their hints: what matters is which sizes
            # are 1; the graph's own sizes are used below)
            shape = tuple(s if isinstance(s, int) else (s.node.hint or 2) for s in val.shape)
            meta = torch.empty(shape, dtype=val.dtype, device="meta")
            return meta, ("tensor", shape, val.dtype)
        if isinstance(val, float):
            return _SENTINEL, ("lifted",)
        raise NotImplementedError(f"a {type(val).__name__} node argument")
    if isinstance(value, (list, tuple)):
        # Static sizes and masks (normalized_shape, output_mask), by value as the
        # tracer's templates key them, or tensors (stack's); a graph value that is not a
        # tensor in a list (a symbolic size) is not taken.
        items = [_signature(op, v) for v in value]
        if any(m[1][0] not in ("static", "list", "tensor") for m in items):
            raise NotImplementedError("a list holding a graph value")
        return type(value)(m[0] for m in items), ("list", type(value), tuple(m[1] for m in items))
    if type(value) is float:
        return value, ("static", float, value.hex())  # (by its bits: -0.0 == 0.0)
    return value, ("static", type(value), value)


def _trace(op, args, kwargs):
    """make_fx's graph of `op`'s decomposition for these arguments (cached by signature)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    made = [_signature(op, a) for a in args]
    made_kwargs = {k: _signature(op, v) for k, v in kwargs.items()}
    key = (op, tuple(m[1] for m in made), tuple((k, m[1]) for k, m in made_kwargs.items()))
    traced = _traced.get(key)
    if traced is None:
        tensors = _tensors([m[0] for m in made]) + _tensors(list(made_kwargs.values()), 0)
        function = _decomposition(op)

        def run(*metas):  # (tensors in _expand's order: positional, then keyword)
            feed = iter(metas)
            call_args = [_fed(m[0], feed) for m in made]
            call_kwargs = {k: _fed(m[0], feed) for k, m in made_kwargs.items()}
            out = function(*call_args, **call_kwargs)
            # (a plain tuple: PyTorch's named tuples, nll_loss's, are no graph output)
            return tuple(out) if isinstance(out, tuple) else out

        global _make_fx_table
        if _make_fx_table is None:
            # (LATE's ops too: a decomposition may call one, embedding_dense_backward's
            # masked_fill; the tracer decomposed such a call as it recorded it)
            _make_fx_table = {**tracer_table(), **{late: _decomposition(late) for late in LATE},
                              prims.convert_element_type.default: _to_copy}
        if len(_traced) >= _TRACED_LIMIT:
            _traced.clear()
        traced = _traced[key] = make_fx(run, decomposition_table=_make_fx_table)(*tensors)
    return traced


def _tensors(values, index=None) -> list:
    """The tensors among `values`, those in lists too, in order (item `index` of each
    value where given: made_kwargs' (meta, key) pairs)."""
    found = []
    for v in values:
        if index is not None:
            v = v[index]
        if isinstance(v, (torch.Tensor, torch.fx.Node)):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found += _tensors(v)
    return found


def _fed(value, feed):
    """`value` with each tensor, in lists too, replaced by the next of `feed`."""
    return tree_map_only(torch.Tensor, lambda _: next(feed), value)


def tracer_table() -> dict:
    """The decompositions the tracer applies as it records (tracing/decompose.py): the
    project's tracing table without LATE's ops, which it records whole."""
    global _tracer_table
    if _tracer_table is None:
        ops = dict(decompositions.tracing_table())
        for op in LATE:
            ops.pop(op, None)
        _tracer_table = ops
    return _tracer_table


def _to_copy(x, dtype):
    return aten._to_copy.default(x, dtype=dtype)


def _expand(gm: torch.fx.GraphModule, node: torch.fx.Node, mode) -> None:
    traced = _trace(node.target, node.args, node.kwargs)
    tensor_args = [a for a in _tensors([*node.args, *node.kwargs.values()])
                   if isinstance(a.meta.get("val"), torch.Tensor)]
    lifted = [a for a in (*node.args, *node.kwargs.values())
              if isinstance(a, torch.fx.Node) and not isinstance(a.meta.get("val"), torch.Tensor)]
    if len(lifted) > 1:
        raise NotImplementedError("more than one lifted float")
    builder = Builder(gm.graph, node, mode)
    env: dict = {}
    placeholders = iter(tensor_args)

    def mapped(x):
        if isinstance(x, torch.fx.Node):
            return env[x]
        if isinstance(x, (list, tuple)):
            return type(x)(mapped(v) for v in x)
        if isinstance(x, dict):
            return {k: mapped(v) for k, v in x.items()}
        if type(x) is float and x == _SENTINEL and lifted:
            return lifted[0]
        if isinstance(x, torch.device):
            return _CPU  # (traced on meta tensors: a factory's device)
        return x

    result = None
    for piece in traced.graph.nodes:
        if piece.op == "placeholder":
            env[piece] = next(placeholders)
        elif piece.op == "call_function":
            env[piece] = builder(piece.target, *mapped(piece.args), **mapped(piece.kwargs))
        elif piece.op == "output":
            result = mapped(piece.args[0])
    if isinstance(result, (tuple, list)):
        # Several results (layer norm's backward, nll_loss): the graph reads them by
        # `getitem` nodes (every one present: fx_graph asks for masked-off ones too).
        for user in list(node.users):
            if user.op != "call_function" or user.target is not operator.getitem:
                raise NotImplementedError(f"{node.target}'s results used whole")
            replace(user, result[user.args[1]], builder.created)
        gm.graph.erase_node(node)
    else:
        replace(node, result, builder.created)


def apply(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Decompose every node of an op in `LATE`."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in LATE]
    if not nodes:
        return gm
    mode = fake_mode(gm)
    for node in nodes:
        _expand(gm, node, mode)
    gm.graph.lint()
    gm.recompile()
    return gm
