"""Random ops in torch.compile graphs: Philox arithmetic fed by one seed/offset input.

AOTAutograd hands over graphs with random ops (`native_dropout`, `rand`, `randn_like`,
`bernoulli`, `randint`...). torch-mlir would lower some of them with a seed kept in
the compiled module (not reproducible under `torch.manual_seed`, not the device's
stream). Instead each random op of lowering/front/philox.py's `RANDOM_OPS` table is
replaced, before the graph is written in the fx-stage form, by that table's Philox
arithmetic, traced with make_fx and inlined; the graph gets one more input, an int64
tensor (k, 2) of [seed, offset] rows, one per random op, filled at every call from
the session's generator (`seed_offsets`). The stream advances without recompiling and
is the lazy device's. AOTAutograd saves dropout's mask for the backward (the min-cut
partitioner never recomputes random ops), so forward and backward agree.
"""

from __future__ import annotations

import operator

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from . import session
from .lowering.front import philox

aten = torch.ops.aten


class RandomInputs:
    """What a rewritten graph needs from the generator at each call: the counters of each
    of its random ops, in the order of the rows of its seed/offset input."""

    def __init__(self, counters: list[int]):
        self.counters = counters

    def seed_offsets(self) -> torch.Tensor:
        """The (k, 2) int64 input for one call; advances the device's stream."""
        seed, offset = session.current().rng.reserve(sum(self.counters))
        rows = []
        for n in self.counters:
            rows.append((seed, offset))
            offset += n
        return torch.tensor(rows, dtype=torch.int64)


def _example(value):
    """A real tensor like the fake `value` (for make_fx), or `value` itself."""
    if isinstance(value, torch.Tensor):
        return torch.empty(value.shape, dtype=value.dtype, device=value.device)
    return value


def _random_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function"
            and n.target in philox.RANDOM_OPS and n.kwargs.get("generator") is None]


def rewrite(gm: torch.fx.GraphModule) -> RandomInputs | None:
    """Replace `gm`'s random ops in place (None: it has none). The new input is the last
    placeholder."""
    nodes = _random_nodes(gm)
    if not nodes:
        return None
    graph = gm.graph
    last_placeholder = list(graph.find_nodes(op="placeholder"))[-1] \
        if graph.find_nodes(op="placeholder") else None
    with graph.inserting_after(last_placeholder) if last_placeholder is not None \
            else graph.inserting_before(next(iter(graph.nodes))):
        rng = graph.placeholder("lazymlir_seed_offsets")
    device = _device_of(nodes[0])
    rng.meta["val"] = torch.empty((len(nodes), 2), dtype=torch.int64, device=device)
    counters = []
    for row, node in enumerate(nodes):
        counters.append(_inline(gm, node, rng, row))
    graph.lint()
    gm.recompile()
    return RandomInputs(counters)


def _device_of(node: torch.fx.Node) -> torch.device:
    val = node.meta.get("val")
    first = val[0] if isinstance(val, (list, tuple)) else val
    return getattr(first, "device", torch.device("cpu"))


def _inline(gm: torch.fx.GraphModule, node: torch.fx.Node, rng: torch.fx.Node,
            row: int) -> int:
    """Replace `node` by its Philox form reading row `row` of `rng`; its counters."""
    counters_of, compute = philox.RANDOM_OPS[node.target]
    kwargs = {k: v for k, v in node.kwargs.items() if k != "generator"}
    arg_vals = torch.fx.node.map_arg(node.args, lambda n: n.meta["val"])
    kwarg_vals = torch.fx.node.map_arg(kwargs, lambda n: n.meta["val"])
    counters = counters_of(*arg_vals, **kwarg_vals)

    # The op's tensor arguments become the traced function's inputs after seed_offset.
    tensor_nodes: list[torch.fx.Node] = []
    torch.fx.node.map_arg((node.args, kwargs), tensor_nodes.append)

    def fn(seed_offset, *tensors):
        values = dict(zip(tensor_nodes, tensors))
        args = torch.fx.node.map_arg(node.args, values.__getitem__)
        kw = torch.fx.node.map_arg(kwargs, values.__getitem__)
        return compute(seed_offset, *args, **kw)

    device = _device_of(node)
    # A fake mode of our own, without Dynamo's shape environment (make_fx's "fake" mode
    # would pick that up from the tracing context and trace sizes as SymInts).
    with FakeTensorMode():
        examples = [torch.empty(2, dtype=torch.int64, device=device)]
        examples += [_example(n.meta["val"]) for n in tensor_nodes]
        sub = make_fx(fn, tracing_mode="real")(*examples)

    graph = gm.graph
    with graph.inserting_before(node):
        seed_offset = graph.call_function(aten.select.int, (rng, 0, row))
        seed_offset.meta["val"] = torch.empty(2, dtype=torch.int64, device=device)
        placeholders = list(sub.graph.find_nodes(op="placeholder"))
        env = dict(zip(placeholders, [seed_offset, *tensor_nodes]))
        result = None
        for sub_node in sub.graph.nodes:
            if sub_node.op == "placeholder":
                continue
            if sub_node.op == "output":
                result = torch.fx.node.map_arg(sub_node.args[0], env.__getitem__)
                break
            env[sub_node] = graph.node_copy(sub_node, env.__getitem__)
    if isinstance(result, (list, tuple)):
        for user in list(node.users):
            if user.op == "call_function" and user.target is operator.getitem:
                user.replace_all_uses_with(result[user.args[1]])
                graph.erase_node(user)
            else:
                raise NotImplementedError(f"{node.target}'s tuple used by {user}")
    else:
        node.replace_all_uses_with(result)
    graph.erase_node(node)
    return counters
