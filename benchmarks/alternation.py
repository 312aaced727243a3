"""Does alternating eager work and lazy steps slow either? Each contender alone and alternated.

    PYTHONPATH=. python -m benchmarks.alternation [--only mlp,gpt] [--rounds 5] [--calls 6]
        [--label NAME]

A training script alternates eager work (data, metrics, logging) with its steps; two
thread pools fighting for the cores (PyTorch's OpenMP threads spinning while compiled
code wants them) made such a program tens of times slower. Contenders, each on its own
copy of the same initial weights, one call = one training step and a read of its loss
(`.item()`; a lazy call then waits for its run's end with `lazymlir.wait()`: a read waits
only for the code up to the loss, and the rest is this call's, not the next one's): the
step eagerly, on `lazy_mlir` (`mark_step()`, background runs as configured), and through
torch.compile(backend="lazymlir"). Per round: `calls` rounds of one call of each
contender in turn (`alternating`), then each contender's `calls` calls in a row after
one untimed call (`solo`). Figures: medians over all timed calls; `alternating/solo` is
the median over rounds of the ratio of that round's medians (same minutes, same load).

Three control rows for eager, in the same rounds: "eager, with an eager copy" alternates
the eager step with the same step on a second copy of the model (no lazymlir code
between its calls: what alternating two working sets of this size costs eager by
itself); "eager, with sleeps" alternates it with a sleep as long as the other
contenders took between its calls in that round (what an idle gap costs it: its OpenMP
workers stop spinning, other processes take the cores and their caches); "eager before
any lazy step" times the eager step in a row before the process has run anything on
the lazy device (the first workload only), since a slowdown that lazymlir leaves
behind for the rest of the process (as a second OpenMP pool did:
targets/cpu_background.py) slows eager's solo calls as much as its alternated ones, and
no ratio of the two shows it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from .results_dir import load_averages, report
from .run import TrainingPair, _train_step, training_workload


def _timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def measure(key: str, rounds: int, calls: int, first: bool = False) -> dict:
    import lazymlir

    make_model, make_opt, loss_fn, x, y = training_workload(key)
    pair = TrainingPair(make_model, make_opt, loss_fn, x, y)
    copy = make_model()
    copy_opt = make_opt(copy.parameters())

    def eager_copy():
        _train_step(copy, copy_opt, x, y, loss_fn).item()

    before = []
    if first:  # eager alone before any lazy step of this process
        for _ in range(3):
            pair.eager_step().item()
        before = [_timed(lambda: pair.eager_step().item()) for _ in range(rounds * calls)]
    model = make_model()
    opt = make_opt(model.parameters())
    compiled = torch.compile(lambda: _train_step(model, opt, x, y, loss_fn),
                             backend="lazymlir", dynamic=False)
    contenders = {
        "eager": lambda: pair.eager_step().item(),
        "lazy_mlir device": lambda: (pair.lazy_step().item(), lazymlir.wait()),
        "compile(lazymlir)": lambda: compiled().item(),
    }
    for _ in range(3):  # warm-up: compiles, caches
        for fn in contenders.values():
            fn()
        eager_copy()
    fallbacks = sum(lazymlir.metrics.fallback_ops().values())
    control, sleeps = "eager, with an eager copy (control)", "eager, with sleeps (control)"
    rows = [*contenders, control, sleeps]
    alternating = {name: [] for name in rows}
    solo = {name: [] for name in rows}
    per_round = {name: [] for name in rows}
    for _ in range(rounds):
        mixed = {name: [] for name in rows}
        for _ in range(calls):
            for name, fn in contenders.items():
                mixed[name].append(_timed(fn))
        for _ in range(calls):  # the control: eager and its copy, nothing else
            mixed[control].append(_timed(contenders["eager"]))
            eager_copy()
        gap = sum(statistics.median(mixed[name]) for name in contenders if name != "eager")
        for _ in range(calls):  # and eager and idle gaps as long as the others' calls
            mixed[sleeps].append(_timed(contenders["eager"]))
            time.sleep(gap)
        for name, fn in contenders.items():
            fn()  # the switch from the others is the alternating case's
            alone = [_timed(fn) for _ in range(calls)]
            solo[name] += alone
            names = (name, control, sleeps) if name == "eager" else (name,)
            for row in names:
                alternating[row] += mixed[row]
                per_round[row].append(statistics.median(mixed[row]) / statistics.median(alone))
        solo[control] = solo[sleeps] = solo["eager"]
    result = {name: {"solo": 1e3 * statistics.median(solo[name]),
                     "alternating": 1e3 * statistics.median(alternating[name]),
                     "ratio": statistics.median(per_round[name]),
                     "spread": (min(per_round[name]), max(per_round[name]))}
              for name in rows}
    if before:
        result["eager before any lazy step"] = {"solo": 1e3 * statistics.median(before)}
    return result | {"fallbacks": sum(lazymlir.metrics.fallback_ops().values()) - fallbacks}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    import lazymlir

    load = [os.getloadavg()]
    lines = ["| workload | contender | solo ms | alternating ms | alternating/solo "
             "(median of rounds) | rounds' range |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    print("\n".join(lines), flush=True)
    fallbacks = 0
    for i, key in enumerate(args.only.split(",")):
        result = measure(key, args.rounds, args.calls, first=i == 0)
        fallbacks += result.pop("fallbacks")
        for name, r in result.items():
            if "alternating" not in r:
                lines.append(f"| {key} train step | {name} | {r['solo']:.2f} | | | |")
            else:
                lines.append(f"| {key} train step | {name} | {r['solo']:.2f} | "
                             f"{r['alternating']:.2f} | {r['ratio']:.2f} | "
                             f"{r['spread'][0]:.2f}-{r['spread'][1]:.2f} |")
            print(lines[-1], flush=True)
    load.append(os.getloadavg())
    settings = lazymlir.config.settings()
    text = "\n".join([
        f"# Eager work and lazy steps alternated, against each alone "
        f"({args.label or 'unlabeled'})", "",
        f"    PYTHONPATH=. python -m benchmarks.alternation {' '.join(sys.argv[1:])}", "",
        f"lazymlir {lazymlir.__version__}, target {lazymlir.target()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads, background runs "
        f"{'on' if settings.async_execution else 'off'}; {load_averages(*load)}, on a "
        f"2-core machine shared with other jobs. {args.rounds} rounds of {args.calls} calls "
        f"per contender alternated and {args.calls} alone; one call is a step and a read "
        f"of its loss; eager fallbacks during the timed calls: {fallbacks}.", "", *lines])
    report(text, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
