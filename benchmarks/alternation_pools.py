"""Does running lazy steps leave eager slower? The eager step before and after them.

    PYTHONPATH=. python -m benchmarks.alternation_pools [--only mlp] [--calls 40]
        [--label NAME]

A slowdown that lazymlir leaves behind for the rest of the process slows eager's solo
calls as much as its alternated ones, so no alternated/solo ratio shows it: the
background thread's own OpenMP team, a second libgomp pool, made libgomp throttle every
team's spinning once the pools' threads outnumbered the cores, and the eager MLP step
took 1.8 ms after the first background run against 0.97 ms before
(targets/cpu_background.py). Here, in one fresh process: the eager step `calls` times
before any lazy step, after 10 lazy steps (each read and waited for), after 40, and
2.5 s after the last (when lazymlir's own throttling, started by a late fork on a busy
machine, has ended: targets/cpu_threads.py). Figures: median wall time, median voluntary
context switches of the calling thread per step (eager's workers sleeping between
regions wake it), and whether lazymlir throttled libgomp at that point. Compare
processes of two trees (or settings, `LAZYMLIR_ASYNC=0`) alternated.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

import torch

from .results_dir import load_averages, report
from .run import TrainingPair, training_workload


def _eager_block(pair: TrainingPair, calls: int) -> tuple[float, float]:
    """(median ms, median voluntary context switches) of `calls` eager steps, after 5."""
    times, switches = [], []
    for i in range(calls + 5):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
        began = time.perf_counter()
        pair.eager_step().item()
        if i >= 5:
            times.append(time.perf_counter() - began)
            switches.append(resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before)
    return 1e3 * statistics.median(times), statistics.median(switches)


def _throttling() -> str:
    from lazymlir.targets import cpu

    if cpu.threads_stats() is None:
        return "-"
    lib = cpu.threads_library()
    if not hasattr(lib, "lazymlir_threads_throttling"):
        return "n/a"  # a tree without it
    return "yes" if lib.lazymlir_threads_throttling() else "no"


def measure(key: str, calls: int) -> list[tuple[str, float, float, str]]:
    import lazymlir

    pair = TrainingPair(*training_workload(key))
    rows = [("before any lazy step", *_eager_block(pair, calls), _throttling())]
    for steps, label in ((10, "after 10 lazy steps"), (30, "after 40 lazy steps")):
        for _ in range(steps):
            pair.lazy_step().item()
            lazymlir.wait()
        rows.append((label, *_eager_block(pair, calls), _throttling()))
    time.sleep(2.5)
    rows.append(("2.5 s after the last lazy step", *_eager_block(pair, calls), _throttling()))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    import lazymlir

    load = [os.getloadavg()]
    lines = ["| workload | eager step | ms | context switches a step | lazymlir throttling |",
             "| --- | --- | ---: | ---: | --- |"]
    for key in args.only.split(","):
        for label, ms, switches, throttling in measure(key, args.calls):
            lines.append(f"| {key} train step | {label} | {ms:.2f} | {switches:g} | {throttling} |")
            print(lines[-1], flush=True)
    load.append(os.getloadavg())
    settings = lazymlir.config.settings()
    text = "\n".join([
        f"# The eager step before and after lazy steps ({args.label or 'unlabeled'})", "",
        f"    PYTHONPATH=. python -m benchmarks.alternation_pools {' '.join(sys.argv[1:])}", "",
        f"lazymlir {lazymlir.__version__}, target {lazymlir.target()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads, background runs "
        f"{'on' if settings.async_execution else 'off'}; {load_averages(*load)}, on a "
        f"2-core machine shared with other jobs.", "", *lines])
    report(text, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
