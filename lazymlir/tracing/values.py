"""Lazy values and the inner lazy tensor: a wrapper subclass whose ops are recorded.

Users never hold a `LazyTensor` directly: every `lazy_mlir` tensor they see is
a PyTorch FunctionalTensorWrapper (functionalization runs above us), and the
wrapper's inner value is a `LazyTensor`. So the tracer only ever sees
functional ATen ops (`add.Tensor`, `select_copy.int`, `select_scatter`, ...).

A `LazyTensor` points at a `LazyValue`, an SSA value in one of four states:
pending (made by a `Node` of the trace), running (its graph was launched by
`mark_step()` and runs in the background: `run` is set until it ends),
materialized (holding target data), or failed (its graph failed to compile or
run: reading it raises that error). Only a sync point reads `data`, after
waiting for the value's run (tracing/materialize.py).
Values are immutable, which functionalization guarantees, so several tensors
may share one value (detach, clone, same-dtype copies) without copying.
"""

from __future__ import annotations

import itertools
import weakref

import torch

from .. import session

DEVICE = "lazy_mlir:0"  # a string: torch.device() needs PrivateUse1 renamed first
# The same device as an object (PrivateUse1 is lazy_mlir once registered): parsing
# the string costs about a microsecond per tensor made.
TORCH_DEVICE = torch.device("privateuseone", 0)
_make_wrapper = torch.Tensor._make_wrapper_subclass

_node_ids = itertools.count()


def node_seq_mark() -> int:
    """A sequence number that no node has: every node made after this call has a
    larger `seq` (the decomposition templates use it to find what a call recorded)."""
    return next(_node_ids)


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
        self.seq = next(_node_ids)  # creation order = a valid topological order
        self.static = static


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
        # No traceback kept: it would hold the frames (and their tensors) alive.
        self.error = error.with_traceback(None)
        self.node = None
        self.run = None

    def check(self) -> None:
        """Raise the error of the graph that failed to produce this value."""
        if self.error is not None:
            raise self.error


class LazyTensor(torch.Tensor):
    """Inner tensor of a lazy_mlir FunctionalTensorWrapper."""

    _lazy: LazyValue

    # Ops called on inner tensors (decompositions, the in-place and foreach routes) go
    # straight to __torch_dispatch__: Tensor's default __torch_function__ ran a Python
    # call per op and per attribute read (`.shape`, `.dtype`), and its one effect, making
    # outputs instances of the subclass, the tracer's outputs have already.
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, value: LazyValue):
        meta = value.meta
        # No strides: lazy values are contiguous, the default of a wrapper subclass.
        tensor = _make_wrapper(cls, meta.shape, dtype=meta.dtype, device=TORCH_DEVICE)
        tensor._lazy = value
        track(tensor)
        return tensor

    def __repr__(self) -> str:  # never syncs: used in error messages and debuggers
        value = self._lazy
        state = "pending" if value.pending else "running" if value.run is not None else \
            ("failed" if value.error else "materialized")
        return f"LazyTensor({tuple(self.shape)}, {self.dtype}, {state})"

    # __torch_dispatch__ is installed by the tracer (tracing/tracer.py), which
    # sits above this module.


def meta_like(shape, dtype) -> torch.Tensor:
    """Contiguous meta tensor: lazy values are always dense and contiguous."""
    return torch.empty(tuple(shape), dtype=dtype, device="meta")


def to_meta(x):
    """An op argument as PyTorch's meta kernels take it: tensors (lazy or host) as meta
    tensors, the lazy device as the meta device, lists and tuples item by item."""
    t = type(x)
    if t is LazyTensor:
        return x._lazy.meta
    if t is list or t is tuple:
        return t(to_meta(v) for v in x)
    if isinstance(x, torch.Tensor):
        return meta_like(x.shape, x.dtype)
    if isinstance(x, torch.device) and x.type == "lazy_mlir":
        return torch.device("meta")
    return x


# ------------------------------------------------------------ live tensors
# The inner tensors made in the current session, held weakly: mark_step
# materializes the pending ones. A list of callback-free weak references costs
# ~0.12 us per tensor; a WeakSet costs ~1.3 us (its add and its removal callback
# run Python code). Dead references are swept when the list has doubled.

_live: list = []
_live_owner = None      # the session `_live` belongs to
_sweep_at = 4096
_ref = weakref.ref


def track(tensor: LazyTensor) -> None:
    """Remember `tensor` as live in the current session."""
    global _live_owner, _live
    if session.current() is not _live_owner:
        _live_owner, _live = session.current(), []
    _live.append(_ref(tensor))
    if len(_live) >= _sweep_at:
        _sweep()


def _sweep() -> None:
    # In place, over the first n references only: a reference another thread (the
    # autograd engine's) appends meanwhile is kept. The slice store is one C call.
    global _sweep_at
    live = _live
    n = len(live)
    live[:n] = [r for r in live[:n] if r() is not None]
    _sweep_at = max(4096, 2 * len(live))


def live_tensors() -> list[LazyTensor]:
    """The live inner tensors of the current session, in creation order."""
    if session.current() is not _live_owner:
        return []
    _sweep()
    return [t for t in [r() for r in _live] if t is not None]


def live_pending_values() -> list[LazyValue]:
    # The sweep and the walk in one pass over the references (mark_step's first step).
    global _sweep_at
    if session.current() is not _live_owner:
        return []
    seen: dict[int, tuple[int, int, LazyValue]] = {}
    live = _live
    n = len(live)  # (references appended meanwhile by another thread stay, unswept)
    kept = []
    keep = kept.append
    for ref in live[:n]:
        tensor = ref()
        if tensor is None:
            continue
        keep(ref)
        value = tensor._lazy
        # One read of `node`: another thread's sync may launch the value (node -> None)
        # between a check and a later read.
        node = value.node
        if node is not None and id(value) not in seen:
            seen[id(value)] = (node.seq, value.index, value)
    live[:n] = kept
    _sweep_at = max(4096, 2 * len(live))
    # Trace order, not WeakSet order: the graph (and so its hash) must not
    # depend on where tensors happen to sit in memory.
    return [value for _, _, value in sorted(seen.values(), key=lambda e: e[:2])]
