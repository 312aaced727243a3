"""The most buffers (inputs, scalars and outputs) any compiled graph ran with, for the
real-size tests and benchmarks/real_models.py: a limit that only large graphs hit (the
1024 arguments of a C call, once) shows in that count."""

from __future__ import annotations

import contextlib

from lazymlir.execution import executor


@contextlib.contextmanager
def largest_graph():
    """Within: {"buffers": the most buffers a compiled graph's run had so far}."""
    seen = {"buffers": 0}
    original = executor.Compiled.run

    def run(self, target, inputs, scalars):
        outputs = original(self, target, inputs, scalars)
        seen["buffers"] = max(seen["buffers"], len(inputs) + len(scalars) + len(outputs))
        return outputs

    executor.Compiled.run = run
    try:
        yield seen
    finally:
        executor.Compiled.run = original
