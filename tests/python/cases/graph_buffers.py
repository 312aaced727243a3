"""The most buffers (inputs, scalars and outputs) any compiled graph ran with, for the
real-size tests and benchmarks/real_models.py: a limit that only large graphs hit (the
1024 arguments of a C call, once) shows in that count.

A graph big enough to be compiled as segments (LAZYMLIR_SEGMENT_NODES) counts as one
graph here, with its own inputs and outputs: the step is still one plan of all the
parameters, gradients and optimizer states (each segment takes a part of them;
tests/python/e2e/test_arity.py runs a single graph of thousands of buffers)."""

from __future__ import annotations

import contextlib

from lazymlir.execution import executor, partition


@contextlib.contextmanager
def largest_graph():
    """Within: {"buffers": the most buffers a compiled graph's run had so far}."""
    seen = {"buffers": 0}
    originals = {plan: plan.run for plan in (executor.Compiled, partition.Partitioned)}

    def recording(original):
        def run(self, target, inputs, scalars):
            outputs = original(self, target, inputs, scalars)
            seen["buffers"] = max(seen["buffers"], len(inputs) + len(scalars) + len(outputs))
            return outputs
        return run

    start = executor.Compiled.start

    def recording_start(self, target, inputs, scalars):
        """A run on the native thread (background runs): its outputs are the graph's."""
        outputs = len(self.graph["outputs"])
        seen["buffers"] = max(seen["buffers"], len(inputs) + len(scalars) + outputs)
        return start(self, target, inputs, scalars)

    for plan, original in originals.items():
        plan.run = recording(original)
    executor.Compiled.start = recording_start
    try:
        yield seen
    finally:
        for plan, original in originals.items():
            plan.run = original
        executor.Compiled.start = start
