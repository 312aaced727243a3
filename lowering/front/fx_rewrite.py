"""Helpers for FX-level rewrites of a graph before torch-mlir imports it.

A rewrite builds ATen nodes in front of the node it replaces, each with FakeTensor
`val` metadata computed by the graph's fake mode (lowering.front.numerics and its
rule modules use them).
"""

from __future__ import annotations

import torch
import torch.fx

from .fx_graph import meta_values

aten = torch.ops.aten


class Builder:
    """Inserts nodes before `anchor`, with FakeTensor `val` metadata."""

    def __init__(self, graph: torch.fx.Graph, anchor: torch.fx.Node, mode, created=None):
        self.graph, self.anchor, self.mode = graph, anchor, mode
        self.created = set() if created is None else created

    def __call__(self, op, *args, **kwargs) -> torch.fx.Node:
        with self.graph.inserting_before(self.anchor):
            node = self.graph.call_function(op, args, kwargs)
        self.created.add(node)
        with self.mode:
            node.meta["val"] = op(*meta_values(args), **meta_values(kwargs))
        return node


def meta_val(x):
    """A node's FakeTensor (or scalar) value; None for a non-node."""
    return x.meta.get("val") if isinstance(x, torch.fx.Node) else None


def is_tensor(x, *dtypes) -> bool:
    val = meta_val(x)
    return isinstance(val, torch.Tensor) and (not dtypes or val.dtype in dtypes)


def fake_mode(gm: torch.fx.GraphModule):
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and hasattr(val, "fake_mode"):
            return val.fake_mode
    return None


def replace(node: torch.fx.Node, new: torch.fx.Node, created: set) -> None:
    """Uses of `node` now use `new`, except in the nodes built to compute `new`."""
    node.replace_all_uses_with(new, delete_user_cb=lambda user: user not in created)
    if not node.users:
        node.graph.erase_node(node)


def cast(b: Builder, x: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
    if meta_val(x).dtype == dtype:
        return x
    return b(aten._to_copy.default, x, dtype=dtype)


def reduced_dims(x: torch.fx.Node, dims) -> list[int]:
    rank = meta_val(x).dim()
    if dims is None or len(dims) == 0 or rank == 0:
        return list(range(rank))  # a 0-d tensor reduced over dim 0 or -1: nothing to block
    return sorted(d % rank for d in dims)


def position(node: torch.fx.Node) -> int:
    """Where `node` stands in its graph (to find the last of several users)."""
    return list(node.graph.nodes).index(node)
