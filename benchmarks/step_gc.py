"""Python's garbage collector during training steps: the lazy device's step against the
same step eagerly, alternated call by call in one process.

    PYTHONPATH=. python -m benchmarks.step_gc [--only mlp,gpt] [--steps 150] [--freeze]
        [--label NAME]

A traced step makes a few Python objects per recorded op (a Node, a LazyValue, the
argument tuple, the inner tensor, its weak reference) that live until the sync, so they
survive the young collections and are promoted to the oldest generation; CPython then runs
a full collection (every tracked object in the process, most of them torch's own) each
time the promoted count since the last one passes a quarter of the old generation. Per
step of each side: process CPU ms (median), then the collections of each generation per
step and their wall ms per step (totals over the run divided by the steps; a collection
counts for the side whose step ran it), and the longest single collection. `--freeze`
calls `gc.freeze()` after the warm-up (every object alive then is never scanned again):
what a user can do about the full collections. One torch thread; the lazy step syncs
with `mark_step(); wait()`.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

import torch

from .results_dir import load_averages, report
from .run import TrainingPair, _train_step, training_workload


class _GcClock:
    """Wall time of each collection, by generation, charged to the current side."""

    def __init__(self):
        self.side = None
        self.began = 0.0
        self.stats = {}

    def __call__(self, phase, info):
        if phase == "start":
            self.began = time.perf_counter()
            return
        spent = time.perf_counter() - self.began
        row = self.stats.setdefault(self.side, {g: [0, 0.0] for g in range(3)} | {"max": 0.0})
        row[info["generation"]][0] += 1
        row[info["generation"]][1] += spent
        row["max"] = max(row["max"], spent)


def measure(key: str, steps: int, freeze: bool) -> dict:
    import lazymlir

    pair = TrainingPair(*training_workload(key))
    sides = {"lazy_mlir": (pair.lazy_model, pair.lazy_opt, pair.xl, pair.yl),
             "eager": (pair.eager_model, pair.eager_opt, pair.x, pair.y)}

    def step(side):
        model, opt, x, y = sides[side]
        _train_step(model, opt, x, y, pair.loss_fn)
        if side == "lazy_mlir":
            lazymlir.mark_step()
            lazymlir.wait()
    for _ in range(5):  # warm-up: the first lazy step compiles
        for side in sides:
            step(side)
    if freeze:
        gc.freeze()
    clock = _GcClock()
    gc.callbacks.append(clock)
    cpu = {side: [] for side in sides}
    try:
        for _ in range(steps):
            for side in sides:
                clock.side = side
                began = time.process_time()
                step(side)
                cpu[side].append(time.process_time() - began)
            clock.side = None
    finally:
        gc.callbacks.remove(clock)
        if freeze:
            gc.unfreeze()
    empty = {g: [0, 0.0] for g in range(3)} | {"max": 0.0}
    return {side: (1e3 * statistics.median(cpu[side]), clock.stats.get(side, empty))
            for side in sides}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--freeze", action="store_true")
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    torch.set_num_threads(1)
    import lazymlir

    before = os.getloadavg()
    lines = ["| step | side | CPU ms (median) | gen0 per step | gen0 ms | gen1 per step | gen1 ms "
             "| gen2 per step | gen2 ms | longest collection ms | step CPU / eager |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key in args.only.split(","):
        result = measure(key, args.steps, args.freeze)
        eager_cpu = result["eager"][0]
        for side, (cpu, stats) in result.items():
            cells = [f"{stats[g][0] / args.steps:.3f} | {1e3 * stats[g][1] / args.steps:.3f}"
                     for g in range(3)]
            lines.append(f"| {key} | {side} | {cpu:.2f} | {' | '.join(cells)} | "
                         f"{1e3 * stats['max']:.1f} | {cpu / eager_cpu:.2f} |")
    text = "\n".join([
        f"# Garbage collection in training steps ({args.label or 'unlabeled'})", "",
        f"    PYTHONPATH=. python -m benchmarks.step_gc {' '.join(sys.argv[1:])}", "",
        f"lazymlir {lazymlir.__version__}, target {lazymlir.target()}, torch {torch.__version__}, "
        f"1 torch thread, gc.freeze() after the warm-up: {'yes' if args.freeze else 'no'}; "
        f"{load_averages(before, os.getloadavg())}, on a 2-core machine shared with other "
        f"jobs. {args.steps} rounds of (lazy step with mark_step + wait, eager step); process "
        "CPU per step, collections and their wall ms per step (run totals / steps).", "",
        *lines])
    report(text, args.label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
