"""A big graph's compiled segments, launched by mark_step() as one chain of calls on the
target's native thread (cpu: targets/cpu_background.py), as a graph compiled whole is.

A graph cut into segments (LAZYMLIR_SEGMENT_NODES, partition.Partitioned with no eager
op) used to run on the Python execution thread (runs.py), which needs the GIL between
segments while the user's thread holds it to trace the next step: the two stalled each
other (the reason whole graphs moved to the native thread). Here the user's thread
prepares every segment's call at once: a segment's outputs are allocated before it
runs, so the next segment's argument frame can name them as inputs; the native
thread then runs the calls in order without Python.

Memory: the plan run segment by segment drops a value that crosses cuts after the
last segment reading it. The calls here are all prepared before any runs, so a
dropped value's memory instead becomes free for a later segment's outputs
(`FreeMemory`: an output takes the smallest free block that holds it, if at most
twice its size). The chain still holds somewhat more at once than the plan run
segment by segment, where blocks do not fit (benchmarks/results/2026-11-28/
segments-native-thread.md measures it).

Checks: after the chain, each segment's check (a failed run-time check in its code, or
its check flag) is read. If one failed, the later segments ran on that segment's
unchecked outputs, and an earlier segment's input may be a buffer since reused: the
whole graph is run eagerly on its inputs (compiled_plan.EagerReference), as for a
graph compiled whole, which raises eager's error or gives eager's values.

While a run observer is registered (run_observers.py) the segments run one at a time,
each started on the native thread and waited for here (partition.Partitioned.run with
`natively`), so that each is observed with its inputs computed.
"""

from __future__ import annotations

import bisect
import math
import time
import types

import torch

from . import partition, run_observers
from .compiled_plan import Compiled, EagerReference


def starts_natively(plan) -> bool:
    """Whether `start` may run `plan`: a big graph's segments, each a compiled graph the
    target starts on its native thread, and no eager op."""
    return type(plan) is partition.Partitioned and not plan.eager and \
        plan.plans is not None and \
        all(type(p) is Compiled and p.starts_natively() for p in plan.plans)


def start(split: partition.Partitioned, target, inputs: list, scalars: list[float]) -> Chain:
    """Start the segments of `split` (`starts_natively`) on the target's native thread."""
    return Chain(split, target, inputs, scalars)


class Chain:
    """A run of a segmented plan under way on the target's native thread: `result()`
    waits for it, `seconds()` is how long its code ran."""

    __slots__ = ("split", "target", "inputs", "scalars", "calls", "started", "outputs",
                 "took")

    def __init__(self, split: partition.Partitioned, target, inputs: list,
                 scalars: list[float]):
        self.split, self.target, self.inputs, self.scalars = split, target, inputs, scalars
        self.calls, self.started, self.took = [], None, 0.0
        if run_observers.active:
            began = time.perf_counter()
            self.outputs = split.run(target, inputs, scalars, natively=True)
            self.took = time.perf_counter() - began
            return
        if split.frames is None:
            split.frames = [types.SimpleNamespace(frame=None) for _ in split.plans]
        # Memory of dropped values, free for later outputs; not where a segment writes
        # an input in place (its output is that input's buffer, which a later value may
        # still name). Segments hold no in-place pairs today (partition.subgraph).
        pool = None if any(p.executable.in_place for p in split.plans) else FreeMemory()
        env: dict[tuple, object] = {("input", i, 0): data for i, data in enumerate(inputs)}
        env.update({("scalar", i, 0): value for i, value in enumerate(scalars)})
        for plan, frames, step, drops in zip(split.plans, split.frames, split.steps,
                                             split.drops):
            _, _, reads, outs = step
            tensors = [env[r] for r in reads if r[0] != "scalar"]
            values = [env[r] for r in reads if r[0] == "scalar"]
            call = plan.prepare(target, tensors, values, frames, pool)
            self.calls.append((plan, call))
            env.update(zip(outs, call.outputs()))  # (a check flag, last, is not bound)
            for ref in drops:
                buffer = env.pop(ref)
                if pool is not None:
                    pool.give(buffer)
        self.outputs = [env[tuple(o["ref"])] for o in split.graph["outputs"]]
        self.started = target.start_calls([call for _, call in self.calls])

    def result(self) -> list:
        """The graph's outputs, once the chain has run (eager's if a check failed)."""
        if self.started is None:
            return self.outputs
        self.started.wait()
        failed = False
        for plan, call in self.calls:  # every one: reading a check clears it
            failed = plan.check_failed(self.target, call) or failed
        self.calls = []
        if failed:
            return EagerReference(self.split.graph).run(self.target, self.inputs,
                                                        self.scalars)
        return self.outputs

    def seconds(self) -> float:
        """How long the segments' code ran (with an observer: the whole run's time)."""
        return self.started.seconds() if self.started is not None else self.took


class FreeMemory:
    """The storages of values no later call of a chain reads, for the outputs of later
    calls (the calls run in order, so a storage's last reader has run before a later
    call writes it): each output takes the smallest free storage that holds it, if at
    most twice its size (an output may live long after the chain: a graph output)."""

    __slots__ = ("sizes", "storages")

    def __init__(self):
        self.sizes: list[int] = []  # ascending, with `storages`
        self.storages: list = []

    def give(self, tensor: torch.Tensor) -> None:
        """`tensor`'s storage is free (no later call reads `tensor`)."""
        storage = tensor.untyped_storage()
        at = bisect.bisect_left(self.sizes, storage.nbytes())
        self.sizes.insert(at, storage.nbytes())
        self.storages.insert(at, storage)

    def take(self, shape, strides, dtype: torch.dtype) -> torch.Tensor | None:
        """A tensor of `shape`, `strides` (contiguous) and `dtype` on a free storage, or
        None if none fits."""
        needed = math.prod(shape) * dtype.itemsize
        at = bisect.bisect_left(self.sizes, needed)
        if not needed or at == len(self.sizes) or self.sizes[at] > 2 * needed:
            return None
        del self.sizes[at]
        storage = self.storages.pop(at)
        return torch.empty((), dtype=dtype).set_(storage, 0, shape, strides)
