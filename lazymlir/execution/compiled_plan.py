"""The plan of a graph compiled whole: run its executable (inline, or started on the
target's native thread), read its check flag, and rerun the graph eagerly when a check
failed, so that the user sees eager's own error (executor.py makes and caches plans).
Every run is shown to the registered observers (run_observers.py)."""

from __future__ import annotations

import logging

import torch

from .. import targets
from ..lowering.front import fx_graph
from . import partition, run_observers

log = logging.getLogger("lazymlir.executor")


class Compiled:
    """The whole graph is one executable; scalars are passed as 0-d float64 inputs.

    With `flags` > 0 the executable was built from `checks.instrument(graph)`: its
    last output is the 0-d check flag. If it is set, the graph runs eagerly on
    CPU, which raises eager's error (an out-of-range index, a zero divisor)."""

    def __init__(self, executable, graph: dict, flags: int = 0):
        self.executable = executable
        self.graph = graph
        self.flags = flags

    def run(self, target, inputs: list, scalars: list[float]) -> list:
        observed = run_observers.started(self, inputs, scalars) if run_observers.active \
            else None
        executable = self.executable
        originals = self._originals(inputs)
        if executable.takes_scalars:
            outputs = self._settled(target, lambda: executable.run(inputs, scalars), inputs,
                                    scalars, originals)
        else:
            with_scalars = self._with_scalars(target, inputs, scalars)
            outputs = self._settled(target, lambda: executable.run(with_scalars),
                                    with_scalars, scalars, originals)
        if observed:
            run_observers.finished(observed, outputs)
        return outputs

    def _settled(self, target, outputs_of_run, inputs: list, scalars: list[float],
                 originals: dict) -> list:
        """The outputs `outputs_of_run()` gives, or eager's where a check failed: one the
        code reports as it returns, or the graph's check flag."""
        try:
            outputs = outputs_of_run()
        except targets.CompiledCheckFailed as failed:
            log.info("%s; running the graph eagerly", failed)
            return self._eagerly(target, inputs, scalars, originals)
        return self._checked(target, outputs, inputs, scalars, originals)

    def _originals(self, inputs: list) -> dict:
        """Copies of the inputs the code updates in place, if a check may fail: a failed
        check reruns the graph eagerly on its inputs as they were, and code that updates
        inputs in place (torch.compile's buffer and optimizer updates) has written them
        by the time a check is read. The caller copies eager's new values into them, as
        it does for any plan that returns new buffers."""
        executable = self.executable
        if executable.in_place and (self.flags or executable.checks_at_run_time):
            return {i: inputs[i].clone() for i, _ in executable.in_place}
        return {}

    def _checked(self, target, outputs: list, inputs: list, scalars: list[float],
                 originals: dict) -> list:
        """`outputs`, or eager's if the check flag (the last output, with `flags`) is set.
        `outputs` is left as it is: it may be a running call's own list, which another
        thread may still read early (targets/cpu.py `BackgroundCall.early_output`)."""
        if not self.flags:
            return outputs
        if self._flag_set(target, outputs[-1]):
            return self._eagerly(target, inputs, scalars, originals)
        return outputs[:-1]

    def starts_natively(self) -> bool:
        """Whether `start` may run this plan on the target's native thread."""
        return self.executable.starts_natively

    def start(self, target, inputs: list, scalars: list[float]) -> Started:
        """Start a run on the target's native thread (`starts_natively()`)."""
        return Started(self, target, inputs, scalars)

    def prepare(self, target, inputs: list, scalars: list[float], frames=None, pool=None):
        """A call of this plan made ready for the target's `start_calls` (a chain of
        calls on its native thread: segment_chain.py; `starts_natively()`, whose
        executables take the scalars as floats); `frames`, `pool`: the executable's
        `prepare`'s. Not shown to observers: the chain shows its runs itself."""
        return self.executable.prepare(inputs, scalars, frames, pool)

    def check_failed(self, target, call) -> bool:
        """Whether a check failed in `call`, a `prepare`d call that has run (a check in its
        code, or the graph's check flag); to be asked once per call (it clears the code's
        record of a failed check)."""
        try:
            outputs = call.finish()
        except targets.CompiledCheckFailed as failed:
            log.info("%s; running the graph eagerly", failed)
            return True
        return bool(self.flags) and self._flag_set(target, outputs[-1])

    @staticmethod
    def _flag_set(target, flag) -> bool:
        """Whether the check flag `flag` (a graph's last output, with `flags`) is set."""
        return bool(target.download(flag, torch.empty((), dtype=torch.bool, device="meta")))

    @staticmethod
    def _with_scalars(target, inputs: list, scalars: list[float]) -> list:
        """The scalar inputs as 0-d float64 buffers after the inputs."""
        if scalars and target.plain_cpu_tensors:
            # One tensor for every scalar input, its elements as 0-d views: an AdamW step
            # of the small GPT has 214 scalars, 9 us each as tensors of their own.
            return list(inputs) + list(torch.tensor(scalars, dtype=fx_graph.SCALAR_DTYPE)
                                       .unbind())
        if scalars:
            return list(inputs) + [target.upload(torch.tensor(s, dtype=fx_graph.SCALAR_DTYPE))
                                   for s in scalars]
        return inputs

    def _eagerly(self, target, inputs: list, scalars: list[float], originals: dict) -> list:
        inputs = [originals.get(i, data) for i, data in enumerate(inputs)]
        return EagerReference(self.graph).run(target, inputs, scalars)


class Started:
    """A run of a Compiled plan under way on the target's native thread."""

    __slots__ = ("plan", "target", "inputs", "scalars", "originals", "call", "observed")

    def __init__(self, plan: Compiled, target, inputs: list, scalars: list[float]):
        self.plan, self.target, self.inputs, self.scalars = plan, target, inputs, scalars
        self.observed = run_observers.started(plan, inputs, scalars) \
            if run_observers.active else None
        self.originals = plan._originals(inputs)
        self.call = plan.executable.start(inputs, scalars)

    def result(self) -> list:
        """Its outputs, once it has run (a failed check reruns the graph eagerly here)."""
        outputs = self.plan._settled(self.target, self.call.result, self.inputs,
                                     self.scalars, self.originals)
        if self.observed:
            run_observers.finished(self.observed, outputs)
        return outputs

    def seconds(self) -> float:
        return self.call.seconds()

    def early_output(self, k: int):
        """Output `k` once the code has signaled it final (waiting for that; the rest of
        the graph may still run), or None: then only `result()` gives it. A graph with a
        check flag hands out nothing before its flag is final (the flag is or-ed where
        each check is: its signal follows the last check, lowering/front/checks.py) and
        clear: a set flag reruns the whole graph eagerly at the end, for eager's error
        or values. Code with run-time asserts hands out a value only if none has failed
        by its signal (targets/cpu.py; one failing later reruns the graph at its end and
        raises at the next wait point). Not for a run that is observed
        (run_observers.py sees its outputs at the end)."""
        early = getattr(self.call, "early_output", None)
        plan = self.plan
        if early is None or self.observed or self.originals:
            return None
        if plan.flags:
            flag = early(len(plan.executable.output_metas) - 1)
            if flag is None or bool(flag):
                return None
        return early(k)


class EagerReference:
    """The graph run op by op with eager PyTorch on CPU: what a failed check runs, to
    raise eager's own error (class and message) from the sync point."""

    def __init__(self, graph: dict):
        self.graph = graph

    def run(self, target, inputs: list, scalars: list[float]) -> list:
        env: dict[tuple, object] = {("input", i, 0): data for i, data in enumerate(inputs)}
        env.update({("scalar", i, 0): value for i, value in enumerate(scalars)})
        for index in range(len(self.graph["nodes"])):
            partition.run_node_eagerly(self.graph, target, index, env)
        # Eager did not fail (a check is stricter than eager): its results are right.
        log.warning("a compiled check failed but eager PyTorch raised no error; "
                    "using eager's results")
        return [env[tuple(o["ref"])] for o in self.graph["outputs"]]
