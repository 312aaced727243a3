"""Sync points on the tracing side: pending lazy values -> data, or failed.

`materialize(values)` builds the graph the values need (graph.py), hands it
to the executor and binds each output to its value. The failure policy lives
here: if the graph fails to compile or run, every value it was asked for is
marked failed with that error (reading one raises it again) and leaves the
pending set, so the next mark_step() compiles only new work; values that were
materialized before stay valid.
"""

from __future__ import annotations

import torch

from .. import session, targets
from ..execution import executor
from ..support.errors import CompileError
from .graph import build_graph, nodes_downstream_of, pending_nodes
from .values import LazyTensor, LazyValue, live_pending_values


def materialize(values: list[LazyValue]) -> None:
    for value in values:
        value.check()
    pending = list({id(v): v for v in values if v.pending}.values())
    if not pending:
        return
    current = session.current()
    current.metrics.inc("Sync")
    with current.lock:
        # Another thread may have materialized some of them meanwhile.
        pending = [v for v in pending if v.pending]
        if not pending:
            return
        try:
            # Inside the try: a graph that cannot be built (an input's graph failed
            # earlier) fails its values too, so the next mark_step() skips them
            # instead of raising the same error again for as long as they live.
            graph, inputs, scalars = build_graph(pending, frozenset(current.static_scalar_ops))
            outputs = executor.execute(graph, [v.data for v in inputs], scalars)
        # Not BaseException: an interrupt (Ctrl-C) leaves the values pending, so the next
        # read compiles them again instead of raising the KeyboardInterrupt once more.
        except Exception as error:
            for value in pending + _sharing_the_failed_op(pending, error):
                value.failed(error)
            raise
        for value, data in zip(pending, outputs):
            value.materialized(data)


def _sharing_the_failed_op(pending: list[LazyValue], error: BaseException) -> list[LazyValue]:
    """Other live pending values this graph computes with the op its compile failed at,
    or from its result (the complex result of an fft whose `.real` was asked for): they
    would fail the same way, so they fail now instead of at every later mark_step()."""
    if not isinstance(error, CompileError) or error.aten_op is None:
        return []
    doomed = nodes_downstream_of(error.aten_op, pending_nodes(pending))
    asked = {id(v) for v in pending}
    return [v for v in live_pending_values()
            if id(v) not in asked and v.node is not None and v.node.seq in doomed]


def to_cpu(tensor: LazyTensor) -> torch.Tensor:
    value = tensor._lazy
    materialize([value])
    return targets.active().download(value.data, value.meta)


def mark_step() -> None:
    """Compile (once) and run everything pending for live lazy_mlir tensors, as one graph."""
    session.current().metrics.inc("MarkStep")
    materialize(live_pending_values())
