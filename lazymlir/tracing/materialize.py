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
from . import donation
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
            target = targets.active()
            nodes: list = []
            key, inputs, scalars, count = graph_key(pending, target.name, static_scalar_ops,
                                                    nodes)
            donated = () if wait else _donations(current, target, key, pending, inputs, nodes)
            key = donation.keyed(key, donated)
            plan = executor.prepare_keyed(
                key, lambda: _document(pending, static_scalar_ops, donated))
            if donated:
                if executor.writes_inputs(plan):
                    current.metrics.inc("DonatedInputs", len(donated))
                else:
                    donated = ()  # the plan writes none: the inputs stay valid
            if not wait and executor.in_background(plan):
                _launch(plan, key, count, pending, inputs, scalars, donated)
                return
            executor.drain()  # inputs computed in the background are ready
            try:
                outputs = executor.run(plan, [_ready(v) for v in inputs], scalars)
            finally:
                donation.retire([inputs[i] for i, _ in donated])
        # Not BaseException: an interrupt (Ctrl-C) leaves the values pending, so the next
        # read compiles them again instead of raising the KeyboardInterrupt once more.
        except Exception as error:
            for value in pending + _sharing_the_failed_op(pending, error):
                value.failed(error)
            if current.runs is not None:
                # An input's background run failed (found here once donation waited for
                # it): raised now, so no later wait point raises it again.
                current.runs.reported(error)
            raise
        for value, data in zip(pending, outputs):
            value.materialized(data)


def _donations(current, target, key: str, pending: list[LazyValue],
               inputs: list[LazyValue], nodes: list) -> tuple:
    """The (input, output) pairs this graph may update in place (donation.py); only at a
    mark_step(), whose graph computes every live pending value: no node of its graph stays
    in the trace after it. A read computes what it asks for, and the nodes of its graph
    that other pending values need stay, with their references to its inputs, which its
    count of references would take for its own. `nodes`: the graph's nodes."""
    if not inputs or not donation.enabled(current, target):
        return ()
    pairs = donation.candidates(key, pending, inputs)
    if not pairs:
        return ()
    plan = executor.cached_plan(donation.keyed(key, pairs))
    if plan is not None and not executor.writes_inputs(plan):
        # Its plan writes no input (a graph with check flags, one split into segments or
        # around ops that fall back): every pair is as good as none, and the same key
        # takes the same plan without the safety checks' cost (~1000 nodes scanned a
        # step for the small GPT).
        return pairs
    return donation.safe_pairs(pairs, inputs, nodes, current.runs)


def _document(pending: list[LazyValue], static_scalar_ops, donated: tuple) -> dict:
    graph = build_graph(pending, static_scalar_ops)[0]
    if donated:
        graph["in_place"] = [list(pair) for pair in donated]
    return graph


def _await_launched(values: list[LazyValue], runner) -> None:
    """Wait for the background runs computing `values` (for a run's code up to the value,
    where it signals its outputs: `_bound_early`); raise the error of one that failed
    (reported: the next sync point does not raise it again)."""
    if runner is not None:
        for value in values:
            run = value.run
            if run is not None and not _bound_early(value, run):
                runner.wait_for(run)
    try:
        for value in values:
            value.check()
    except Exception as error:
        if runner is not None:
            runner.reported(error)
        raise


def _bound_early(value: LazyValue, run) -> bool:
    """Whether `value` is now bound to its output of `run`, which its code signaled final
    while the rest of the graph may still be running (waiting for that signal): a training
    step's loss read right after mark_step() does not wait for the step's backward and
    optimizer update, and the next step's tracing overlaps them."""
    early = run.early_output
    if early is None or run.finished:
        return False
    try:
        k = run.values.index(value)  # (LazyValue compares by identity)
    except ValueError:  # bound already: the binding empties the list
        return False
    data = early(k)
    if data is None:
        return False
    if value.run is run:  # (not bound by the run's end meanwhile)
        value.materialized(data)
        session.current().metrics.inc("EarlyReads")
    return True


def _ready(value: LazyValue):
    """A graph input's data: its own graph has run (drained or earlier in the queue)."""
    value.check()
    return value.data


def _launch(plan, key: str, count: int, pending: list[LazyValue], inputs: list[LazyValue],
            scalars: list[float], donated: tuple = ()) -> None:
    """Run `plan` on the execution thread; `pending` are running until it binds them.
    `donated`: the (input, output) pairs the run updates in place."""
    def resolve() -> list:
        try:
            return [_ready(v) for v in inputs]
        except Exception as error:  # an input's graph failed in the background
            raise runs.FailedInput(error) from None

    # The values the run binds, in a list of its own that the binding empties: once a
    # run has bound them it holds no reference to them (a finished run may stay
    # referenced a while), so the next graph can tell whether anything else still
    # reads them (donation.safe_pairs).
    bound = list(pending)
    retired = [inputs[i] for i, _ in donated]

    def done(outputs, error) -> None:
        if error is None:
            for value, data in zip(bound, outputs):
                value.materialized(data)
        else:
            for value in bound:
                value.failed(error)
        donation.retire(retired)
        bound.clear()
        retired.clear()
    # Running before the launch: the execution thread may bind them at once.
    run = runs.Run(f"{key[:16]} ({count} ops)")
    run.values = bound
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
