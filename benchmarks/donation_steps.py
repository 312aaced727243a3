"""Lazy-device training steps with buffer donation on and off, alternated call by call
in one process, with eager steps between them.

    PYTHONPATH=. python -m benchmarks.donation_steps [--only mlp,wide,gpt] [--rounds 15]
        [--steps 1,8] [--unchecked] [--label NAME]

Donation (LAZYMLIR_DONATE, lazymlir/tracing/donation.py) is a setting read at every
sync (`lazymlir.config.settings().donate`): per round, one call each of the lazy step
with donation (`on`), without (`off`), and eager, each on its own copy of the same
initial weights. A call is `k` steps (each `--steps` value is a table row) ended by a
read of the last loss (`.item()`, which waits for the run); background runs as
configured (LAZYMLIR_ASYNC). Figures per step: medians over the rounds, and the median
of per-round on/off ratios (same minutes, same load). The eager call between lazy
calls is the "eager work" a training script alternates with its steps
(benchmarks/alternation.py). Workloads: benchmarks.run's "mlp" (SGD) and "gpt" (AdamW;
its step has check flags, which keep a graph's inputs unwritten: `--unchecked` sets
LAZYMLIR_BOUNDS_CHECKS=0 so that it donates), and donation_memory's "wide" (AdamW over
16 MB of parameters).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from .donation_memory import _wide
from .results_dir import load_averages, report
from .run import TrainingPair, training_workload

CONTENDERS = ("on", "off", "eager")


def measure(pair: TrainingPair, rounds: int, steps: int) -> dict:
    import lazymlir

    settings = lazymlir.config.settings()

    def block(name: str) -> None:
        if name == "eager":
            for _ in range(steps):
                loss = pair.eager_step()
            loss.item()
            return
        settings.donate = name == "on"
        for _ in range(steps):
            loss = pair.lazy_step(CONTENDERS.index(name))
        loss.item()

    for _ in range(2):  # compiles, caches
        for name in CONTENDERS:
            block(name)
    times = {name: [] for name in CONTENDERS}
    clock = time.perf_counter
    for _ in range(rounds):
        for name in CONTENDERS:
            began = clock()
            block(name)
            times[name].append((clock() - began) / steps)
    settings.donate = True
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="mlp,wide,gpt")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", default="1,8")
    parser.add_argument("--unchecked", action="store_true")
    parser.add_argument("--label", default=None)
    args = parser.parse_args()
    import lazymlir

    if args.unchecked:
        lazymlir.config.settings().bounds_checks = False
    load_before = os.getloadavg()
    rows = []
    for key in args.only.split(","):
        workload = _wide() if key == "wide" else training_workload(key)
        pair = TrainingPair(*workload, lazy_copies=1)
        before = lazymlir.metrics.counter("DonatedInputs")
        for steps in (int(s) for s in args.steps.split(",")):
            times = measure(pair, args.rounds, steps)
            med = {name: 1e3 * statistics.median(t) for name, t in times.items()}
            ratio = statistics.median(a / b for a, b in zip(times["on"], times["off"]))
            low, high = sorted(a / b for a, b in zip(times["on"], times["off"]))[::len(
                times["on"]) - 1]
            rows.append(f"| {key} | {steps} | {med['on']:.2f} | {med['off']:.2f} | "
                        f"{med['eager']:.2f} | {ratio:.2f} | {low:.2f}-{high:.2f} |")
        donated = lazymlir.metrics.counter("DonatedInputs") - before
        rows[-1] += f" donated inputs in all: {donated}"
    fallbacks = sum(lazymlir.metrics.fallback_ops().values())
    command = " ".join(["python -m benchmarks.donation_steps", *sys.argv[1:]])
    text = "\n".join([
        f"    PYTHONPATH=. {command}", "",
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, background runs "
        f"{'on' if lazymlir.config.settings().async_execution else 'off'}, bounds checks "
        f"{'off' if args.unchecked else 'on'}; {load_averages(load_before, os.getloadavg())}; "
        f"{args.rounds} rounds of (on, off, eager); eager fallbacks: {fallbacks}.", "",
        "| workload | steps per read | donation on ms/step | off ms/step | eager ms/step "
        "| on/off (median of rounds) | rounds' range |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |", *rows])
    report(text, args.label)


if __name__ == "__main__":
    main()
