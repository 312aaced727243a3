"""Direct routes of the view copies functionalization emits most that torch-mlir's
decomposition table covers: `t_copy` and `transpose_copy` (one `permute`, or an `alias`
where nothing moves), `expand_copy` (one `expand`) and `_unsafe_view` (one `view`).

Their decompositions record exactly that one node; the decomposition route keys a
template per call and replays it, about twice a leaf recorder's cost, for ops a
training step calls at every weight (a GPT step: ~90 `t_copy`/`transpose_copy`). Here
the node is recorded by the view op's own recorder, so the graph is the one the
template would have recorded. A call these do not cover (an unusual argument, an
out-of-range dim: the decomposition raises eager's error) returns NotImplemented, and
the decomposition route takes it.
"""

from __future__ import annotations

import torch

from .recording import record
from .values import is_lazy

aten = torch.ops.aten


def _t_copy(args, kwargs):
    x = args[0]
    if len(args) != 1 or kwargs or not is_lazy(x):
        return NotImplemented
    if x.dim() < 2:
        return record(aten.alias.default, (x,), {})
    return record(aten.permute.default, (x, [1, 0]), {})


def _transpose_copy(args, kwargs):
    if len(args) != 3 or kwargs or not is_lazy(args[0]):
        return NotImplemented
    x, first, second = args
    rank = x.dim()
    if type(first) is not int or type(second) is not int or rank == 0 \
            or not (-rank <= first < rank and -rank <= second < rank):
        return NotImplemented
    first, second = first % rank, second % rank
    if first == second:
        return record(aten.alias.default, (x,), {})
    dims = list(range(rank))
    dims[first], dims[second] = second, first
    return record(aten.permute.default, (x, dims), {})


def _expand_copy(args, kwargs):
    if len(args) != 2 or kwargs or not is_lazy(args[0]):
        return NotImplemented
    return record(aten.expand.default, (args[0], args[1]), {})


def _unsafe_view(args, kwargs):
    if len(args) != 2 or kwargs or not is_lazy(args[0]):
        return NotImplemented
    return record(aten.view.default, (args[0], args[1]), {})


DIRECT = True  # False: the decomposition route takes every call (benchmarks compare)

_DIRECT = {
    aten.t_copy.default: _t_copy,
    aten.transpose_copy.int: _transpose_copy,
    aten.expand_copy.default: _expand_copy,
    aten._unsafe_view.default: _unsafe_view,
}


def route(func, decomposed):
    """The route of `func` if it is one of these ops (`decomposed`, its decomposition
    route, takes the calls they do not cover), else None."""
    direct = _DIRECT.get(func)
    if direct is None:
        return None

    def view_copy(f, args, kwargs):
        out = direct(args, kwargs) if DIRECT else NotImplemented
        return decomposed(f, args, kwargs) if out is NotImplemented else out
    return view_copy
