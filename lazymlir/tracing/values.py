"""Lazy values and the inner lazy tensor: a wrapper subclass whose ops are recorded.

Users never hold a `LazyTensor` directly: every `lazy_mlir` tensor they see is
a PyTorch FunctionalTensorWrapper (functionalization runs above us), and the
wrapper's inner value is a `LazyTensor`. So the tracer only ever sees
functional ATen ops (`add.Tensor`, `select_copy.int`, `select_scatter`, ...).

A `LazyTensor` points at a `LazyValue`, an SSA value in one of three states:
pending (made by a `Node` of the trace), materialized (holding target data),
or failed (its graph failed to compile or run: reading it raises that error).
Values are immutable, which functionalization guarantees, so several tensors
may share one value (detach, clone, same-dtype copies) without copying.
"""

from __future__ import annotations

import itertools

import torch

from .. import session

DEVICE = "lazy_mlir:0"  # a string: torch.device() needs PrivateUse1 renamed first

_node_ids = itertools.count()


class Node:
    """One recorded functional op. `args`/`kwargs` hold LazyValues where tensors were."""

    __slots__ = ("op", "args", "kwargs", "out_metas", "seq")

    def __init__(self, op, args, kwargs, out_metas):
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.out_metas = out_metas  # meta-device tensors, one per tensor output
        self.seq = next(_node_ids)  # creation order = a valid topological order


class LazyValue:
    """An immutable tensor value: pending (node, index), materialized (data) or failed."""

    __slots__ = ("meta", "node", "index", "data", "error", "__weakref__")

    def __init__(self, meta: torch.Tensor, node: Node | None = None, index: int = 0, data=None):
        self.meta = meta
        self.node = node
        self.index = index
        self.data = data
        self.error: BaseException | None = None

    @property
    def pending(self) -> bool:
        return self.node is not None

    def materialized(self, data) -> None:
        # Dropping the node releases the upstream trace once nothing else needs it.
        self.data = data
        self.node = None

    def failed(self, error: BaseException) -> None:
        # No traceback kept: it would hold the frames (and their tensors) alive.
        self.error = error.with_traceback(None)
        self.node = None

    def check(self) -> None:
        """Raise the error of the graph that failed to produce this value."""
        if self.error is not None:
            raise self.error


class LazyTensor(torch.Tensor):
    """Inner tensor of a lazy_mlir FunctionalTensorWrapper."""

    _lazy: LazyValue

    @staticmethod
    def __new__(cls, value: LazyValue):
        meta = value.meta
        tensor = torch.Tensor._make_wrapper_subclass(
            cls, meta.shape, meta.stride(), dtype=meta.dtype, device=DEVICE,
            requires_grad=False)
        tensor._lazy = value
        session.current().live.add(tensor)
        return tensor

    def __repr__(self) -> str:  # never syncs: used in error messages and debuggers
        value = self._lazy
        state = "pending" if value.pending else ("failed" if value.error else "materialized")
        return f"LazyTensor({tuple(self.shape)}, {self.dtype}, {state})"

    # __torch_dispatch__ is installed by the tracer (tracing/tracer.py), which
    # sits above this module.


def meta_like(shape, dtype) -> torch.Tensor:
    """Contiguous meta tensor: lazy values are always dense and contiguous."""
    return torch.empty(tuple(shape), dtype=dtype, device="meta")


def live_pending_values() -> list[LazyValue]:
    seen: dict[int, LazyValue] = {}
    for tensor in list(session.current().live):
        value = tensor._lazy
        if value.pending:
            seen.setdefault(id(value), value)
    # Trace order, not WeakSet order: the graph (and so its hash) must not
    # depend on where tensors happen to sit in memory.
    return sorted(seen.values(), key=lambda v: (v.node.seq, v.index))
