"""Lazy training steps with background execution on and off, next to eager, in one process.

    PYTHONPATH=. python -m benchmarks.async_steps [--only mlp,gpt] [--rounds 15]
        [--steps 1,8,8r] [--segment-nodes N] [--label NAME]

`mark_step()` launches the step's graph on the execution thread and returns, so the
next step's tracing overlaps this step's run (LAZYMLIR_ASYNC, lazymlir/execution/
runs.py); with it off, the graph runs before `mark_step()` returns. Per round, one
call each of: the lazy step with background runs (`async`), without (`sync`), and
eager, each on its own copy of the same initial weights, every call timed. A call is
a block of `k` steps (each `--steps` value is a table row) ended by a read of the
last loss (`.item()`) and by `lazymlir.wait()`: a read waits only for the code up to
the loss (lowering/cpu/output_signals.py), and what runs after it (the backward, the
optimizer update) is the call's own, not the next contender's. k = 1 is one step
with its read (nothing to overlap); a larger k a loop that reads the loss every k
steps; `kr` (`8r`) a loop of k steps that reads the loss after every step, as a
training loop logging every step does (the next step's tracing overlaps what runs
after the loss).
Figures are per step: medians over the rounds, and medians of per-round ratios to
eager. The machine's load is part of the result (printed before and after).
`--segment-nodes N` sets LAZYMLIR_SEGMENT_NODES: a step's graph of more than N nodes
compiles and runs as segments (execution/segment_chain.py).
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

CONTENDERS = ("async", "sync", "eager")


def measure(key: str, rounds: int, steps: int, pair: TrainingPair,
            read_every_step: bool = False) -> dict:
    import lazymlir

    settings = lazymlir.config.settings()

    def block(name: str) -> None:
        if name == "eager":
            for _ in range(steps):
                loss = pair.eager_step()
                if read_every_step:
                    loss.item()
            loss.item()
            return
        settings.async_execution = name == "async"
        copy = CONTENDERS.index(name)
        for _ in range(steps):
            loss = pair.lazy_step(copy)
            if read_every_step:
                loss.item()
        loss.item()
        lazymlir.wait()

    for name in CONTENDERS:  # warm-up (the first lazy step compiles)
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
    return {"ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
            "ratio": {k: statistics.median(a / e for a, e in zip(v, times["eager"]))
                      for k, v in times.items()},
            "err": {k: pair.max_abs_err(CONTENDERS.index(k)) for k in ("async", "sync")}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", default="1,8,8r",
                        help="steps per timed call (comma separated; `8r`: 8 steps, the loss "
                             "read after each)")
    parser.add_argument("--segment-nodes", type=int, default=None,
                        help="LAZYMLIR_SEGMENT_NODES (a step bigger than this runs as segments)")
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    import lazymlir

    if args.segment_nodes is not None:
        lazymlir.config.settings().segment_nodes = args.segment_nodes

    load = [os.getloadavg()]
    lines = ["| workload | steps per call | async ms/step | sync ms/step | eager ms/step | "
             "async/eager | sync/eager | async/sync | max abs err async, sync |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    print("\n".join(lines), flush=True)
    for key in args.only.split(","):
        # Two lazy copies besides the first: async, sync (same weights as eager).
        pair = TrainingPair(*training_workload(key), lazy_copies=1)
        for spec in args.steps.split(","):
            steps = int(spec.rstrip("r"))
            r = measure(key, args.rounds, steps, pair, read_every_step=spec.endswith("r"))
            ms, ratio = r["ms"], r["ratio"]
            shown = f"{steps}, read each" if spec.endswith("r") else f"{steps}"
            lines.append(f"| {key} train step | {shown} | {ms['async']:.2f} | {ms['sync']:.2f} | "
                         f"{ms['eager']:.2f} | {ratio['async']:.2f} | {ratio['sync']:.2f} | "
                         f"{ms['async'] / ms['sync']:.2f} | {r['err']['async']:.1e}, "
                         f"{r['err']['sync']:.1e} |")
            print(lines[-1], flush=True)
    load.append(os.getloadavg())
    text = "\n".join([
        f"# Background execution on and off ({args.label or 'unlabeled'})", "",
        f"    PYTHONPATH=. python -m benchmarks.async_steps {' '.join(sys.argv[1:])}", "",
        f"lazymlir {lazymlir.__version__}, target {lazymlir.target()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads; "
        f"{load_averages(*load)}, on a 2-core machine shared with "
        f"other jobs. {args.rounds} rounds of (async, sync, eager), one call of `steps per "
        "call` steps each (`read each`: the loss read after every step), ended by a read "
        "and `lazymlir.wait()`, every call timed; per-step medians; ratios are medians of "
        "per-round ratios.", "", *lines])
    report(text, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
