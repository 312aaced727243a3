"""Builders of fx-stage graphs (lowering/front/fx_graph.py's JSON) for the lit tests of
this folder; not a test itself (lit.cfg.py excludes it)."""
import json

from lazymlir.lowering.front.fx_import import import_fx
from lazymlir.lowering.mlir_runner import print_module


def graph(inputs, nodes, outputs):
    """float32 graph text: `inputs` are shapes, `nodes` (op, args, output shape) triples."""
    return json.dumps({
        "format": "lazymlir-fx", "version": 1,
        "inputs": [{"shape": s, "dtype": "float32"} for s in inputs],
        "nodes": [{"op": op, "args": args, "kwargs": {}, "outputs": [{"shape": o, "dtype": "float32"}]}
                  for op, args, o in nodes],
        "outputs": outputs})


def inp(i):
    return {"ref": ["input", i, 0]}


def node(i):
    return {"ref": ["node", i, 0]}


def run(name, text):
    """Print a TEST label and the graph imported to the torch dialect."""
    print(f"TEST: {name}")
    print(print_module(import_fx(text)))
