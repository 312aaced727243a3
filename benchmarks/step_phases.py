"""Where a lazy training step's time goes, phase by phase, next to eager and torch.compile.

    PYTHONPATH=. python -m benchmarks.step_phases [--only mlp,gpt] [--calls 40] [--inductor]
        [--label NAME]

One process; per round, one call each of: the step on `lazy_mlir` (`step();
lazymlir.mark_step(); lazymlir.wait()`: the run waited for, so that it is a phase
of the call, not overlapped with the next), the same step eagerly, through
torch.compile(backend="lazymlir") and, with `--inductor`, through inductor (each
on its own copy of the same initial weights), every call timed: the call-by-call
alternation of a training script that mixes eager work with its steps. The lazy
step is split into its phases by timing wrappers put around the runtime's
functions here (the library carries no timers of its own for them):

- tracing: the step's Python code, every op recorded (forward, backward on the
  autograd engine's device thread, optimizer);
- collect: finding the live pending values at `mark_step()`;
- graph build: tracing/graph.py's `build_graph` (the graph document: built only when
  no plan is cached for the graph's key, so 0 in steady state);
- hash: the graph's key (graph.py's `graph_key`: the pending nodes, their per-node
  texts and argument places, hashed), and any `fx_graph.structural_hash` of a document;
- cache lookup: the executor's plan lookup (memory cache hit in steady state);
- launch: the plan's run on the user's thread, less any compiled code run inline
  (scalar inputs, output buffers, argument descriptors, the hand-over, and waiting
  for an earlier graph of the step still running on the background thread);
- wait: `lazymlir.wait()` after `mark_step()`, for a graph run in the background;
- code: the compiled code itself: the ctypes call of the graph's entry when it runs
  inline (part of the sum), or the native background thread's measured call (the
  default), which overlaps the rest of `mark_step()` and the wait, so no part of the
  sum and of "other";
- bind: handing the outputs to their lazy values (the copy back: none on the
  cpu target, whose outputs are the buffers the code wrote);
- other: the rest of `mark_step()`.

Each phase's figure is its median over the calls (so the phases need not add up
to the median total). `ops` is the number of nodes in the step's graph, and
`tracing us/op` the tracing median over it. Writes
benchmarks/results/<today>/<label>.md with the command and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

from . import models
from .results_dir import load_averages, result_path
from .run import TrainingPair, _train_step, training_workload

PHASES = ("tracing", "collect", "graph build", "hash", "cache lookup", "launch", "wait", "code",
          "bind", "other")


class Phases:
    """Seconds per phase of the current lazy step, from wrappers around the runtime."""

    def __init__(self):
        self.now: dict[str, float] = {}
        self.nodes = 0

    def add(self, phase: str, seconds: float) -> None:
        self.now[phase] = self.now.get(phase, 0.0) + seconds

    def wrap(self, owner, name: str, phase: str, after: Callable | None = None) -> None:
        inner = getattr(owner, name)
        clock, add = time.perf_counter, self.add

        def timed(*args, **kwargs):
            began = clock()
            try:
                result = inner(*args, **kwargs)
            finally:
                add(phase, clock() - began)
            if after is not None:
                after(result)
            return result
        setattr(owner, name, timed)

    def install(self) -> None:
        from lazymlir.execution import compiled_plan, executor, partition
        from lazymlir.targets import cpu
        from lazymlir.tracing import materialize, values

        self.wrap(materialize, "live_pending_values", "collect")
        self.wrap(materialize, "build_graph", "graph build")
        self.wrap(materialize, "graph_key", "hash",
                  after=lambda keyed: setattr(self, "nodes", keyed[3]))
        self.wrap(executor.fx_graph, "structural_hash", "hash")
        self.wrap(executor, "_plan", "cache lookup")
        self.wrap(executor.Compiled, "run", "launch")
        self.wrap(partition.Partitioned, "run", "launch")
        self.wrap(compiled_plan.Started, "__init__", "launch")  # a background run's start
        self.wrap(values.LazyValue, "materialized", "bind")
        # A graph launched in the background (the default) runs its compiled code on a
        # native thread, not through `_entry`: the code's duration is what that thread
        # measured, and the wait for it is `lazymlir.wait()` (timed in `measure`).
        # "finished" is no phase of the table: it is inside that wait.
        self.wrap(cpu.BackgroundCall, "result", "finished",
                  after=lambda _: self.add("code in background", cpu.BackgroundCall.seconds()))
        phases = self
        init = cpu.CpuExecutable.__init__

        def init_timed(executable, *args, **kwargs):
            init(executable, *args, **kwargs)
            phases.wrap(executable, "_entry", "code inline")
        cpu.CpuExecutable.__init__ = init_timed


WORKLOADS = {
    "mlp": "mlp train step 64x256-512-256 SGD",
    "gpt": (f"gpt train step {models.GPTConfig().layers}x(d{models.GPTConfig().dim},"
            f"h{models.GPTConfig().heads}) b{models.BENCH_BATCH}xs{models.GPTConfig().seq} AdamW"),
}


def measure(key: str, calls: int, inductor: bool, phases: Phases) -> dict:
    import lazymlir

    make_model, make_opt, loss_fn, x, y = training_workload(key)
    pair = TrainingPair(make_model, make_opt, loss_fn, x, y)
    contenders: dict[str, Callable[[], object]] = {"eager": pair.eager_step}
    clock = time.perf_counter
    tracing: list[float] = []

    def lazy():
        began = clock()
        pair.lazy_step(mark_step=False)
        tracing.append(clock() - began)
        lazymlir.mark_step()
        began = clock()
        lazymlir.wait()  # the run is a phase of this call (not overlapped with the next)
        phases.add("wait", clock() - began)
    first = {}
    began = clock()
    lazy()
    first["lazy"] = clock() - began
    for backend in ["lazymlir"] + (["inductor"] if inductor else []):
        torch._dynamo.reset()
        m = make_model()
        o = make_opt(m.parameters())
        step = torch.compile(lambda m=m, o=o: _train_step(m, o, x, y, loss_fn),
                             backend=backend, dynamic=False)
        began = clock()
        step()
        first[backend] = clock() - began
        contenders[f"compile({backend})"] = step
    for _ in range(3):  # warm-up, everyone
        lazy()
        for fn in contenders.values():
            fn()
    tracing.clear()
    fallbacks = sum(lazymlir.metrics.fallback_ops().values())
    times: dict[str, list[float]] = {"lazy": [], **{name: [] for name in contenders}}
    per_phase: dict[str, list[float]] = {p: [] for p in PHASES}
    for _ in range(calls):
        phases.now = {}
        began = clock()
        lazy()
        times["lazy"].append(clock() - began)
        now = dict(phases.now)
        now.pop("finished", None)
        # Code run inline is inside launch; code run in the background overlaps the
        # user's thread (the rest of mark_step, the wait), so it is no part of the sum.
        inline, background = now.pop("code inline", 0.0), now.pop("code in background", 0.0)
        now["launch"] = now.get("launch", 0.0) - inline
        now["tracing"] = tracing[-1]
        now["other"] = times["lazy"][-1] - sum(now.values()) - inline
        now["code"] = inline + background
        for p in PHASES:
            per_phase[p].append(now.get(p, 0.0))
        for name, fn in contenders.items():
            began = clock()
            fn()
            times[name].append(clock() - began)
    ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
    ratios = {name: statistics.median(a / e for a, e in zip(t, times["eager"]))
              for name, t in times.items()}
    return {"ms": ms, "ratio": ratios, "first_s": first, "nodes": phases.nodes,
            "phases_ms": {p: 1e3 * statistics.median(v) for p, v in per_phase.items()},
            "fallbacks": sum(lazymlir.metrics.fallback_ops().values()) - fallbacks}


def _table(title: str, result: dict) -> list[str]:
    ms, ratio, ph = result["ms"], result["ratio"], result["phases_ms"]
    lines = [f"### {title}", "", "| contender | median ms | ratio to eager (median of per-round) "
             "| first call s |", "| --- | ---: | ---: | ---: |"]
    for name in ms:
        key = "lazy" if name == "lazy" else name[len("compile("):-1] if name != "eager" else None
        first = f"{result['first_s'][key]:.2f}" if key in result["first_s"] else "-"
        label = "lazy_mlir device (`mark_step()`)" if name == "lazy" else name
        lines.append(f"| {label} | {ms[name]:.3f} | {ratio[name]:.2f} | {first} |")
    lines += ["", f"Lazy step by phase ({result['nodes']} ops in the step's graph, "
              f"tracing {1e3 * ph['tracing'] / max(1, result['nodes']):.1f} us/op, "
              f"fallbacks {result['fallbacks']}):", "",
              "| phase | median ms | share of the lazy step |", "| --- | ---: | ---: |"]
    for p in PHASES:
        lines.append(f"| {p} | {ph[p]:.3f} | {100 * ph[p] / ms['lazy']:.0f}% |")
    return lines + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--calls", type=int, default=40, help="timed calls of each contender")
    parser.add_argument("--inductor", action="store_true")
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    import lazymlir
    import lazymlir.dynamo  # noqa: F401  backend="lazymlir" from a source checkout too

    phases = Phases()
    phases.install()
    load_before = os.getloadavg()
    lines = []
    for key in args.only.split(","):
        title = WORKLOADS[key]
        result = measure(key, args.calls, args.inductor, phases)
        lines += _table(title, result)
        print("\n".join(_table(title, result)), flush=True)
    load_after = os.getloadavg()
    header = [f"# Lazy training step by phase, next to eager and torch.compile "
              f"({args.label or 'unlabeled'})", "",
              f"    PYTHONPATH=. python {' '.join(['-m benchmarks.step_phases', *sys.argv[1:]])}",
              "", f"lazymlir {lazymlir.__version__}, target {lazymlir.target()}, torch "
              f"{torch.__version__}, {torch.get_num_threads()} threads; "
              f"{load_averages(load_before, load_after)}, on a 2-core machine shared "
              "with other jobs. Contenders alternate call by call (one call each per round), "
              f"{args.calls} timed calls each; medians.", ""]
    text = "\n".join(header + lines)
    if args.label:
        out = result_path(f"{args.label}.md")
        out.write_text(text + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
