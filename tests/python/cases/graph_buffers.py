"""The most buffers (inputs, scalars and outputs) any compiled graph ran with, for the
real-size tests and benchmarks/real_models.py: a limit that only large graphs hit (the
1024 arguments of a C call, once) shows in that count.

A graph big enough to be compiled as segments (LAZYMLIR_SEGMENT_NODES) counts as one
graph here, with its own inputs and outputs: the step is still one plan of all the
parameters, gradients and optimizer states (each segment takes a part of them;
tests/python/e2e/test_arity.py runs a single graph of thousands of buffers)."""

from __future__ import annotations

import contextlib

from lazymlir.execution import run_observers


@contextlib.contextmanager
def largest_graph():
    """Within: {"buffers": the most buffers a compiled graph's run had so far}."""
    seen = {"buffers": 0}

    def observer(plan, inputs, scalars):
        """Every plan's runs (inline or on the native thread): a compiled graph, a big
        graph's segments as one plan, and each segment."""
        def outputs_known(outputs):
            seen["buffers"] = max(seen["buffers"], len(inputs) + len(scalars) + len(outputs))
        return outputs_known

    run_observers.register(observer)
    try:
        yield seen
    finally:
        run_observers.unregister(observer)
