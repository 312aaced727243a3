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
from .values import LazyTensor, is_lazy, set_value, value_of

aten = torch.ops.aten


def inplace(func, args, kwargs):
    """An in-place op below functionalization (decompositions use some): run the
    functional form and rebind the inner tensor to the new value. Nothing here
    aliases (functionalization above us owns views), so rebinding is exact."""
    self = args[0]
    start = state.capture_start
    if start >= 0 and (value_of(self).node is None or value_of(self).node.seq <= start):
        state.impure += 1  # rebinds a tensor from outside a captured decomposition
    name = func._schema.name.removeprefix("aten::")
    if name == "copy_":
        result = special_ops.copy(self, args[1])
    else:
        functional = getattr(getattr(aten, name.removesuffix("_")), func._overloadname)
        result = functional(*args, **kwargs)
        if result.dtype != self.dtype:
            result = record(aten._to_copy.default, (result,), {"dtype": self.dtype})
    set_value(self, value_of(result))
    return self


# base op -> (its positional argument count, the keyword its scalar goes to)
_FOREACH_KEYWORD = {"addcmul": (3, "value"), "addcdiv": (3, "value")}


def foreach(func, args, kwargs, dispatch=None):
    """`_foreach_op(lists...)` -> one `op` per element (optimizers use these).

    `dispatch(overload, args, kwargs)`, when given, is the tracer's own entry: each
    element op goes to it with its overload resolved here (once per argument kinds),
    not back through PyTorch's dispatcher, whose C++ -> Python entry (argument
    boxing, `__torch_dispatch__` lookup) and the packet's overload resolution cost
    more than recording the element (an AdamW step has ~9 foreach ops per parameter).
    The dispatcher hands `__torch_dispatch__` the caller's arguments as they were
    passed here (scalars unwrapped, keyword-only arguments as keywords), so the
    nodes recorded are the same."""
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
        overload = None if dispatch is None or not DIRECT_ELEMENTS else \
            _element_overload(packet, element_args, element_kwargs)
        if overload is None:
            results.append(packet(*element_args, **element_kwargs))
        else:
            results.append(dispatch(overload, tuple(element_args), element_kwargs))
    returns = func._schema.returns
    return results if returns else None


def element_op(func, args, kwargs):
    """The op of foreach op `func`'s element calls, given element 0's arguments
    (`args`/`kwargs`: each list argument's first element): for the C++ entry, which
    splits functional foreach calls itself (native_entry.cpp's foreach route). None
    where this module's `foreach` would go back through the dispatcher."""
    base = func._schema.name.removeprefix("aten::_foreach_")
    packet = getattr(aten, base, None)
    if packet is None:
        return None
    element_args, element_kwargs = list(args), dict(kwargs)
    keyword = _FOREACH_KEYWORD.get(base)
    if keyword is not None and len(element_args) > keyword[0]:
        element_kwargs[keyword[1]] = element_args.pop()
    try:
        return _element_overload(packet, element_args, element_kwargs)
    except RuntimeError:  # no overload takes them: `foreach` raises the dispatcher's error
        return None


_OVERLOADS: dict = {}  # (packet id, argument kinds) -> the OpOverload they resolve to
# False sends element ops back through the dispatcher, as before (benchmarks compare).
DIRECT_ELEMENTS = True


def _element_overload(packet, args, kwargs):
    """The overload of `packet` that `packet(*args, **kwargs)` calls, or None where the
    dispatcher would do more than call it (an argument that is not a LazyTensor, a
    number or None: a host tensor, a list)."""
    key = [id(packet)]
    for a in args:
        kind = LazyTensor if is_lazy(a) else type(a)
        if kind is not LazyTensor and kind is not float and kind is not int \
                and kind is not bool and a is not None:
            return None
        key.append(kind)
    for name, a in kwargs.items():
        kind = LazyTensor if is_lazy(a) else type(a)
        if kind is not LazyTensor and kind is not float and kind is not int \
                and kind is not bool and a is not None:
            return None
        key.append(name)
        key.append(kind)
    key = tuple(key)
    overload = _OVERLOADS.get(key)
    if overload is None:
        name = torch._C._jit_resolve_packet(packet._qualified_op_name, *args, **kwargs)
        overload = _OVERLOADS[key] = getattr(packet, name)
    return overload
