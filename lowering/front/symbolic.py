"""Symbolic sizes in the fx stage: graphs compiled once for every value of a dimension.

A graph document may name size symbols (torch.compile's `dynamic=True` and
`mark_dynamic` hand over such graphs, lazymlir/dynamo.py):

- `"symbols": {"s0": [input, dim], "s1": [input, dim, a, b], ...}`: where each
  symbol is read at run time: dimension `dim` of tensor input `input` (or, with
  `a` and `b`, that size is `a*s1 + b`: s1 = (size - b) // a);
- `"hints": {"s0": 5, ...}`: one value of each symbol (the sizes the graph was
  captured with), for the shape environment below;
- a shape entry is an int or a Python expression over the symbols (`"s0"`,
  `"2*s0"`, `"(s0 + 1) // 2"`, `max(s0, 4)`: what torch's PythonPrinter writes);
- an op argument that is a size is `{"sym": "<expression>"}`.

`to_fx` turns a document's symbolic parts into what torch-mlir's FX importer needs:
fake tensors whose sizes are SymInts of one ShapeEnv (imported as `?` dimensions)
and size arguments computed in the graph from `aten.sym_size` of the input that
carries each symbol (imported as `torch.aten.size.int` and integer arithmetic).
The compiled code reads its sizes from the memref descriptors the runtime passes;
the runtime computes each output's shape from the same expressions
(lazymlir/targets/cpu.py).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv


def is_dynamic(graph: dict) -> bool:
    return bool(graph.get("symbols"))


def evaluate(expression: str | int, values: dict) -> Any:
    """The value of a shape entry, with `values` (symbol name -> int or SymInt)."""
    if isinstance(expression, int):
        return expression
    namespace = {"max": _max, "min": _min, "__builtins__": {}}
    return eval(expression, namespace, values)  # noqa: S307 - our own documents' sizes


def size_of(inputs: list, source: list) -> int:
    """A symbol's value, read from the inputs at run time (its "symbols" entry)."""
    size = inputs[source[0]].shape[source[1]]
    return size if len(source) == 2 else (size - source[3]) // source[2]


def _max(*args):
    _refuse_in_graph(args)
    return torch.sym_max(*args) if any(isinstance(a, torch.SymInt) for a in args) else max(args)


def _min(*args):
    _refuse_in_graph(args)
    return torch.sym_min(*args) if any(isinstance(a, torch.SymInt) for a in args) else min(args)


def _refuse_in_graph(args) -> None:
    if any(isinstance(a, _SizeNode) for a in args):
        # (the importer's error type: a compile error, so torch.compile specializes)
        raise NotImplementedError("a size argument with max/min of symbolic sizes")


class SymbolicGraph:
    """The SymInts of one document's symbols, and the FX nodes that compute sizes."""

    def __init__(self, graph: dict, fake_mode):
        # Imported here, not at the top: importing torch._dynamo takes ~1.8 s, which
        # every `import lazymlir` (each compile worker, each lazymlir-opt run) paid for
        # the graphs with symbolic sizes only this class builds.
        from torch._dynamo.source import ConstantSource

        self.sources = graph["symbols"]
        self.shape_env = fake_mode.shape_env
        self.values: dict[str, torch.SymInt] = {}
        for name, hint in graph["hints"].items():
            symbol = self.shape_env.create_symbol(
                int(hint), source=ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC)
            self.values[name] = self.shape_env.create_symintnode(symbol, hint=int(hint))
        self._size_nodes: dict[str, torch.fx.Node] = {}

    def shape(self, shape: list) -> list:
        return [evaluate(d, self.values) for d in shape]

    def size_arg(self, fx: torch.fx.Graph, inputs: list, expression: str):
        """An FX value computing `expression` (an int, or a node of sym_size/arithmetic)."""
        proxies = {name: _SizeNode(self._size_node(fx, inputs, name), value)
                   for name, value in self.values.items() if name in expression}
        result = evaluate(expression, proxies)
        return result.node if isinstance(result, _SizeNode) else result

    def _size_node(self, fx, inputs, name) -> torch.fx.Node:
        node = self._size_nodes.get(name)
        if node is None:
            index, dim, *linear = self.sources[name]
            node = fx.call_function(torch.ops.aten.sym_size.int, (inputs[index], dim))
            node.meta["val"] = inputs[index].meta["val"].shape[dim]
            if linear:  # the size is a*s + b
                a, b = linear
                node = ((_SizeNode(node, node.meta["val"]) - b) // a).node
            self._size_nodes[name] = node
        return node


def fake_mode_for(graph: dict):
    """The FakeTensorMode a document's FX graph is built in (with a ShapeEnv if dynamic)."""
    if not is_dynamic(graph):
        return FakeTensorMode(allow_non_fake_inputs=True)
    return FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())


class _SizeNode:
    """A size being computed in the FX graph: arithmetic on it appends the node."""

    def __init__(self, node: torch.fx.Node, value):
        self.node, self.value = node, value

    def _apply(self, op, other, reverse=False):
        other_node = other.node if isinstance(other, _SizeNode) else other
        other_value = other.value if isinstance(other, _SizeNode) else other
        args = (other_node, self.node) if reverse else (self.node, other_node)
        values = (other_value, self.value) if reverse else (self.value, other_value)
        node = self.node.graph.call_function(op, args)
        node.meta["val"] = op(*values)
        return _SizeNode(node, node.meta["val"])

    def __add__(self, other): return self._apply(operator.add, other)
    def __radd__(self, other): return self._apply(operator.add, other, True)
    def __sub__(self, other): return self._apply(operator.sub, other)
    def __rsub__(self, other): return self._apply(operator.sub, other, True)
    def __mul__(self, other): return self._apply(operator.mul, other)
    def __rmul__(self, other): return self._apply(operator.mul, other, True)
    def __floordiv__(self, other): return self._apply(operator.floordiv, other)
    def __rfloordiv__(self, other): return self._apply(operator.floordiv, other, True)

    def __neg__(self):
        return self._apply(operator.mul, -1)


_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
          torch.ops.aten.reshape.default)


def reshape_through_flat(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Each view of a tensor with symbolic sizes as a flatten to 1-D and an unflatten.

    torch-mlir lowers `aten.view` between shapes with several dynamic sizes by
    guessing which input dimensions form each output dimension: `[?, ?, 48] ->
    [s0*s1, 48]` became a cast to `?x1x48` (a wrong shape, caught at run time by an
    assertion only where a later op checks it). A flatten is always one
    `tensor.collapse_shape` and an unflatten from 1-D a `tensor.reshape` with the
    sizes computed in the graph, which is what the view means (row-major order; the
    graph's tensors have value semantics).
    """
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _VIEWS:
            continue
        source, sizes = node.args[0], node.args[1]
        before, after = source.meta["val"], node.meta["val"]
        if before.dim() == 0 or after.dim() == 0 or not (
                _symbolic(before.shape) or _symbolic(after.shape)):
            continue
        with gm.graph.inserting_before(node):
            flat = gm.graph.call_function(torch.ops.aten.flatten.using_ints, (source, 0, -1))
        flat.meta["val"] = before.flatten()
        node.target = torch.ops.aten.unflatten.int
        node.args = (flat, 0, sizes)
    gm.recompile()
    return gm


def _symbolic(shape) -> bool:
    return any(isinstance(d, torch.SymInt) and not d.node.expr.is_number for d in shape)
