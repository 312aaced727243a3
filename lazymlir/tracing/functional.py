"""The functional-rewrite route: in-place and `_foreach_` ops below functionalization.

Functionalization above us turns user code functional, but decompositions and
optimizers that run below it still call in-place ops (`add_`, `copy_`) and
`_foreach_` ops. An in-place op becomes its functional form with the inner
tensor rebound to the result; a `_foreach_` op becomes one op per element.
"""

from __future__ import annotations

import torch

from . import special_ops
from .recording import record
from .trace_state import state

aten = torch.ops.aten


def inplace(func, args, kwargs):
    """An in-place op below functionalization (decompositions use some): run the
    functional form and rebind the inner tensor to the new value. Nothing here
    aliases (functionalization above us owns views), so rebinding is exact."""
    self = args[0]
    start = state.capture_start
    if start >= 0 and (self._lazy.node is None or self._lazy.node.seq <= start):
        state.impure += 1  # rebinds a tensor from outside a captured decomposition
    name = func._schema.name.removeprefix("aten::")
    if name == "copy_":
        result = special_ops.copy(self, args[1])
    else:
        functional = getattr(getattr(aten, name.removesuffix("_")), func._overloadname)
        result = functional(*args, **kwargs)
        if result.dtype != self.dtype:
            result = record(aten._to_copy.default, (result,), {"dtype": self.dtype})
    self._lazy = result._lazy
    return self


# base op -> (its positional argument count, the keyword its scalar goes to)
_FOREACH_KEYWORD = {"addcmul": (3, "value"), "addcdiv": (3, "value")}


def foreach(func, args, kwargs):
    """`_foreach_op(lists...)` -> one `op` per element (optimizers use these)."""
    base = func._schema.name.removeprefix("aten::_foreach_")
    packet = getattr(aten, base)
    lists = [a for a in args if isinstance(a, (list, tuple))]
    count = len(lists[0])
    results = []
    keyword = _FOREACH_KEYWORD.get(base)
    for i in range(count):
        element_args = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
        element_kwargs = kwargs
        if keyword is not None and len(element_args) > keyword[0]:
            # e.g. _foreach_addcmul_(self, t1, t2, value): addcmul takes `value`
            # by keyword only; a `.Tensor` overload passes the scalars as a tensor.
            scalar = element_args.pop()
            if isinstance(scalar, torch.Tensor):
                scalar = scalar[i].item() if scalar.dim() else scalar.item()
            element_kwargs = {**kwargs, keyword[1]: scalar}
        results.append(packet(*element_args, **element_kwargs))
    returns = func._schema.returns
    return results if returns else None
