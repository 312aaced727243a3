"""Functional collectives in torch.compile graphs: runtime calls at segment boundaries.

Dynamo and AOTAutograd capture `torch.distributed` calls in a compiled region (a
`funcol.all_reduce`, compiled autograd's DDP reducer, FSDP2) as `_c10d_functional`
nodes: the collective returns a tensor whose values are valid only after the
matching `wait_tensor`, which finds the pending work by the tensor's storage. Such
a node cannot be compiled, and running it as an op fallback copies its output before
the wait (nothing waits: garbage values and "unwaited collective calls").

Inductor runs them as extern calls between its kernels (comm_lowering.py); here a
graph with collectives is cut at each one: the pieces between them compile as
graphs of their own (`compile_piece`), the collective and its `wait_tensor` run
right after each other through PyTorch, on the very tensors the pieces computed.
Nothing waits for the wait's result, so the raw output is never copied before it.
These runtime calls are not op fallbacks: they are counted as `Collective` and
allowed under LAZYMLIR_FALLBACK=error.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable

import torch
import torch.fx

from .. import session

NAMESPACES = frozenset({"_c10d_functional", "_c10d_functional_autograd", "c10d"})


def is_collective(node: torch.fx.Node) -> bool:
    target = node.target
    return node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and \
        target.namespace in NAMESPACES


def _is_wait(node: torch.fx.Node) -> bool:
    return is_collective(node) and node.target._schema.name.endswith("::wait_tensor")


def has_collectives(gm: torch.fx.GraphModule) -> bool:
    return any(is_collective(n) for n in gm.graph.nodes)


class _Piece:
    """A run of compute nodes between collectives, as a graph of its own."""

    def __init__(self, gm: torch.fx.GraphModule, nodes: list[torch.fx.Node],
                 used_later: set[torch.fx.Node]):
        inside = set(nodes)
        self.inputs: list[torch.fx.Node] = []
        for node in nodes:
            for arg in node.all_input_nodes:
                if arg not in inside and arg not in self.inputs:
                    self.inputs.append(arg)
        self.outputs = [n for n in nodes if n in used_later]
        graph = torch.fx.Graph()
        remap: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in self.inputs:
            remap[node] = graph.placeholder(node.name)
            remap[node].meta = dict(node.meta)
        for node in nodes:
            remap[node] = graph.node_copy(node, lambda n: remap[n])
        graph.output(tuple(remap[n] for n in self.outputs))
        self.module = torch.fx.GraphModule(gm, graph)
        self.compiled: Callable | None = None


def _pieces(gm: torch.fx.GraphModule) -> list:
    """The graph's nodes in order, as pieces and collective nodes (a collective's
    `wait_tensor`, and getitems of its result, ride along with it)."""
    steps: list = []
    current: list[torch.fx.Node] = []
    riding: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output") or node in riding:
            continue
        if is_collective(node):
            if current:
                steps.append(current)
                current = []
            group = [node]
            # Its getitems (a coalesced collective's list) and their waits follow it.
            for user in node.users:
                if user.op != "call_function":
                    continue
                if user.target is operator.getitem:
                    group.append(user)
                    group.extend(u for u in user.users if _is_wait(u))
                elif _is_wait(user):
                    group.append(user)
            riding.update(group)
            steps.append(group)
        else:
            current.append(node)
    if current:
        steps.append(current)
    return steps


def split(gm: torch.fx.GraphModule, example_inputs, compile_piece: Callable):
    """A boxed callable running `gm`: its compute pieces compiled by
    `compile_piece(piece_module, example_inputs)`, its collectives called as they come."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    output = next(iter(gm.graph.find_nodes(op="output")))
    steps = _pieces(gm)
    # Which nodes each later step (or the output) reads.
    position = {}
    for index, step in enumerate(steps):
        for node in step:
            position[node] = index
    pieces = []
    for index, step in enumerate(steps):
        if is_collective(step[0]):
            pieces.append(step)
            continue
        used_later = {n for n in step for user in n.users
                      if user.op == "output" or position.get(user, -1) > index}
        pieces.append(_Piece(gm, step, used_later))
    examples = dict(zip(placeholders, example_inputs))
    # Example inputs of each piece: the fake values AOTAutograd recorded.
    for piece in pieces:
        if isinstance(piece, _Piece):
            fakes = [examples.get(n, n.meta.get("val")) for n in piece.inputs]
            piece.compiled = compile_piece(piece.module, fakes)
    metrics = session.current().metrics

    def run(args):
        env = dict(zip(placeholders, args))
        args.clear()  # boxed calling convention
        for piece in pieces:
            if isinstance(piece, _Piece):
                outs = piece.compiled([env[n] for n in piece.inputs])
                env.update(zip(piece.outputs, outs))
                continue
            for node in piece:  # the collective, then what rides along with it
                if is_collective(node) and not _is_wait(node):
                    metrics.inc("Collective")
                call_args = torch.fx.node.map_arg(node.args, env.__getitem__)
                call_kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
                env[node] = node.target(*call_args, **call_kwargs)
        return list(torch.fx.node.map_arg(output.args[0], env.__getitem__))

    run._boxed_call = True
    return run


def unbox_list_input(gm: torch.fx.GraphModule, example_inputs, compile_flat: Callable):
    """Compile a graph whose first input is a list of tensors (compiled autograd's, as
    DDP's python_reducer mode makes) as a graph with one input per tensor; the callable
    returned takes the list, as the graph did. Inductor's `flatten_graph_inputs` does
    this for its own compiler, which traces again from a module; ours takes the graph."""
    gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))  # Dynamo reads its own after
    boxed = list(gm.graph.find_nodes(op="placeholder"))[0]
    count = len(example_inputs[0])
    with gm.graph.inserting_before(boxed):
        tensors = [gm.graph.placeholder(f"{boxed.name}_{i}") for i in range(count)]
    for node, example in zip(tensors, example_inputs[0]):
        node.meta["val"] = example
    for user in list(boxed.users):
        if user.op != "call_function" or user.target is not operator.getitem:
            raise NotImplementedError(f"the list input '{boxed.name}' is used by {user}, "
                                      f"not only indexed")
        user.replace_all_uses_with(tensors[user.args[1]])
        gm.graph.erase_node(user)
    gm.graph.erase_node(boxed)
    gm.recompile()
    compiled = compile_flat(gm, [*example_inputs[0], *example_inputs[1:]])

    def run(*args):
        flat = [*args[0], *args[1:]]
        args[0].clear()  # the caller's list: let the tensors go as the graph frees them
        return compiled(*flat)

    return run
