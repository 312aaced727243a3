"""A Python number as the first operand of `aten.sub.Tensor` becomes `aten.rsub.Scalar`.

PyTorch's reference decompositions call `aten.sub.Tensor(n, t)` with a number `n`
(linspace and logspace with tensor ends: `end - step * (steps - 1 - iota)`, where `end`
is a float lifted to a scalar graph input), which the traced graph keeps as called;
torch-mlir's FX importer cannot put a number where the schema has a Tensor `self`
("Unable to parse module assembly" in the `torch` stage), so the op ran with eager
fallback. `rsub.Scalar(t, n, alpha)` is `n - alpha * t`, the same op with the number in
its Scalar slot (and a number keeps a wrapped number's type promotion there).
"""

from __future__ import annotations

import numbers

import torch

aten = torch.ops.aten


def _is_number(arg) -> bool:
    """A Python number, or a graph input holding one (a float lifted to a scalar input)."""
    if isinstance(arg, torch.fx.Node):
        val = arg.meta.get("val")
        return val is not None and not isinstance(val, torch.Tensor)
    return isinstance(arg, numbers.Number)


def rewrite(gm: torch.fx.GraphModule) -> int:
    """Rewrite `gm` in place; returns how many nodes were changed."""
    changed = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.sub.Tensor:
            continue
        first = node.args[0] if node.args else None
        if not _is_number(first):
            continue
        node.target = aten.rsub.Scalar
        node.args = (node.args[1], first, *node.args[2:])
        changed += 1
    if changed:
        gm.recompile()
    return changed
