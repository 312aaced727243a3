"""Trace -> graph: the fx-stage document for a set of pending lazy values.

`build_graph(values)` collects the nodes the values need, numbers tensor
inputs by first use, and writes the graph in the serialized form of
lowering/front/fx_graph.py, which is the structural-hash input, the dump file and
the compiler's input at once.

Python floats that reach arithmetic ops (learning rates, momentum and bias
corrections, clip coefficients, `x * s`) become *scalar inputs* of the graph:
their values are passed at run time and are not part of the hash, so a
training loop whose learning rate changes every step still compiles its step
once (the fix LTC made in pytorch#69571). Floats that decide shapes or
structure (arange bounds, interpolation scales, exponents, dropout p) stay
constants: only the ops in `SCALAR_INPUT_OPS` lift them.
"""

from __future__ import annotations

import hashlib
import json

from ..lowering.front import fx_graph
from .values import LazyValue, Node

# Ops whose float arguments are plain operands of elementwise arithmetic:
# lifting them changes no shape and no control flow in any lowering.
SCALAR_INPUT_OPS = frozenset({
    "aten::add", "aten::sub", "aten::rsub", "aten::mul", "aten::div", "aten::addcmul",
    "aten::addcdiv", "aten::lerp", "aten::clamp", "aten::clamp_min", "aten::clamp_max",
    "aten::fill", "aten::full", "aten::full_like", "aten::masked_fill", "aten::where",
    "aten::maximum", "aten::minimum", "aten::hardtanh", "aten::threshold",
})


def _meta_desc(meta) -> dict:
    return {"shape": list(meta.shape), "dtype": fx_graph.dtype_name(meta.dtype)}


# build_graph runs at every sync point: what depends only on an op or on a
# shape-cache entry is computed once. Graph documents are values nobody mutates,
# so nodes of different graphs may share these pieces.
_OPS: dict = {}     # id(op) -> (op, "aten.add.Tensor", "aten::add")
_DESCS: dict = {}   # id(node.out_metas) -> (out_metas, [output desc, ...])
_CACHE_LIMIT = 1 << 16


def _op_info(op) -> tuple:
    info = _OPS.get(id(op))
    if info is None:
        info = _OPS[id(op)] = (op, str(op), op._schema.name)
    return info


def _out_descs(metas) -> list:
    """Output descriptions of a node; the tracer shares `out_metas` lists between nodes
    of one shape-cache entry, so they are computed once per entry (the cache keeps the
    list alive: its id is not reused while cached)."""
    hit = _DESCS.get(id(metas))
    if hit is not None and hit[0] is metas:
        return hit[1]
    descs = [None if m is None else _meta_desc(m) for m in metas]
    if len(_DESCS) >= _CACHE_LIMIT:
        _DESCS.clear()
    _DESCS[id(metas)] = (metas, descs)
    return descs


def _value_args(node: Node):
    """The LazyValues among a node's arguments (tensor lists included)."""
    for arg in (*node.args, *node.kwargs.values()) if node.kwargs else node.args:
        t = type(arg)
        if t is LazyValue:
            yield arg
        elif t is list or t is tuple:
            for value in arg:
                if type(value) is LazyValue:
                    yield value


def pending_nodes(targets: list[LazyValue]) -> list[Node]:
    """The pending nodes `targets` depend on, in trace (= topological) order."""
    nodes: dict[int, Node] = {}
    stack = [v.node for v in targets if v.node is not None]
    push = stack.append
    while stack:  # iterative: long training traces would overflow recursion
        node = stack.pop()
        if node.seq in nodes:
            continue
        nodes[node.seq] = node
        # Inline rather than through _value_args: this runs at every sync point.
        for arg in (*node.args, *node.kwargs.values()) if node.kwargs else node.args:
            t = type(arg)
            if t is LazyValue:
                if arg.node is not None and arg.node.seq not in nodes:
                    push(arg.node)
            elif t is list or t is tuple:
                for value in arg:
                    if type(value) is LazyValue and value.node is not None \
                            and value.node.seq not in nodes:
                        push(value.node)
    return [nodes[seq] for seq in sorted(nodes)]


def nodes_downstream_of(op_name: str, nodes: list[Node]) -> set[int]:
    """Seqs of the nodes (of `nodes`, in topological order) that are an `op_name` op
    ("aten::_fft_c2c") or read one's output, directly or not."""
    hit: set[int] = set()
    for node in nodes:
        if _op_info(node.op)[2] == op_name or any(
                v.node is not None and v.node.seq in hit for v in _value_args(node)):
            hit.add(node.seq)
    return hit


def build_graph(targets: list[LazyValue], static_scalar_ops=frozenset()
                ) -> tuple[dict, list[LazyValue], list[float]]:
    """(graph, the materialized values it reads, the values of its scalar inputs).

    `static_scalar_ops`: ops whose floats must stay constants after all (a
    lowering needs them constant), learned by the executor's probes.
    """
    ordered = pending_nodes(targets)
    node_index = {node.seq: i for i, node in enumerate(ordered)}
    inputs: list[LazyValue] = []
    input_index: dict[int, int] = {}
    scalars: list[float] = []

    def encode(x, lift: bool):
        if type(x) is LazyValue:
            if x.node is not None:
                return {"ref": ["node", node_index[x.node.seq], x.index]}
            x.check()
            if id(x) not in input_index:  # materialized: a graph input, numbered by first use
                input_index[id(x)] = len(inputs)
                inputs.append(x)
            return {"ref": ["input", input_index[id(x)], 0]}
        if lift and type(x) is float:
            scalars.append(x)
            return {"ref": ["scalar", len(scalars) - 1, 0]}
        if isinstance(x, (list, tuple)):
            return [encode(v, False) for v in x]
        return fx_graph.encode_scalar(x)

    encoded_nodes = []
    for node in ordered:
        _, op_name, name = _op_info(node.op)
        lift = name in SCALAR_INPUT_OPS and name not in static_scalar_ops
        args = []
        for a in node.args:
            if type(a) is LazyValue and a.node is not None:  # the common case, inline
                args.append({"ref": ["node", node_index[a.node.seq], a.index]})
            else:
                args.append(encode(a, lift))
        encoded_nodes.append({
            "op": op_name,
            "args": args,
            "kwargs": {k: encode(v, lift) for k, v in node.kwargs.items()},
            "outputs": _out_descs(node.out_metas),
        })
    graph = {
        "format": fx_graph.FORMAT,
        "version": fx_graph.VERSION,
        "inputs": [_meta_desc(v.meta) for v in inputs],
        "scalars": [{"dtype": fx_graph.dtype_name(fx_graph.SCALAR_DTYPE)} for _ in scalars],
        "nodes": encoded_nodes,
        "outputs": [encode(v, False) for v in targets],
    }
    # `encode` calls itself through its closure cell: a reference cycle that would keep
    # `inputs` (and so the input values) alive until the next garbage collection, where
    # buffer donation (donation.py) counts who still holds them.
    encode = None  # noqa: F841
    return graph, inputs, scalars


# ------------------------------------------------------------ structural key
# A sync whose graph was compiled before needs only its structural hash, not the
# document: `graph_key` hashes a flat list (per node: its static text, then where
# each tensor argument comes from) without building it. A node's static text (op,
# non-tensor arguments, lifted floats as placeholders, output shapes/dtypes) is
# built once per Node.static token: the recorder's shape-cache entry or a
# decomposition template's step fixes all of it.

_TEXTS: dict = {}   # (Node.static, lift) -> the node's static text
_INPUT_TEXTS: dict = {}  # LazyValue.sig -> its meta description's text


def _static_text(node: Node, op_name: str, lift: bool) -> str:
    """The node's document entry with its tensor arguments as placeholders (and its
    lifted floats: their values are run-time inputs)."""
    def static(x, lifted):
        if type(x) is LazyValue:
            return "T"
        if lifted and type(x) is float:
            return "S"
        if type(x) is list or type(x) is tuple:
            return [static(v, False) for v in x]
        return fx_graph.encode_scalar(x)
    return json.dumps([op_name, [static(a, lift) for a in node.args],
                       [[k, static(v, lift)] for k, v in node.kwargs.items()],
                       _out_descs(node.out_metas)], separators=(",", ":"),
                      check_circular=False)


# static_scalar_ops -> {Node.static token: (the node's static text, lift)}: what a
# node's token stands for at a sync, in one lookup.
_NODE_INFOS: dict = {}
# Keys of the traces keyed before, by their content with the static texts unhashed:
# a sync whose trace has the same content as an earlier one (a training loop's every
# step) takes its key with one dict lookup (the content compared in full, in C) instead
# of writing the content out and hashing it (~0.4 ms of a 1074-node GPT step).
_KEYS: dict = {}
_KEYS_BUDGET = 1 << 21  # places and texts kept in _KEYS at most (~16 MiB of references)
_keys_size = 0


def _node_info(node: Node, static_scalar_ops, infos: dict) -> tuple[str, bool]:
    """(the node's static text, whether its floats are lifted), kept in `infos` (the
    table of `static_scalar_ops`) where its token stands for both."""
    _, op_name, name = _op_info(node.op)
    lift = name in SCALAR_INPUT_OPS and name not in static_scalar_ops
    token = node.static
    # A token stands for the float values of an op that lifts floats only while
    # they are lifted: an op made to keep them constant is described per node.
    if token is None or not (lift or name not in SCALAR_INPUT_OPS):
        return _static_text(node, op_name, lift), lift
    text = _TEXTS.get((token, lift))
    if text is None:
        if len(_TEXTS) >= _CACHE_LIMIT:
            _TEXTS.clear()
        text = _TEXTS[(token, lift)] = _static_text(node, op_name, lift)
    if len(infos) >= _CACHE_LIMIT:
        infos.clear()
    info = infos[token] = (text, lift)
    return info


def graph_key(targets: list[LazyValue], target: str, static_scalar_ops=frozenset(),
              nodes: list | None = None) -> tuple[str, list[LazyValue], list[float], int]:
    """(key, inputs, scalars, node count) of `build_graph(targets, static_scalar_ops)`'s
    graph for `target`, without building it: the same inputs and scalar values, and a
    key equal for two sets of targets iff their documents are equal (a function of the
    same content: ops, non-tensor arguments, which node or input each tensor argument
    is, the inputs' and outputs' shapes and dtypes, the number of scalar inputs). The
    key is not `fx_graph.structural_hash` of the document; the lazy device's graphs are
    cached by this one. `nodes`: a list that gets the graph's nodes, in order (what
    `pending_nodes(targets)` would give again)."""
    ordered = pending_nodes(targets)
    if nodes is not None:
        nodes.extend(ordered)
    node_index = {node.seq: i for i, node in enumerate(ordered)}
    input_index: dict[int, int] = {}
    inputs: list[LazyValue] = []
    input_texts: list[str] = []
    scalars: list[float] = []
    flat: list = []
    push = flat.append

    def where(x, lifted) -> None:
        # The places of the tensor arguments (and the lifted floats' values), in the
        # static text's order.
        t = type(x)
        if t is LazyValue:
            node = x.node
            if node is not None:
                push(node_index[node.seq])
                push(x.index)
                return
            x.check()
            i = input_index.get(id(x))
            if i is None:
                i = input_index[id(x)] = len(inputs)
                inputs.append(x)
                text = _INPUT_TEXTS.get(x.sig)
                if text is None:
                    text = _INPUT_TEXTS[x.sig] = json.dumps(_meta_desc(x.meta))
                input_texts.append(text)
            push(-1 - i)
        elif lifted and t is float:
            scalars.append(x)
        elif t is list or t is tuple:
            for v in x:
                where(v, False)

    infos = _NODE_INFOS.get(static_scalar_ops)
    if infos is None:  # (the set grows rarely: when a probe finds an op needs it)
        if len(_NODE_INFOS) >= 16:
            _NODE_INFOS.clear()
        infos = _NODE_INFOS[frozenset(static_scalar_ops)] = {}
    info_of = infos.get
    add_scalar = scalars.append
    for node in ordered:
        info = info_of(node.static)  # (a None token is never stored)
        if info is None:
            info = _node_info(node, static_scalar_ops, infos)
        text, lift = info
        push(text)
        for a in node.args:  # where(a, lift), its common cases inline
            t = type(a)
            if t is LazyValue:
                producer = a.node
                if producer is not None:
                    push(node_index[producer.seq])
                    push(a.index)
                else:
                    where(a, lift)
            elif t is float:
                if lift:
                    add_scalar(a)
            elif t is list or t is tuple:
                where(a, lift)
        if node.kwargs:
            for v in node.kwargs.values():
                where(v, lift)
    for value in targets:
        where(value, False)
    # `where` calls itself through its closure cell: a reference cycle that kept `inputs`
    # (and so every input value) alive until the next garbage collection (see build_graph).
    where = None  # noqa: F841
    content = (target, tuple(input_texts), len(scalars), tuple(flat))
    key = _KEYS.get(content)
    if key is None:
        canonical = repr((fx_graph.FORMAT, fx_graph.VERSION, input_texts, len(scalars), flat))
        key = "k" + hashlib.sha256(f"{target}\n{canonical}".encode()).hexdigest()[:15]
        _remember_key(content, key, len(flat) + len(input_texts))
    return key, inputs, scalars, len(ordered)


def _remember_key(content: tuple, key: str, size: int) -> None:
    global _keys_size
    if _keys_size + size > _KEYS_BUDGET:
        _KEYS.clear()
        _keys_size = 0
    _KEYS[content] = key
    _keys_size += size
