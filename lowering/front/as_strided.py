"""`as_strided` in an FX graph with FakeTensor metadata, made to address a storage root.

`as_strided(v, size, stride, offset)` addresses the storage under `v`, not `v`'s
elements: in an AOTAutograd graph `v` may be a slice, a transpose, a select of an
input or a channels_last clone. The fx-stage form (fx_graph.py) keeps only shapes and
dtypes, so each node's value becomes dense and contiguous there, and the storage
is lost. Here, while the graph still has its fake tensors, each `as_strided` is made
to read its root: the node whose storage `v` shares, found through the views' args
(as torch-mlir's importer finds it), taken in storage order (the root itself when it
is contiguous, else a permute of it) with the root's storage offset taken off.
A root that is not dense (gaps or overlap) is left as it was.
"""

from __future__ import annotations

import torch
# Dense: a permutation of a contiguous layout (no gaps, no overlap), as PyTorch decides it.
from torch._prims_common import (
    is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense,
)
import torch.fx

from .fx_rewrite import Builder, fake_mode

aten = torch.ops.aten
_AS_STRIDED = (aten.as_strided.default, aten.as_strided_copy.default)


def _val(node):
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _storage_parent(node: torch.fx.Node):
    """The tensor argument of `node` that shares its storage, or None."""
    value = _val(node)
    if value is None:
        return None
    storage = value.untyped_storage()
    for arg in node.args:
        candidates = arg if isinstance(arg, (list, tuple)) else [arg]
        for item in candidates:
            other = _val(item)
            if other is not None and other.untyped_storage() is storage:
                return item
    return None


def _root(node: torch.fx.Node) -> torch.fx.Node:
    while True:
        parent = _storage_parent(node) if node.op == "call_function" else None
        if parent is None:
            return node
        node = parent


def address_storage_roots(gm: torch.fx.GraphModule) -> bool:
    """Rewrite `gm`'s as_strided nodes in place (see the module docstring); True if any
    changed."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _AS_STRIDED:
            continue
        source = node.args[0]
        view = _val(source)
        if view is None:
            continue
        root = _root(source)
        base = _val(root)
        if root is source and base.is_contiguous() and base.storage_offset() == 0:
            continue  # already addresses a dense row-major storage
        if not is_non_overlapping_and_dense(base):
            continue
        size, stride = node.args[1], node.args[2]
        offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
        if offset is None:
            offset = view.storage_offset()
        offset -= base.storage_offset()
        with gm.graph.inserting_before(node):
            ordered = root
            if not base.is_contiguous():
                strides = base.stride()
                order = sorted(range(base.dim()), key=lambda d: -strides[d])
                ordered = gm.graph.call_function(aten.permute.default, (root, order))
                ordered.meta["val"] = base.permute(order).contiguous()
            replacement = gm.graph.call_function(node.target, (ordered, size, stride, offset))
        replacement.meta.update(node.meta)
        node.replace_all_uses_with(replacement)
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return changed


def as_gathers(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Each `as_strided` of a graph value (dense and contiguous there) as a gather of its
    flattened elements at indices computed in the graph: offset + sum over dims of
    arange(size) * stride. torch-mlir's importer lowers `as_strided` to a gather by
    constant index tensors (`dense_resource` blobs), which the gpu stages do not carry
    into kernel modules (the cuda target failed to compile it)."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"
             and n.target in _AS_STRIDED and _val(n.args[0]) is not None]
    mode = fake_mode(gm)
    if not nodes or mode is None:
        return gm
    for node in nodes:
        source, size, stride = node.args[0], list(node.args[1]), list(node.args[2])
        offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
        offset = offset or 0
        b = Builder(gm.graph, node, mode)
        index = None
        for d, (n, s) in enumerate(zip(size, stride)):
            shape = [1] * len(size)
            shape[d] = n
            term = b(aten.view.default, b(aten.mul.Scalar,
                                          b(aten.arange.default, n, dtype=torch.int64), s),
                     shape)
            index = term if index is None else b(aten.add.Tensor, index, term)
        flat = b(aten.view.default, source, [-1])
        if index is None:  # a 0-d view: the element at the offset
            gathered = b(aten.select.int, flat, 0, offset)
        else:
            if offset:
                index = b(aten.add.Scalar, index, offset)
            gathered = b(aten.index.Tensor, flat, [index])
        node.replace_all_uses_with(gathered)
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    return gm
