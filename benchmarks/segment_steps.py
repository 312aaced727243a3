"""A training step compiled as segments, launched on the native thread or on the Python
execution thread, next to the same step run at mark_step() and eager, in one process.

    PYTHONPATH=. python -m benchmarks.segment_steps [--only mlp,gpt]
        [--segment-nodes mlp=12,gpt=200] [--rounds 15] [--steps 8] [--label NAME]

The step's graph is forced to split (LAZYMLIR_SEGMENT_NODES per workload), so each
step runs as a plan of several compiled segments. Contenders, each on its own copy of
the same initial weights: `native` (background runs; the segments run as one chain of
calls on the native thread, execution/segment_chain.py), `python thread` (background
runs with the chain turned off for its blocks: the plan runs on the Python execution
thread, as before the chain), `sync` (LAZYMLIR_ASYNC off: the plan runs at mark_step()
on the user's thread) and eager. Per round one call of each, every call timed; a call is
a block of `--steps` steps ended by a read of the last loss. Figures are per step:
medians over the rounds, and medians of per-round ratios. The machine's load is part
of the result (printed before and after).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from .results_dir import load_averages, report
from .run import TrainingPair, training_workload

CONTENDERS = ("native", "python thread", "sync", "eager")


def measure(rounds: int, steps: int, pair: TrainingPair) -> dict:
    import lazymlir
    from lazymlir.execution import segment_chain

    settings = lazymlir.config.settings()
    chains = segment_chain.starts_natively

    def block(name: str) -> None:
        if name == "eager":
            for _ in range(steps):
                loss = pair.eager_step()
            loss.item()
            return
        settings.async_execution = name != "sync"
        # The old path: a segmented plan is not started natively, so executor.launch
        # hands it to the Python execution thread.
        segment_chain.starts_natively = chains if name == "native" else (lambda plan: False)
        copy = CONTENDERS.index(name)
        try:
            for _ in range(steps):
                loss = pair.lazy_step(copy)
            loss.item()
        finally:
            segment_chain.starts_natively = chains

    for name in CONTENDERS:  # warm-up (the first lazy step compiles)
        block(name)
        block(name)
    times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    try:
        for _ in range(rounds):
            for name in CONTENDERS:
                began = time.perf_counter()
                block(name)
                times[name].append((time.perf_counter() - began) / steps)
    finally:
        settings.async_execution = True

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    return {"ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
            "native/python": ratio("native", "python thread"),
            "native/eager": ratio("native", "eager"),
            "python/eager": ratio("python thread", "eager"),
            "err": max(pair.max_abs_err(i) for i in range(3))}


def _segments(pair: TrainingPair) -> int:
    """How many segments the plan of one more lazy step has (0: not split)."""
    from lazymlir.execution import executor, partition

    launched = []
    launch = executor.launch

    def spy(plan, *args):
        launched.append(plan)
        return launch(plan, *args)

    executor.launch = spy
    try:
        pair.lazy_step().item()
    finally:
        executor.launch = launch
    return sum(len(p.plans) for p in launched if isinstance(p, partition.Partitioned))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--segment-nodes", default="mlp=12,gpt=200",
                        help="LAZYMLIR_SEGMENT_NODES per workload")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=8, help="steps per timed call")
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    import lazymlir

    limits = dict(item.split("=") for item in args.segment_nodes.split(","))
    load = [os.getloadavg()]
    lines = ["| workload | segments | native ms/step | python thread ms/step | sync ms/step | "
             "eager ms/step | native/python thread | native/eager | python thread/eager | "
             "max abs err |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    print("\n".join(lines), flush=True)
    for key in args.only.split(","):
        lazymlir.config.settings().segment_nodes = int(limits[key])
        pair = TrainingPair(*training_workload(key), lazy_copies=2)
        r = measure(args.rounds, args.steps, pair)
        ms = r["ms"]
        lines.append(f"| {key} train step | {_segments(pair)} | {ms['native']:.2f} | "
                     f"{ms['python thread']:.2f} | {ms['sync']:.2f} | {ms['eager']:.2f} | "
                     f"{r['native/python']:.2f} | {r['native/eager']:.2f} | "
                     f"{r['python/eager']:.2f} | {r['err']:.1e} |")
        print(lines[-1], flush=True)
    load.append(os.getloadavg())
    text = "\n".join([
        f"# A step compiled as segments: native thread against Python execution thread "
        f"({args.label or 'unlabeled'})", "",
        f"    PYTHONPATH=. python -m benchmarks.segment_steps {' '.join(sys.argv[1:])}", "",
        f"lazymlir {lazymlir.__version__}, target {lazymlir.target()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads; "
        f"{load_averages(*load)}, on a 2-core machine shared with other jobs. "
        f"{args.rounds} rounds of (native, python thread, sync, eager), one call of "
        f"{args.steps} steps and a read each, every call timed; per-step medians; ratios "
        "are medians of per-round ratios.", "", *lines])
    report(text, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
