"""Negative `dim` arguments of scatter ops become their positive form before import.

torch-mlir's TMTensor lowering of the scatter family takes `dim` as given: with a
negative one (`x.scatter(-1, ...)`, and so every `F.one_hot`, which scatters along -1)
the compiler crashed with SIGSEGV in the `linalg` stage, and the op ran with eager
fallback after a compiler restart. Eager accepts any dim in [-rank, rank); the
positive form is the same op, so it is rewritten here, on both entry points' graphs.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

# op -> position of its `dim` argument (the indexed tensor is argument 0)
_DIM_AT = {
    aten.scatter.value: 1, aten.scatter.src: 1, aten.scatter.reduce: 1,
    aten.scatter.value_reduce: 1, aten.scatter_add.default: 1,
    aten.scatter_reduce.two: 1,
}


def normalize(gm: torch.fx.GraphModule) -> int:
    """Rewrite `gm` in place; returns how many arguments were changed."""
    changed = 0
    for node in gm.graph.nodes:
        at = _DIM_AT.get(node.target) if node.op == "call_function" else None
        if at is None or len(node.args) <= at:
            continue
        dim = node.args[at]
        base = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
        if type(dim) is not int or dim >= 0 or base is None:
            continue
        rank = max(base.dim(), 1)   # a 0-d tensor takes dim 0 or -1
        node.args = (*node.args[:at], dim + rank, *node.args[at + 1:])
        changed += 1
    if changed:
        gm.recompile()
    return changed
