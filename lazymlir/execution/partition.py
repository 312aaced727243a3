"""Graph partitioning: a graph that does not lower as a whole, split around the ops
that do not lower.

When a graph fails to compile and eager fallback is allowed, the executor asks
`unlowerable_ops` which of its ops do not lower: each op is probed alone (a
one-op graph, `single_node_graph`), the op the compile error names first. A
`Partitioned` plan then runs the graph as compiled segments (each a graph of its
own, `subgraph`, run through the executor so it is hashed, cached and compiled
like any other) between those ops, which run eagerly with PyTorch on CPU,
counted (`run_node_eagerly`).

A graph too big to compile quickly in one piece is cut the same way, without eager
ops: `cut_points` picks where, and a `Partitioned` plan with those cuts holds
segments that compile at once in the executor's compile workers, each hashed and
cached (in memory and on disk) as a graph of its own.

Graphs here are the fx-stage JSON of lowering.front.fx_graph: a value is a ref
("input" | "scalar" | "node", index, output).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import torch

from ..lowering.front import fx_graph
from ..support.errors import CompileError
from . import fallback, run_observers


def op_name(node: dict) -> str:
    """The ATen schema name of a graph node's op (`aten::sin`)."""
    return fx_graph.resolve_op(node["op"])._schema.name


def _blamed(error: CompileError, node: dict) -> bool:
    """Whether the compile error names this node's op (torch.aten.foo ~ aten.foo.overload)."""
    return error.aten_op is not None and error.aten_op == op_name(node)


def _refs(value):
    if isinstance(value, dict) and "ref" in value:
        yield tuple(value["ref"])
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def _node_refs(node: dict):
    for value in (*node["args"], *node["kwargs"].values()):
        yield from _refs(value)


def _remap(value, mapping: dict):
    if isinstance(value, dict) and "ref" in value:
        return {"ref": list(mapping[tuple(value["ref"])])}
    if isinstance(value, list):
        return [_remap(item, mapping) for item in value]
    return value


def _ref_desc(graph: dict, ref: tuple) -> dict:
    """The description (shape and dtype, or scalar type) of the value `ref` names."""
    kind, index, out = ref
    if kind == "input":
        return graph["inputs"][index]
    if kind == "scalar":
        return graph["scalars"][index]
    return graph["nodes"][index]["outputs"][out]


def subgraph(graph: dict, indices: list[int], outputs: list[tuple]) -> tuple[dict, list[tuple]]:
    """The graph of nodes `indices` computing `outputs`, and the outer refs it reads
    (in its input order: tensors first, then scalars)."""
    inside = set(indices)
    mapping: dict[tuple, tuple] = {}
    tensor_refs: list[tuple] = []
    scalar_refs: list[tuple] = []
    for position, i in enumerate(indices):
        for ref in _node_refs(graph["nodes"][i]):
            if ref in mapping or (ref[0] == "node" and ref[1] in inside):
                continue
            if ref[0] == "scalar":
                mapping[ref] = ("scalar", len(scalar_refs), 0)
                scalar_refs.append(ref)
            else:
                mapping[ref] = ("input", len(tensor_refs), 0)
                tensor_refs.append(ref)
        for out in range(len(graph["nodes"][i]["outputs"])):
            mapping[("node", i, out)] = ("node", position, out)
    nodes = [{**graph["nodes"][i],
              "args": [_remap(a, mapping) for a in graph["nodes"][i]["args"]],
              "kwargs": {k: _remap(v, mapping) for k, v in graph["nodes"][i]["kwargs"].items()}}
             for i in indices]
    sub = {
        "format": graph["format"], "version": graph["version"],
        "inputs": [_ref_desc(graph, r) for r in tensor_refs],
        "scalars": [_ref_desc(graph, r) for r in scalar_refs],
        "nodes": nodes,
        "outputs": [{"ref": list(mapping[r])} for r in outputs],
    }
    return sub, tensor_refs + scalar_refs


def single_node_graph(graph: dict, index: int) -> dict:
    """Node `index` alone, on fresh inputs: what a probe compiles."""
    outputs = [("node", index, k) for k, desc in enumerate(graph["nodes"][index]["outputs"])
               if desc is not None]
    return subgraph(graph, [index], outputs)[0]


def unlowerable_ops(graph: dict, error: CompileError,
                    verdict: Callable[[dict], str | None]) -> dict[int, str]:
    """The ops of `graph` that do not lower (node index -> why), given the error its
    compile raised and `verdict(one_op_graph)`: why that op alone does not lower, or
    None. Raises `error` when no single op is to blame."""
    nodes = graph["nodes"]
    named = [_blamed(error, node) for node in nodes]
    blamed = [i for i, hit in enumerate(named) if hit]
    others = [i for i, hit in enumerate(named) if not hit]
    reasons: dict[int, str] = {}
    # The op the error names is probed first; if it alone fails, the rest are
    # not probed (a later segment compile would partition again if needed).
    for group in (blamed, others):
        for i in group:
            why = verdict(single_node_graph(graph, i))
            if why is not None:
                reasons[i] = why
        if reasons:
            break
    if not reasons:
        raise error  # no single op is to blame: the graph as a whole does not lower
    return reasons


def cut_points(graph: dict, max_nodes: int) -> list[int]:
    """Where to cut a graph of more than `max_nodes` nodes into ceil(n / max_nodes)
    contiguous segments of about equal size, in recorded (topological) order: the
    node indices that start a segment after the first.

    A value computed before a cut and read after it becomes an output of the earlier
    segment and an input of the later one (a buffer written and read back). Each cut
    lies within a window of 1/8 of a segment around its ideal position, where the
    fewest values cross (one sweep over the nodes: `live[p]`, the values crossing a
    cut before node p); on a tie, the position nearest the ideal one. A cut placed by
    what crosses it, not by its index, stays at the same op when nodes are inserted
    before it, so the later segments keep their hash (and their cached compile)."""
    nodes = graph["nodes"]
    count = len(nodes)
    if max_nodes <= 0 or count <= max_nodes:
        return []
    parts = -(-count // max_nodes)
    last_read: dict[tuple, int] = {}
    for i, node in enumerate(nodes):
        for ref in _node_refs(node):
            if ref[0] == "node":
                last_read[ref] = i
    change = [0] * (count + 1)
    for (_, defined, _), read in last_read.items():
        change[defined + 1] += 1  # crosses every cut p with defined < p <= read
        change[read + 1] -= 1
    live, running = [], 0
    for delta in change:
        running += delta
        live.append(running)
    # Valleys of the live set: where values stop crossing (a layer's end). In a training
    # step the set grows over the forward (saved activations) and shrinks over the
    # backward, so the lowest point of a window is often just its edge, which moves
    # with the node count; a valley is a place in the graph and moves with its op.
    valley = [0 < p < count and live[p] < live[p - 1] and live[p] <= live[p + 1]
              for p in range(count + 1)]
    window = max(1, count // (parts * 8))
    cuts: list[int] = []
    for j in range(1, parts):
        ideal = j * count / parts
        low = max(cuts[-1] + 1 if cuts else 1, int(ideal) - window)
        high = min(count - 1, int(ideal) + window)
        if low > high:
            continue
        places = [p for p in range(low, high + 1) if valley[p]] or range(low, high + 1)
        cuts.append(min(places, key=lambda p: (live[p], abs(p - ideal), p)))
    return cuts


class Partitioned:
    """Compiled segments between ops that run eagerly (on CPU, counted), or, with `cuts`
    (node indices that start a new segment), a big graph's segments.

    `run_segment(graph, inputs, scalars)` runs a compiled segment (the executor's
    `execute`, so each segment is cached and compiled as a graph of its own) unless
    the segments' plans were prepared ahead (`bind`): then each runs its plan, without
    the session's lock, so a plan of compiled segments only may be launched by
    mark_step() (executor.in_background): on the target's native thread, as one chain
    of calls (segment_chain.py), where the target has one.

    Its eager ops run on the thread that runs the plan, in order: such a plan runs on
    the caller's thread, never launched (an eager op may read the host RNG or other
    state the user's next lines change)."""

    def __init__(self, graph: dict, eager: dict[int, str], run_segment: Callable,
                 cuts=()):
        self.graph = graph
        self.run_segment = run_segment
        self.eager = eager  # node index -> why it does not lower
        self.plans: list | None = None  # one per compiled segment, in order (`bind`)
        self.keys: list[str] = []  # their structural hashes, where the executor keeps them
        # The argument frames of its chain on the native thread, one per segment
        # (segment_chain.py: made there, at the first start).
        self.frames: list | None = None
        cuts = frozenset(cuts)
        nodes = graph["nodes"]
        needed_later: dict[tuple, int] = {}  # ref -> last node index reading it
        for i, node in enumerate(nodes):
            for ref in _node_refs(node):
                needed_later[ref] = i
        graph_outputs = {tuple(o["ref"]) for o in graph["outputs"]}
        self.steps: list = []
        ends: list[int] = []  # the last node index of each step
        segment: list[int] = []

        def close_segment(next_index: int) -> None:
            if not segment:
                return
            outs = [("node", i, k) for i in segment for k in range(len(nodes[i]["outputs"]))
                    if ("node", i, k) in graph_outputs
                    or needed_later.get(("node", i, k), -1) >= next_index]
            sub, reads = subgraph(graph, list(segment), outs)
            self.steps.append(("compiled", sub, reads, outs))
            ends.append(segment[-1])
            segment.clear()

        for i in range(len(nodes)):
            if i in eager:
                close_segment(i)
                self.steps.append(("eager", i))
                ends.append(i)
            else:
                if i in cuts:
                    close_segment(i)
                segment.append(i)
        close_segment(len(nodes))
        # Values that cross from one step to a later one, dropped after the step that
        # reads them last: a big graph's segments hold one segment's crossing values at a
        # time, not every value until the run ends (saved activations of a training step).
        self.drops: list[list[tuple]] = [[] for _ in self.steps]
        for ref, last in needed_later.items():
            if ref[0] == "node" and ref not in graph_outputs:
                reader = bisect.bisect_left(ends, last)
                if bisect.bisect_left(ends, ref[1]) != reader:  # (a step's own: never in env)
                    self.drops[reader].append(ref)

    def segments(self) -> list[dict]:
        """The graphs of the compiled segments, in order."""
        return [step[1] for step in self.steps if step[0] == "compiled"]

    def bind(self, plans: list) -> None:
        """The plans that run the compiled segments (one per `segments()` graph)."""
        self.plans = list(plans)

    def run(self, target, inputs: list, scalars: list[float], natively: bool = False) -> list:
        """The graph's outputs, its steps run in order on this thread; `natively`: each
        compiled segment's plan is started on the target's native thread and waited for
        (segment_chain.py's runs while an observer is registered)."""
        observed = run_observers.started(self, inputs, scalars) if run_observers.active \
            else None
        env: dict[tuple, object] = {("input", i, 0): data for i, data in enumerate(inputs)}
        env.update({("scalar", i, 0): value for i, value in enumerate(scalars)})
        plans = iter(self.plans) if self.plans is not None else None
        for step, drops in zip(self.steps, self.drops):
            if step[0] == "compiled":
                _, sub, reads, outs = step
                tensors = [env[r] for r in reads if r[0] != "scalar"]
                values = [env[r] for r in reads if r[0] == "scalar"]
                if plans is None:
                    results = self.run_segment(sub, tensors, values)
                elif natively:
                    results = next(plans).start(target, tensors, values).result()
                else:
                    results = next(plans).run(target, tensors, values)
                env.update(zip(outs, results))
            else:
                fallback.count(op_name(self.graph["nodes"][step[1]]), self.eager[step[1]])
                run_node_eagerly(self.graph, target, step[1], env)
            for ref in drops:
                del env[ref]
        outputs = [env[tuple(o["ref"])] for o in self.graph["outputs"]]
        if observed:
            run_observers.finished(observed, outputs)
        return outputs


def run_node_eagerly(graph: dict, target, index: int, env: dict) -> None:
    """Run node `index` of `graph` with PyTorch on CPU, reading and writing target
    buffers in `env` (ref -> buffer, or the value of a scalar input)."""
    node = graph["nodes"][index]
    op = fx_graph.resolve_op(node["op"])

    def decode(value):
        if isinstance(value, dict) and "ref" in value:
            ref = tuple(value["ref"])
            if ref[0] == "scalar":
                return env[ref]
            desc = _ref_desc(graph, ref)
            meta = torch.empty(desc["shape"], dtype=fx_graph.dtype_from_name(desc["dtype"]),
                               device="meta")
            return fallback.kernel_input(target.download(env[ref], meta))
        if isinstance(value, list):
            return [decode(v) for v in value]
        return fx_graph.decode_scalar(value)

    out = op(*[decode(a) for a in node["args"]],
             **{k: decode(v) for k, v in node["kwargs"].items()})
    for k, tensor in enumerate(out if isinstance(out, (list, tuple)) else [out]):
        if isinstance(tensor, torch.Tensor):  # None: an output nobody asked for
            # A conj or neg view (`_conj`) shares its input's storage with a bit set:
            # the upload copies the storage, so the bit is applied first.
            tensor = tensor.resolve_conj().resolve_neg()
            env[("node", index, k)] = target.upload(tensor.contiguous())
