"""Python numbers in Tensor slots torch-mlir's importer rejects: the first operand of
`aten.sub.Tensor` (becomes `aten.rsub.Scalar`) and the second of `aten.div.Tensor_mode`
(becomes `aten.div.Scalar_mode`).

PyTorch's reference decompositions call `aten.sub.Tensor(n, t)` with a number `n`
(linspace and logspace with tensor ends: `end - step * (steps - 1 - iota)`, where `end`
is a float lifted to a scalar graph input), which the traced graph keeps as called;
torch-mlir's FX importer cannot put a number where the schema has a Tensor `self`
("Unable to parse module assembly" in the `torch` stage), so the op ran with eager
fallback. `rsub.Scalar(t, n, alpha)` is `n - alpha * t`, the same op with the number in
its Scalar slot (and a number keeps a wrapped number's type promotion there).

`a // 0.3` and `torch.div(a, 0.3, rounding_mode="trunc")` are traced as
`div.Tensor_mode(a, n)`, which failed the same way ("operand #1 must be Any Torch tensor
type, but got '!torch.float'") and ran with eager fallback, for every dtype.
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
        if node.op != "call_function":
            continue
        if node.target is aten.sub.Tensor and node.args and _is_number(node.args[0]):
            node.target = aten.rsub.Scalar
            node.args = (node.args[1], node.args[0], *node.args[2:])
            changed += 1
        elif node.target is aten.div.Tensor_mode and len(node.args) > 1 \
                and _is_number(node.args[1]):
            node.target = aten.div.Scalar_mode
            changed += 1
    if changed:
        gm.recompile()
    return changed
