"""Observers of plan runs: tools that need the values each compiled graph runs on (the
gpu kit's tracer records them; the real-size tests count a run's buffers).

    def observer(plan, inputs, scalars):
        ...                       # before the run: its input buffers, as they are now
        return on_outputs         # or None; called with the run's outputs once it has them

    run_observers.register(observer)
    ...
    run_observers.unregister(observer)

Observed runs: a graph compiled whole (`compiled_plan.Compiled`), run inline or on the
target's native thread (then `on_outputs` is called by the thread that waits for the
run); a big graph compiled as segments (`partition.Partitioned`, once for the whole
graph), and each of its segments (a `Compiled` of its own): while an observer is
registered, a segmented plan started on the native thread runs its segments one at a
time there (segment_chain.py), so that each is observed with its inputs computed.
`on_outputs` is not called for a run that raised. Observers are called on the thread
that runs or starts the plan, in the order they were registered.

With none registered, a run pays one test of an empty list.
"""

from __future__ import annotations

from collections.abc import Callable

# Registered observers; read by the plans on every run (a truth test when empty).
active: list[Callable] = []


def register(observer: Callable) -> None:
    """Call `observer(plan, inputs, scalars)` before every plan run from now on (see the
    module's docstring); registering one twice calls it twice."""
    active.append(observer)


def unregister(observer: Callable) -> None:
    """Stop calling `observer` (its last registration); a run under way still calls the
    `on_outputs` it returned."""
    for index in range(len(active) - 1, -1, -1):
        if active[index] == observer:
            del active[index]
            return
    raise ValueError(f"{observer!r} is not registered")


def started(plan, inputs: list, scalars: list) -> list[Callable]:
    """Tell the observers `plan` runs on `inputs`: the `on_outputs` they returned."""
    calls = (observer(plan, inputs, scalars) for observer in tuple(active))
    return [on_outputs for on_outputs in calls if on_outputs is not None]


def finished(on_outputs: list[Callable], outputs: list) -> None:
    """Hand a run's outputs to the observers that asked for them (`started`)."""
    for call in on_outputs:
        call(outputs)
