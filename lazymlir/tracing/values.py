"""Lazy values and the inner lazy tensor, whose ops are recorded.

Users never hold an inner tensor directly: every `lazy_mlir` tensor they see is
a PyTorch FunctionalTensorWrapper (functionalization runs above us), and the
wrapper's inner tensor is a `LazyTensor`: a storage-less TensorImpl of the
PrivateUse1 key made by the C++ dispatch entry (native_entry.cpp), which holds
the tensor's `LazyValue` and is the kernel of every op on it. So the tracer only
ever sees functional ATen ops (`add.Tensor`, `select_copy.int`, `select_scatter`, ...).

A `LazyTensor` points at a `LazyValue`, an SSA value in one of four states:
pending (made by a `Node` of the trace), running (its graph was launched by
`mark_step()` and runs in the background: `run` is set until it ends),
materialized (holding target data), or failed (its graph failed to compile or
run: reading it raises that error). Only a sync point reads `data`, after
waiting for the value's run (tracing/materialize.py).
Values are immutable, which functionalization guarantees, so several tensors
may share one value (detach, clone, same-dtype copies) without copying.
The C++ entry makes `Node`s and `LazyValue`s itself, writing their __slots__:
a field added here must be set there too.
"""

from __future__ import annotations

import itertools

import torch

from . import native

DEVICE = "lazy_mlir:0"  # a string: torch.device() needs PrivateUse1 renamed first
# The same device as an object (PrivateUse1 is lazy_mlir once registered): parsing
# the string costs about a microsecond per tensor made.
TORCH_DEVICE = torch.device("privateuseone", 0)
_native = native.load()
# Nodes and values are not tracked by Python's garbage collector (native_entry.cpp's
# new_object says why): they form no reference cycle.
_untrack = _native.untrack

node_ids = itertools.count()  # Node.seq (the C++ entry draws from it too)


def node_seq_mark() -> int:
    """A sequence number that no node has: every node made after this call has a
    larger `seq` (the decomposition templates use it to find what a call recorded)."""
    return next(node_ids)


class Node:
    """One recorded functional op. `args`/`kwargs` hold LazyValues where tensors were.

    `static`: a token shared by the nodes whose op, non-tensor arguments (all but
    lifted floats) and output shapes/dtypes are equal (the recorder's shape-cache
    entry, a decomposition template's step), or None; graph.py keys the structural
    hash's per-node text by it, so a node's text is built once per token."""

    __slots__ = ("op", "args", "kwargs", "out_metas", "seq", "static")

    def __init__(self, op, args, kwargs, out_metas, static=None):
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.out_metas = out_metas  # meta-device tensors, one per tensor output
        self.seq = next(node_ids)  # creation order = a valid topological order
        self.static = static
        _untrack(self)  # (as the C++ entry's nodes: native_entry.cpp's new_object says why)


_static_tokens = itertools.count(1)


def static_token() -> int:
    """A new Node.static token (never reused in the process)."""
    return next(_static_tokens)


# Shape signatures: (shape, dtype) -> a small int, the tracer's shape-cache key for a
# tensor argument (hashing an int is cheaper than hashing a shape tuple per op). Ids
# are never reused, so clearing the table cannot make an old cache key match.
_signatures: dict = {}
_signature_ids = itertools.count()


def signature(shape, dtype) -> int:
    key = (tuple(shape), dtype)
    sig = _signatures.get(key)
    if sig is None:
        if len(_signatures) >= 1 << 20:
            _signatures.clear()
        sig = _signatures[key] = next(_signature_ids)
    return sig


class LazyValue:
    """An immutable tensor value: pending (node, index), running (run), materialized
    (data) or failed (error).

    `sig` is the signature() of its shape and dtype."""

    __slots__ = ("meta", "node", "index", "data", "error", "sig", "run", "__weakref__")

    def __init__(self, meta: torch.Tensor, node: Node | None = None, index: int = 0, data=None,
                 sig: int | None = None):
        self.meta = meta
        self.node = node
        self.index = index
        self.data = data
        self.error: BaseException | None = None
        self.sig = signature(meta.shape, meta.dtype) if sig is None else sig
        self.run = None  # execution.runs.Run computing it in the background
        _untrack(self)  # (as Node's)

    @property
    def pending(self) -> bool:
        return self.node is not None

    def launched(self, run) -> None:
        """Its graph is built and queued: no longer pending, not yet computed."""
        self.run = run
        self.node = None

    def materialized(self, data) -> None:
        # Dropping the node releases the upstream trace once nothing else needs it.
        # `run` last: a reader that finds it None finds the data (the execution thread
        # binds background results).
        self.data = data
        self.node = None
        self.run = None

    def failed(self, error: BaseException) -> None:
        # No traceback kept: it would hold the frames (and their tensors) alive. The
        # error's chained exceptions keep theirs, whose frames may hold this value: it
        # is tracked again, so that a collection can free such a cycle.
        self.error = error.with_traceback(None)
        _native.track(self)
        self.node = None
        self.run = None

    def check(self) -> None:
        """Raise the error of the graph that failed to produce this value."""
        if self.error is not None:
            raise self.error


class LazyTensor(torch.Tensor):
    """Inner tensor of a lazy_mlir FunctionalTensorWrapper: a C++ tensor of the entry's
    (`LazyTensor(value)` asks it for one), with this class when Python sees it."""

    # Ops called on inner tensors (decompositions, the in-place and foreach routes) go
    # straight to the dispatcher: Tensor's default __torch_function__ ran a Python call
    # per op and per attribute read (`.shape`, `.dtype`).
    __torch_function__ = torch._C._disabled_torch_function_impl

    # The value lives in the C++ tensor, so a tensor PyTorch hands Python (its Python
    # object may be made long after the tensor) still has it.
    _lazy = property(_native.value_of, _native.set_value)

    @staticmethod
    def __new__(cls, value: LazyValue):
        # No strides: lazy values are contiguous.
        return _native.make(value)

    def __repr__(self) -> str:  # never syncs: used in error messages and debuggers
        value = self._lazy
        state = "pending" if value.pending else "running" if value.run is not None else \
            ("failed" if value.error else "materialized")
        return f"LazyTensor({tuple(self.shape)}, {self.dtype}, {state})"


# An inner tensor's value (None for any other tensor), and the tensor as a LazyTensor
# (PyTorch's own boxing, e.g. torch._from_functional_tensor, may hand Python a plain
# torch.Tensor object for it).
value_of = _native.value_of
set_value = _native.set_value
is_lazy = _native.is_lazy
as_lazy = _native.as_lazy


def inner(wrapper: torch.Tensor) -> LazyTensor:
    """The inner tensor of a lazy_mlir FunctionalTensorWrapper."""
    return _native.as_lazy(torch._from_functional_tensor(wrapper))


def meta_like(shape, dtype) -> torch.Tensor:
    """Contiguous meta tensor: lazy values are always dense and contiguous."""
    return torch.empty(tuple(shape), dtype=dtype, device="meta")


def to_meta(x):
    """An op argument as PyTorch's meta kernels take it: tensors (lazy or host) as meta
    tensors, the lazy device as the meta device, lists and tuples item by item."""
    t = type(x)
    if t is LazyTensor:
        return x._lazy.meta
    if t is LazyValue:
        return x.meta
    if t is list or t is tuple:
        return t(to_meta(v) for v in x)
    if isinstance(x, torch.Tensor):
        return meta_like(x.shape, x.dtype)
    if isinstance(x, torch.device) and x.type == "lazy_mlir":
        return torch.device("meta")
    return x


# ------------------------------------------------------------ live tensors
# The inner tensors made in the current session are held weakly by the C++ entry (a
# new session starts a new list): mark_step materializes the pending ones.


def live_tensors() -> list[LazyTensor]:
    """The live inner tensors of the current session, in creation order."""
    return _native.live_tensors()


def live_pending_values() -> list[LazyValue]:
    """The pending values of the live inner tensors, each once, in trace order."""
    found = []
    for value in _native.live_pending():
        # One read of `node`: another thread's sync may launch the value (node -> None).
        node = value.node
        if node is not None:
            found.append((node.seq, value.index, value))
    # Trace order, not creation order of tensors: the graph (and so its hash) must not
    # depend on which tensors happen to be alive.
    found.sort(key=lambda e: e[:2])
    return [value for _, _, value in found]
