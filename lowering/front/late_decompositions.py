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
"""

from __future__ import annotations

import torch
import torch.fx

from . import decompositions
from .fx_rewrite import Builder, fake_mode, replace

aten = torch.ops.aten
prims = torch.ops.prims

# Op -> the decomposition this stage applies; the tracer records these ops whole.
LATE = {
    aten.addcmul.default: None,  # (None: the tracer's table's own, looked up on first use)
    aten.addcdiv.default: None,
    aten.lerp.Tensor: None,
    aten.lerp.Scalar: torch._refs.lerp,  # value-independent (see above)
}

_CPU = torch.device("cpu")
_SENTINEL = 0.7853981633974483  # stands for a lifted float while make_fx traces
_traced: dict = {}  # (op, argument signature) -> the decomposition's traced GraphModule
_TRACED_LIMIT = 1024  # (a process compiling graphs of ever new shapes)
_tracer_table = None  # tracer_table()
_make_fx_table = None  # tracer_table() with prims.convert_element_type as the tracer records it


def _decomposition(op):
    function = LATE[op]
    if function is None:
        function = LATE[op] = decompositions.tracing_table()[op]
    return function


def _signature(value):
    """An argument as make_fx gets it (a meta tensor, a number, the sentinel) and its key."""
    if isinstance(value, torch.fx.Node):
        val = value.meta.get("val")
        if isinstance(val, torch.Tensor):
            # (sizes from their hints: the decompositions here are elementwise, what
            # matters is which sizes are 1; the graph's own sizes are used below)
            shape = tuple(s if isinstance(s, int) else (s.node.hint or 2) for s in val.shape)
            meta = torch.empty(shape, dtype=val.dtype, device="meta")
            return meta, ("tensor", shape, val.dtype)
        if isinstance(val, float):
            return _SENTINEL, ("lifted",)
        raise NotImplementedError(f"a {type(val).__name__} node argument")
    if isinstance(value, (list, tuple)):
        raise NotImplementedError("a list argument")
    return value, ("static", type(value), value)


def _trace(op, args, kwargs):
    """make_fx's graph of `op`'s decomposition for these arguments (cached by signature)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    made = [_signature(a) for a in args]
    made_kwargs = {k: _signature(v) for k, v in kwargs.items()}
    key = (op, tuple(m[1] for m in made), tuple((k, m[1]) for k, m in made_kwargs.items()))
    traced = _traced.get(key)
    if traced is None:
        tensors = [m[0] for m in made if isinstance(m[0], torch.Tensor)]
        function = _decomposition(op)

        def run(*metas):
            feed = iter(metas)
            call_args = [next(feed) if isinstance(m[0], torch.Tensor) else m[0] for m in made]
            return function(*call_args, **{k: m[0] for k, m in made_kwargs.items()})

        global _make_fx_table
        if _make_fx_table is None:
            _make_fx_table = {**tracer_table(), prims.convert_element_type.default: _to_copy}
        if len(_traced) >= _TRACED_LIMIT:
            _traced.clear()
        traced = _traced[key] = make_fx(run, decomposition_table=_make_fx_table)(*tensors)
    return traced


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
    tensor_args = [a for a in (*node.args, *node.kwargs.values())
                   if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)]
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
