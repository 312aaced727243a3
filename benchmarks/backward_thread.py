"""Lazy training steps with backward traced on the calling thread against the autograd
engine's device thread, next to eager, in one process.

    PYTHONPATH=. python -m benchmarks.backward_thread [--only mlp,gpt] [--calls 30]
        [--label NAME]

PyTorch's autograd engine hands a non-CPU device's backward to a thread of its own
per device (the caller wakes it and sleeps until it is done); under
`torch.autograd.set_multithreading_enabled(False)` it runs on the calling thread, as
CPU's does. Per round, one call each of: the lazy step with `backward()` under that
setting (the calling thread), the same with PyTorch's default (the device thread),
and eager, each on its own copy of the same
initial weights, every call timed (wall and process CPU). A lazy call is `step();
mark_step(); wait()`. `backward` is the `loss.backward()` call alone. Medians over
the calls; ratios are medians of per-round ratios to eager. The load is printed
before and after: on a shared 2-core machine the device thread's cost is mostly
waiting for a core, so it grows with the load.
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

CONTENDERS = ("calling thread", "device thread", "eager")


def measure(key: str, calls: int) -> dict:
    import lazymlir

    pair = TrainingPair(*training_workload(key), lazy_copies=1)
    wall, cpu = time.perf_counter, time.process_time
    backward: dict[str, list[float]] = {name: [] for name in CONTENDERS}

    def step(name: str) -> None:
        if name == "eager":
            model, opt, x, y = pair.eager_model, pair.eager_opt, pair.x, pair.y
        else:
            model, opt = pair.lazy[CONTENDERS.index(name)]
            x, y = pair.xl, pair.yl
        opt.zero_grad()
        loss = pair.loss_fn(model, x, y)
        began = wall()
        with torch.autograd.set_multithreading_enabled(name != "calling thread"):
            loss.backward()
        backward[name].append(wall() - began)
        opt.step()
        if name != "eager":
            lazymlir.mark_step()
            lazymlir.wait()

    for name in CONTENDERS:  # warm-up (the first lazy step compiles)
        for _ in range(3):
            step(name)
    for times in backward.values():
        times.clear()
    times = {name: [] for name in CONTENDERS}
    cpu_times = {name: [] for name in CONTENDERS}
    for _ in range(calls):
        for name in CONTENDERS:
            began, began_cpu = wall(), cpu()
            step(name)
            times[name].append(wall() - began)
            cpu_times[name].append(cpu() - began_cpu)
    return {"ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
            "cpu_ms": {k: 1e3 * statistics.median(v) for k, v in cpu_times.items()},
            "backward_ms": {k: 1e3 * statistics.median(v) for k, v in backward.items()},
            "ratio": {k: statistics.median(a / e for a, e in zip(v, times["eager"]))
                      for k, v in times.items()},
            "err": {k: pair.max_abs_err(CONTENDERS.index(k)) for k in CONTENDERS[:2]}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    import lazymlir

    load = [os.getloadavg()]
    lines = ["| workload | contender | step ms | step CPU ms | backward ms | ratio to eager | "
             "max abs err vs eager |", "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    print("\n".join(lines), flush=True)
    for key in args.only.split(","):
        r = measure(key, args.calls)
        for name in CONTENDERS:
            err = f"{r['err'][name]:.1e}" if name in r["err"] else "-"
            lines.append(f"| {key} train step | {name} | {r['ms'][name]:.2f} | "
                         f"{r['cpu_ms'][name]:.2f} | {r['backward_ms'][name]:.2f} | "
                         f"{r['ratio'][name]:.2f} | {err} |")
            print(lines[-1], flush=True)
    load.append(os.getloadavg())
    text = "\n".join([
        f"# Backward on the calling thread against the device thread ({args.label or 'unlabeled'})",
        "", f"    PYTHONPATH=. python -m benchmarks.backward_thread {' '.join(sys.argv[1:])}", "",
        f"lazymlir {lazymlir.__version__}, target {lazymlir.target()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads; "
        f"{load_averages(*load)}, on a 2-core machine shared with "
        f"other jobs. {args.calls} rounds of (calling thread, device thread, eager), one "
        "step each (a lazy step: `step(); mark_step(); wait()`), every call timed; medians; "
        "ratios are medians of per-round ratios to eager.", "", *lines])
    report(text, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
