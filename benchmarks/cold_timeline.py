"""Where a cold first training step through torch.compile(backend="lazymlir") spends its time.

    PYTHONPATH=. python -m benchmarks.cold_timeline [mlp|gpt] [--eager-while-compiling]
        [--loop] [--threads N]

In a fresh process with an empty LAZYMLIR_CACHE_DIR (a temporary one), compiles the
MLP or GPT step of benchmarks/compiled_steps.py and prints, in seconds from the
first call's start: when Dynamo hands the backend a graph, when AOTAutograd hands
over each forward/backward/optimizer graph (its compile starts in a worker), when
each worker compile ends (with its stages' times, ms), when a run waits for its
compile, and when the first call returns (and, with --eager-while-compiling, when
every compile has ended; with --loop as well, the step is called again and again
instead, as a training loop would, until every graph has run compiled).
benchmarks/compiled_steps.py's first-call figure says how long; this says where
it went: Dynamo's and AOTAutograd's tracing, or lazymlir's compiles.

It wraps private functions of lazymlir.dynamo and lazymlir.execution.executor
(the points where graphs are handed over and compiles start, end and are waited
for): a profiling tool, kept in step with them by tests/python/e2e/test_cold_timeline.py.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def _timeline(workload: str, eager_while_compiling: bool,
              loop: bool = False) -> list[tuple[float, str]]:
    import torch

    from lazymlir import dynamo, metrics
    from lazymlir.execution import executor

    from .compiled_steps import WORKLOADS

    events: list[tuple[float, str]] = []
    start = None

    def log(message: str) -> None:
        if start is not None:
            events.append((time.perf_counter() - start, message))

    handed_over = dynamo._compile

    def compile_graph(gm, example_inputs, *args, **kwargs):
        log(f"AOTAutograd hands over a graph of {len(gm.graph.nodes)} nodes; its compile starts")
        return handed_over(gm, example_inputs, *args, **kwargs)

    worker_compile = executor._compile_and_store

    def compile_and_store(pool, payload, *args):
        result = worker_compile(pool, payload, *args)
        stages = ", ".join(f"{name} {1e3 * seconds:.0f}"
                           for name, seconds in result["timings"].items())
        log(f"compile {payload['key'][:8]} ended (ms: {stages})")
        return result

    waited = executor._compile

    def wait(current, target, text, key):
        log(f"a run waits for compile {key[:8]}")
        result = waited(current, target, text, key)
        log(f"compile {key[:8]} taken")
        return result

    def backend(gm, example_inputs, **kwargs):
        log(f"Dynamo hands the backend a graph of {len(gm.graph.nodes)} nodes")
        return dynamo.lazymlir_backend(gm, example_inputs, **kwargs)

    dynamo._compile, executor._compile_and_store, executor._compile = \
        compile_graph, compile_and_store, wait
    try:
        step = WORKLOADS[workload][1]()
        options = {"eager_while_compiling": True} if eager_while_compiling else None
        compiled = torch.compile(step, backend=backend, dynamic=False, options=options)
        start = time.perf_counter()
        compiled()
        log("first call returned")
        if eager_while_compiling and loop:
            steps, eager_runs = 1, -1
            while eager_runs != metrics.counter("EagerWhileCompiling"):
                eager_runs = metrics.counter("EagerWhileCompiling")
                compiled()
                steps += 1
            log(f"step {steps} ran every graph compiled ({eager_runs} eager runs before)")
        elif eager_while_compiling:
            executor.wait_for_compiles()
            log("every compile ended")
    finally:
        dynamo._compile, executor._compile_and_store, executor._compile = \
            handed_over, worker_compile, waited
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload", nargs="?", default="mlp", choices=("mlp", "gpt"))
    parser.add_argument("--eager-while-compiling", action="store_true")
    parser.add_argument("--loop", action="store_true",
                        help="with --eager-while-compiling: call the step until every "
                             "graph has run compiled, instead of waiting for the compiles")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    # Before lazymlir is imported: its session reads the setting once.
    os.environ["LAZYMLIR_CACHE_DIR"] = tempfile.mkdtemp(prefix="lazymlir-cold-")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    events = _timeline(args.workload, args.eager_while_compiling, args.loop)
    print(f"cold first {args.workload} step through torch.compile(backend='lazymlir'"
          + (", options={'eager_while_compiling': True})" if args.eager_while_compiling else ")")
          + f", {torch.get_num_threads()} threads, {os.cpu_count()} cores")
    print("| s | event |\n| ---: | --- |")
    for seconds, message in events:
        print(f"| {seconds:.2f} | {message} |")


if __name__ == "__main__":
    main()
