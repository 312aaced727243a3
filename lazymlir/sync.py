"""Sync points: turn pending lazy values into data by compiling and running their trace.

`materialize(values)` collects the nodes the values need, writes them as an
`fx` stage graph (the serialized form in lowering/fx_graph.py, which is also
the structural-hash input), looks the graph up in the compile cache, runs the
executable on the graph's input data, and binds each output to its value.
A materialized value keeps its data, so syncing it again runs nothing.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_map

from . import backend, compiler, metrics
from .lazy_tensor import LazyTensor, LazyValue, Node, live_pending_values
from .lowering import fx_graph


def _meta_desc(meta: torch.Tensor) -> dict:
    return {"shape": list(meta.shape), "dtype": fx_graph.dtype_name(meta.dtype)}


def build_graph(targets: list[LazyValue]) -> tuple[dict, list[LazyValue]]:
    """The fx-stage graph computing `targets`, and the materialized values it reads."""
    nodes: dict[int, Node] = {}
    stack = [v.node for v in targets if v.pending]
    while stack:  # iterative: long training traces would overflow recursion
        node = stack.pop()
        if node.seq in nodes:
            continue
        nodes[node.seq] = node

        def visit(x):
            if isinstance(x, LazyValue) and x.pending and x.node.seq not in nodes:
                stack.append(x.node)
            return x

        tree_map(visit, (node.args, node.kwargs))
    ordered = [nodes[seq] for seq in sorted(nodes)]
    node_index = {id(n): i for i, n in enumerate(ordered)}
    inputs: list[LazyValue] = []
    input_index: dict[int, int] = {}

    def encode(x):
        if isinstance(x, LazyValue):
            if x.pending:
                return {"ref": ["node", node_index[id(x.node)], x.index]}
            if id(x) not in input_index:  # materialized: a graph input, numbered by first use
                input_index[id(x)] = len(inputs)
                inputs.append(x)
            return {"ref": ["input", input_index[id(x)], 0]}
        if isinstance(x, (list, tuple)):
            return [encode(v) for v in x]
        return fx_graph.encode_scalar(x)

    encoded_nodes = [{
        "op": str(node.op),
        "args": [encode(a) for a in node.args],
        "kwargs": {k: encode(v) for k, v in node.kwargs.items()},
        "outputs": [_meta_desc(m) for m in node.out_metas],
    } for node in ordered]
    graph = {
        "format": fx_graph.FORMAT,
        "version": fx_graph.VERSION,
        "inputs": [_meta_desc(v.meta) for v in inputs],
        "nodes": encoded_nodes,
        "outputs": [encode(v) for v in targets],
    }
    return graph, inputs


def materialize(values: list[LazyValue]) -> None:
    targets = list({id(v): v for v in values if v.pending}.values())
    if not targets:
        return
    metrics.inc("Sync")
    graph, inputs = build_graph(targets)
    executable = compiler.get_executable(graph)
    with metrics.timed("ExecuteTime"):
        outputs = executable.run([v.data for v in inputs])
    for value, data in zip(targets, outputs):
        value.materialized(data)


def to_cpu(tensor: LazyTensor) -> torch.Tensor:
    value = tensor._lazy
    materialize([value])
    return backend.active().download(value.data, value.meta)


def mark_step() -> None:
    """Compile (once) and run everything pending for live lazy_mlir tensors, as one graph."""
    metrics.inc("MarkStep")
    materialize(live_pending_values())


def single_op_graph(func, args, kwargs) -> dict:
    """A graph of just `func` on fresh inputs shaped like `args` (used by fallback probes)."""
    from .lazy_tensor import meta_like

    def fresh(x):
        if isinstance(x, torch.Tensor):
            meta = x._lazy.meta if isinstance(x, LazyTensor) else meta_like(x.shape, x.dtype)
            return LazyValue(meta, data=object())
        if isinstance(x, torch.device):
            return torch.device("cpu")
        return x

    node_args, node_kwargs = tree_map(fresh, (args, kwargs))
    meta_args, meta_kwargs = tree_map(
        lambda x: x.meta if isinstance(x, LazyValue) else
        (torch.device("meta") if isinstance(x, torch.device) else x), (node_args, node_kwargs))
    out = func(*meta_args, **meta_kwargs)
    outs = [o for o in (out if isinstance(out, (list, tuple)) else [out])
            if isinstance(o, torch.Tensor)]
    from .tracer import _view_for_copy

    node = Node(_view_for_copy(func), node_args, node_kwargs,
                [meta_like(o.shape, o.dtype) for o in outs])
    values = [LazyValue(m, node, i) for i, m in enumerate(node.out_metas)]
    graph, _ = build_graph(values)
    return graph
