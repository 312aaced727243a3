"""Sync points on the tracing side: pending lazy values -> data, or failed.

`materialize(values)` keys the graph the values need (graph.py), hands the
key to the executor (which builds the graph document only when no plan is cached
for the key) and binds each output to its value. The failure policy lives
here: if the graph fails to compile or run, every value it was asked for is
marked failed with that error (reading one raises it again) and leaves the
pending set, so the next mark_step() compiles only new work; values that were
materialized before stay valid.
"""

from __future__ import annotations

import torch

from .. import session, targets
from ..execution import executor, runs
from ..support.errors import CompileError
from .graph import build_graph, graph_key, nodes_downstream_of, pending_nodes
from .values import LazyTensor, LazyValue, live_pending_values, value_of


def materialize(values: list[LazyValue], wait: bool = True) -> None:
    """Compute `values`. `wait`: return once they hold data (a read); else (mark_step)
    a graph the execution thread can run is launched there and this returns at once.

    Every call is a wait point: it first raises the error of a graph that failed in
    the background (execution/runs.py) and was not raised yet; a read that computes
    something first waits for every launched graph, so it raises theirs."""
    current = session.current()
    runner = current.runs
    if wait:
        _await_launched(values, runner)
    pending = list({id(v): v for v in values if v.pending}.values())
    if runner is not None:
        if wait and pending:
            runner.drain()  # their graph runs here, after every launched one
        error = runner.take_error()
        if error is not None:
            raise error
    if not pending:
        return
    current.metrics.inc("Sync")
    _compute(current, pending, wait)
    if wait:
        # Another thread's mark_step() (which takes every live pending value) may have
        # launched some of them meanwhile (and started the execution thread, if it was
        # the first launch): a read waits for that run, outside the lock.
        _await_launched(values, current.runs)


def _compute(current, pending: list[LazyValue], wait: bool) -> None:
    """Compile and run (or, not `wait`, launch) the graph of those of `pending` still
    pending, under the session lock."""
    with current.lock:
        pending = [v for v in pending if v.pending]
        if not pending:
            return
        try:
            # Inside the try: a graph that cannot be built (an input's graph failed
            # earlier) fails its values too, so the next mark_step() skips them
            # instead of raising the same error again for as long as they live.
            static_scalar_ops = frozenset(current.static_scalar_ops)
            key, inputs, scalars, count = graph_key(pending, targets.active().name,
                                                    static_scalar_ops)
            plan = executor.prepare_keyed(
                key, lambda: build_graph(pending, static_scalar_ops)[0])
            if not wait and executor.in_background(plan):
                _launch(plan, key, count, pending, inputs, scalars)
                return
            executor.drain()  # inputs computed in the background are ready
            outputs = executor.run(plan, [_ready(v) for v in inputs], scalars)
        # Not BaseException: an interrupt (Ctrl-C) leaves the values pending, so the next
        # read compiles them again instead of raising the KeyboardInterrupt once more.
        except Exception as error:
            for value in pending + _sharing_the_failed_op(pending, error):
                value.failed(error)
            raise
        for value, data in zip(pending, outputs):
            value.materialized(data)


def _await_launched(values: list[LazyValue], runner) -> None:
    """Wait for the background runs computing `values`; raise the error of one that failed
    (reported: the next sync point does not raise it again)."""
    if runner is not None:
        for value in values:
            run = value.run
            if run is not None:
                runner.wait_for(run)
    try:
        for value in values:
            value.check()
    except Exception as error:
        if runner is not None:
            runner.reported(error)
        raise


def _ready(value: LazyValue):
    """A graph input's data: its own graph has run (drained or earlier in the queue)."""
    value.check()
    return value.data


def _launch(plan, key: str, count: int, pending: list[LazyValue], inputs: list[LazyValue],
            scalars: list[float]) -> None:
    """Run `plan` on the execution thread; `pending` are running until it binds them."""
    def resolve() -> list:
        try:
            return [_ready(v) for v in inputs]
        except Exception as error:  # an input's graph failed in the background
            raise runs.FailedInput(error) from None

    def done(outputs, error) -> None:
        if error is None:
            for value, data in zip(pending, outputs):
                value.materialized(data)
        else:
            for value in pending:
                value.failed(error)
    # Running before the launch: the execution thread may bind them at once.
    run = runs.Run(f"{key[:16]} ({count} ops)")
    nodes = [value.node for value in pending]
    for value in pending:
        value.launched(run)
    try:
        executor.launch(plan, run, resolve, scalars, done)
    except BaseException:  # not queued (an interrupt while waiting for a slot): pending
        for value, node in zip(pending, nodes):
            value.node, value.run = node, None
        raise


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
    value = value_of(tensor)
    materialize([value])
    return targets.active().download(value.data, value.meta)


def mark_step() -> None:
    """Compile (once) and run everything pending for live lazy_mlir tensors, as one graph:
    launched on the execution thread and not waited for (the default on the cpu target;
    LAZYMLIR_ASYNC=0 turns it off), or run before returning."""
    session.current().metrics.inc("MarkStep")
    materialize(live_pending_values(), wait=False)


def wait() -> None:
    """Wait until every graph launched by mark_step() has run; raise the error of one that
    failed in the background, if no sync point has raised it yet."""
    executor.drain()
    materialize([])
