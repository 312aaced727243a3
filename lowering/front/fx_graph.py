"""The `fx` stage: a traced graph in a stable, serializable form.

The tracer records functional ATen ops. Here they are kept as a plain JSON
document (inputs with shape/dtype, scalar inputs, nodes with op name,
arguments and output metadata, outputs), because that one form serves three jobs: it is the input
of the structural hash (stable across runs: no object ids), it is the file
written to the dump folder and read back by `lazymlir-opt`, and it turns into
a `torch.fx.GraphModule` whose nodes carry the fake-tensor metadata that
torch-mlir's FX importer needs. We build the FX graph ourselves instead of
calling `torch.export`, which took over a second for a small module.

A graph may also name in-place updates, `"in_place": [[input, output], ...]`:
after a run, input `input` holds the value of output `output` (what a `copy_`
into a graph input means; see `in_place_pairs`).

References to values are `{"ref": [kind, index, output]}` with kind `input`
(a tensor input), `node` (output `output` of node `index`) or `scalar` (a
Python number passed at run time, so a changing learning rate does not change
the graph). In the FX graph a scalar input is a 0-d float64 placeholder read
with `aten.item`, which torch-mlir lowers to a `tensor.extract`.
"""

from __future__ import annotations

import hashlib
import json
import operator
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from . import symbolic

FORMAT = "lazymlir-fx"
VERSION = 2
SCALAR_DTYPE = torch.float64  # how scalar inputs cross the graph boundary

# The dtypes a graph may hold (name -> dtype); the tracer accepts exactly these.
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128)}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype '{name}' in FX graph file") from None


def encode_scalar(value: Any) -> Any:
    """JSON form of a non-tensor op argument (refs are encoded by the caller)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        # repr keeps every bit and spells inf/nan; JSON numbers cannot.
        return {"float": repr(value)}
    if isinstance(value, (list, tuple)):
        return [encode_scalar(v) for v in value]
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    raise TypeError(f"cannot record argument of type {type(value).__name__}: {value!r}")


def decode_scalar(value: Any) -> Any:
    if isinstance(value, list):
        return [decode_scalar(v) for v in value]
    if isinstance(value, dict):
        ((kind, payload),) = value.items()
        if kind == "float":
            return float(payload)
        if kind == "dtype":
            return dtype_from_name(payload)
        if kind == "device":
            return torch.device(payload)
        if kind in ("memory_format", "layout"):
            return getattr(torch, payload)
        raise ValueError(f"unknown argument kind '{kind}' in FX graph file")
    return value


def resolve_op(name: str) -> torch._ops.OpOverload:
    """'aten.add.Tensor' -> torch.ops.aten.add.Tensor."""
    namespace, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


def output_metas(graph: dict) -> list[tuple[list[int], torch.dtype]]:
    """(shape, dtype) of each graph output, in order."""
    metas = []
    for ref in graph["outputs"]:
        kind, index, out = ref["ref"]
        desc = graph["inputs"][index] if kind == "input" else graph["nodes"][index]["outputs"][out]
        metas.append((desc["shape"], dtype_from_name(desc["dtype"])))
    return metas


def in_place_pairs(graph: dict) -> list[tuple[int, int]]:
    """The graph's in-place updates a compiled graph may write straight into the input:
    (input, output) pairs of its "in_place" entry (torch.compile's parameter updates,
    lazymlir/dynamo.py) whose output is computed by the graph and has the input's
    shape and dtype; the caller copies the others into the input after the run
    (lazymlir/dynamo.py). At most one pair per input and per output."""
    pairs, inputs, outputs = [], set(), set()
    for input_index, output_index in graph.get("in_place", ()):
        kind, index, out = graph["outputs"][output_index]["ref"]
        if kind != "node" or input_index in inputs or output_index in outputs:
            continue
        desc, target = graph["nodes"][index]["outputs"][out], graph["inputs"][input_index]
        if desc["shape"] != target["shape"] or desc["dtype"] != target["dtype"]:
            continue
        pairs.append((input_index, output_index))
        inputs.add(input_index)
        outputs.add(output_index)
    return pairs


def structural_hash(graph: dict, target: str) -> str:
    """Hash of ops, shapes, dtypes and static arguments and target (never tensor values,
    never the values of scalar inputs)."""
    # check_circular=False only skips the encoder's cycle bookkeeping (a graph is a
    # tree): the text, and so the hash, is the same; it is ~40% faster.
    canonical = json.dumps(graph, sort_keys=True, separators=(",", ":"), check_circular=False)
    return hashlib.sha256(f"{target}\n{canonical}".encode()).hexdigest()[:16]


def dumps(graph: dict) -> str:
    return json.dumps(graph, indent=1)


def loads(text: str) -> dict:
    graph = json.loads(text)
    if not isinstance(graph, dict) or graph.get("format") != FORMAT:
        raise ValueError(f"not a lazymlir FX graph file (expected \"format\": \"{FORMAT}\")")
    return graph


def to_graph_module(graph: dict) -> torch.fx.GraphModule:
    """Rebuild an FX GraphModule with FakeTensor `val` metadata on every node."""
    fake_mode = symbolic.fake_mode_for(graph)
    sizes = symbolic.SymbolicGraph(graph, fake_mode) if symbolic.is_dynamic(graph) else None
    fx = torch.fx.Graph()
    inputs = []
    cpu = torch.device("cpu")
    with fake_mode:
        def fake(meta: dict) -> torch.Tensor:
            if sizes is not None:  # SymInt sizes (symbolic.py): made in the mode
                return torch.empty(sizes.shape(meta["shape"]),
                                   dtype=dtype_from_name(meta["dtype"]))
            # A FakeTensor over a meta tensor made outside the mode: a quarter of the
            # time of torch.empty through the mode's dispatch (28 against 106 us; an
            # AdamW step's graph makes ~1100 of them).
            with unset_fake_temporarily():
                meta_tensor = torch.empty(meta["shape"], dtype=dtype_from_name(meta["dtype"]),
                                          device="meta")
            return FakeTensor(fake_mode, meta_tensor, cpu)

        def convert(source: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
            node = fx.call_function(torch.ops.aten._to_copy.default, (source,), {"dtype": dtype})
            node.meta["val"] = torch.empty(source.meta["val"].shape, dtype=dtype)
            return node

        # Bools cross the graph boundary as uint8 (same bytes as torch.bool):
        # LLVM's memref lowering cannot store i1 buffers.
        for i, meta in enumerate(graph["inputs"]):
            node = fx.placeholder(f"arg{i}")
            if meta["dtype"] == "bool":
                node.meta["val"] = fake({**meta, "dtype": "uint8"})
                node = convert(node, torch.bool)
            else:
                node.meta["val"] = fake(meta)
            inputs.append(node)
        scalars = []
        for i, _ in enumerate(graph.get("scalars", [])):
            holder = fx.placeholder(f"scalar{i}")
            holder.meta["val"] = torch.empty((), dtype=SCALAR_DTYPE)
            item = fx.call_function(torch.ops.aten.item.default, (holder,))
            item.meta["val"] = 1.0  # any float: the importer needs only its type
            scalars.append(item)
        results: list[list[torch.fx.Node]] = []

        def arg(value: Any) -> Any:
            if isinstance(value, dict) and "sym" in value:
                return sizes.size_arg(fx, inputs, value["sym"])
            if isinstance(value, dict) and "ref" in value:
                kind, index, out = value["ref"]
                if kind == "scalar":
                    return scalars[index]
                return inputs[index] if kind == "input" else results[index][out]
            if isinstance(value, list):
                return [arg(v) for v in value]
            return decode_scalar(value)

        for node_desc in graph["nodes"]:
            op = resolve_op(node_desc["op"])
            args = tuple(arg(a) for a in node_desc["args"])
            kwargs = {k: arg(v) for k, v in node_desc["kwargs"].items()}
            if None in node_desc["outputs"]:
                args, kwargs, outs = _unmask_outputs(op, args, kwargs)
            else:
                outs = [fake(m) for m in node_desc["outputs"]]
            call = fx.call_function(op, args, kwargs)
            if len(op._schema.returns) == 1 and not _returns_list(op):
                call.meta["val"] = outs[0]
                results.append([call])
            else:
                call.meta["val"] = tuple(outs) if not _returns_list(op) else list(outs)
                items = []
                for k, out in enumerate(outs):
                    item = fx.call_function(operator.getitem, (call, k))
                    item.meta["val"] = out
                    items.append(item)
                results.append(items)
        outputs = [arg(o) for o in graph["outputs"]]
        outputs = [convert(o, torch.uint8) if o.meta["val"].dtype == torch.bool else o
                   for o in outputs]
        fx.output(tuple(outputs))
    return torch.fx.GraphModule(torch.nn.Module(), fx)


def _unmask_outputs(op, args: tuple, kwargs: dict):
    """A node with outputs nobody asked for (None in its outputs, e.g. the bias
    gradient of `convolution_backward` for a conv without bias): torch-mlir
    lowers these ops with every result present, so ask for all of them
    (`output_mask` all true; the extra results go unused and are removed as dead
    code) and take their shapes from the op's meta kernel."""
    names = [a.name for a in op._schema.arguments]
    if "output_mask" not in names:
        raise ValueError(f"{op} has a None output but no output_mask argument")
    index = names.index("output_mask")
    if "output_mask" in kwargs:
        kwargs = {**kwargs, "output_mask": [True] * len(kwargs["output_mask"])}
    else:
        args = (*args[:index], [True] * len(args[index]), *args[index + 1:])

    outs = op(*meta_values(args), **meta_values(kwargs))
    return args, kwargs, list(outs)


def meta_values(x):
    """`x` with every fx.Node replaced by its `meta["val"]` (fake tensor), recursively."""
    if isinstance(x, torch.fx.Node):
        return x.meta["val"]
    if isinstance(x, (list, tuple)):
        return type(x)(meta_values(v) for v in x)
    if isinstance(x, dict):
        return {k: meta_values(v) for k, v in x.items()}
    return x


def _returns_list(op: torch._ops.OpOverload) -> bool:
    returns = op._schema.returns
    return len(returns) == 1 and str(returns[0].type).startswith("List[")
