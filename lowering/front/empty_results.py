"""Ops whose result has no elements become `aten.empty` of the result's shape.

A zero-element result needs no computation, and some of torch-mlir's lowerings
divide by a dimension: `view` of a tensor with a 0 in its shape crashed the
compiler with SIGFPE in the `linalg` stage (so every zero-element reshape, common
in data-dependent code and in the fuzz tests, fell back to eager after a compiler
restart). Replacing such nodes before import keeps them in the graph, gives eager's
result (the shape and dtype, no values) and removes the division at its root for
every op, not just `view`.
"""

from __future__ import annotations

import operator

import torch

aten = torch.ops.aten


def replace_empty_results(gm: torch.fx.GraphModule) -> int:
    """Rewrite `gm` in place; returns how many nodes were replaced."""
    graph = gm.graph
    replaced = 0
    for node in list(graph.nodes):
        if not _empty_tensor_result(node):
            continue
        val = node.meta["val"]
        with graph.inserting_before(node):
            empty = graph.call_function(aten.empty.memory_format, (list(val.shape),),
                                        {"dtype": val.dtype, "device": torch.device("cpu")})
        empty.meta["val"] = val
        node.replace_all_uses_with(empty)
        replaced += 1
    if replaced:
        # The replaced nodes (and what only they read) are dead now. FX keeps impure
        # nodes (asserts, in-place ops), which is what the graph's effects need.
        graph.eliminate_dead_code()
        graph.lint()
        gm.recompile()
    return replaced


def _empty_tensor_result(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is aten.empty.memory_format:
        return False
    if node.target is not operator.getitem and (
            not isinstance(node.target, torch._ops.OpOverload)
            or node.target._schema.is_mutable):
        return False
    val = node.meta.get("val")
    # Concrete shapes only: a symbolic size (a dynamic graph) is not known to be 0.
    return (isinstance(val, torch.Tensor) and all(type(d) is int for d in val.shape)
            and val.numel() == 0)
