"""The Python dispatch entry: every functional ATen op on a LazyTensor that the C++
entry does not record itself is routed here.

The C++ entry (native_entry.cpp, the kernel of every op on inner tensors) records
the common case itself: an op whose route is its recorder, with arguments it can
key, and output shapes its cache knows. It calls `native_entry` with everything
else, its arguments boxed as PyTorch's Python dispatch boxes them, and asks
`native_op` once per op whether the op is such a leaf.
What an op needs is decided once per op and kept in `_ROUTES`:
1. ops with special meaning for a lazy device (device transfers, scalar reads,
   identities) have their own functions (special_ops.py);
2. in-place and `_foreach_` ops (decompositions below functionalization use
   them) are rewritten into functional ones (functional.py);
3. ops torch-mlir wants decomposed are decomposed with torch-mlir's own
   decomposition table (the pieces re-enter dispatch) once per signature;
   later calls replay a template of the nodes it recorded (decompose.py);
4. random ops become Philox arithmetic with seed/offset inputs (random_ops.py);
   data-dependent ops (and random ones given a generator) run eagerly (fallback.py);
5. everything else is recorded by the op's recorder: a Node is added to the
   trace (recording.py).

Routes are keyed by `id(func)` because `OpOverload.__hash__` is a Python
method. An op whose route is its recorder is a leaf: dispatch calls the
recorder directly, with no depth bookkeeping (a recorder never re-enters
dispatch). Tracing time is counted per top-level call (trace_state.py).
"""

from __future__ import annotations

from .. import session
from . import (decompose, failures, fallback, foreach_meta, functional, random_ops, recording,
               view_copies)
from .graph import SCALAR_INPUT_OPS
from .host_data import adopt, constant
from .special_ops import SPECIAL
from .trace_state import clock, count_trace_time, depth, flush_trace_time, state
from .values import LazyTensor, LazyValue, Node, native, node_ids

__all__ = ["dispatch", "depth", "flush_trace_time", "constant", "adopt"]


def _torch_dispatch(cls, func, types, args=(), kwargs=None):
    """The Python entry of a call (`__torch_dispatch__`'s signature; hot: a few
    microseconds)."""
    if kwargs is None:
        kwargs = {}
    try:
        # Keyed by id: OpOverload.__hash__ is a Python method (recording.keep_alive keeps
        # func alive).
        recorder = _LEAVES.get(id(func))
        if recorder is not None:
            # A recorder never re-enters dispatch, so it needs no depth bookkeeping;
            # only a top-level call is timed (a nested one is inside a timed call).
            thread_state = state
            if thread_state.depth:
                return recorder(func, args, kwargs)
            began = clock()
            out = recorder(func, args, kwargs)
            count_trace_time(thread_state, began)
            return out
        return _dispatch_route(func, args, kwargs)
    except Exception as error:
        # Autograd runs backward for our device on its own thread, where an
        # exception from here would be lost: the outputs carry it instead.
        if not failures.in_backward():
            raise
        return failures.failed_outputs(func, args, kwargs, error)


def _dispatch_route(func, args, kwargs):
    route = _ROUTES.get(id(func))
    if route is None:
        route = _new_route(func)
        if route is recording.recorder_of(func):
            _LEAVES[id(func)] = route
    thread_state = state
    outer = thread_state.depth
    thread_state.depth = outer + 1
    if outer:
        try:
            return route(func, args, kwargs)
        finally:
            thread_state.depth = outer
    began = clock()
    try:
        return route(func, args, kwargs)
    finally:
        thread_state.depth = 0
        count_trace_time(thread_state, began)


def dispatch(func, args, kwargs):
    """Trace `func(*args, **kwargs)` as if it came through `__torch_dispatch__`."""
    return _torch_dispatch(LazyTensor, func, (), args, kwargs)


def _dispatch_element(func, args, kwargs):
    """A foreach route's element op, entered as the Python entry would enter it (a
    leaf's recorder directly, otherwise its route)."""
    recorder = _LEAVES.get(id(func))
    if recorder is not None:
        return recorder(func, args, kwargs)
    return _dispatch_route(func, args, kwargs)


def native_entry(func, args, kwargs):
    """The C++ entry's call of the Python tracer."""
    return _torch_dispatch(LazyTensor, func, (), args, kwargs)


def native_op(func):
    """For the C++ entry, once per op: (whether its route is its recorder, whether its
    floats are scalar graph inputs, the op its Nodes record)."""
    route = _ROUTES.get(id(func))
    if route is None:
        route = _new_route(func)
    leaf = route is recording.recorder_of(func)
    if leaf:
        _LEAVES[id(func)] = route
    return leaf, func._schema.name in SCALAR_INPUT_OPS, recording.node_op(func)


def native_foreach(func, args, kwargs):
    """For the C++ entry, once per functional foreach overload and argument kinds: the
    (qualified name, overload name) of its element op, given element 0's arguments."""
    overload = functional.element_op(func, args, kwargs)
    if overload is None:
        return None
    return overload._schema.name, overload._schema.overload_name


def install_kernels() -> int:
    """Make the C++ entry the PrivateUse1 kernel of every op without one (and the
    backend fallback); the number of kernels registered."""
    return native.load().register_kernels()


native.load().configure(LazyTensor, LazyValue, Node, node_ids, native_entry, native_op,
                        recording.native_shape_entry, vars(session), recording.NO_KWARGS)
native.load().configure_foreach(native_foreach)
# Functionalization's meta check of in-place _foreach_ ops, in microseconds
# (foreach_meta.py).
foreach_meta.install()


# ------------------------------------------------------------------ routes

_ROUTES: dict = {}      # id(func) -> route(func, args, kwargs)
_LEAVES: dict = {}      # id(func) -> route, for ops whose route is their recorder


def _new_route(func):
    route = _route(func)
    recording.keep_alive(func)
    _ROUTES[id(func)] = route
    return route


def _route(func):
    """How `func` is handled (decided once per op overload)."""
    special = SPECIAL.get(func)
    if special is not None:
        return lambda f, args, kwargs: special(*args, **kwargs)
    random = random_ops.ROUTES.get(func)
    if random is not None:  # before the decompositions: torch-mlir's table has some
        return random
    name = func._schema.name
    if name.startswith("aten::_foreach_"):
        # Element ops come straight back to this module's entry (functional.foreach).
        return lambda f, args, kwargs: functional.foreach(f, args, kwargs, _dispatch_element)
    if func._schema.is_mutable and name.endswith("_"):
        return functional.inplace
    decomposition = decompose.table().get(func)
    if decomposition is not None:
        decomposed = decompose.decomposer(func, decomposition)
        # t_copy, transpose_copy...: the one view their decomposition records, directly.
        return view_copies.route(func, decomposed) or decomposed
    reason = fallback.always_eager(func)
    if reason is not None:
        return lambda f, args, kwargs: fallback.run_eagerly(f, args, kwargs, reason)
    return recording.make_recorder(func)
