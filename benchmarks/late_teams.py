"""The late-team policy of compiled CPU loops, on and off, next to eager, in one process.

    PYTHONPATH=. python -m benchmarks.late_teams [--only mlp,gpt] [--calls 30]

targets/cpu_threads.py runs a parallel loop on the calling thread alone for a while after
a fork whose team was late (a thread of PyTorch's OpenMP team waited for a core: a machine
busier than its cores). Here the lazy training step (its run waited for) runs with the
policy (`on`), without it (`off`: a late floor no wait reaches, so every fork goes to the
team, as before the policy), and eagerly, alternating call by call in one process;
medians, and the median of per-round ratios to eager. On a quiet machine the two lazy
columns should match (no fork is late); the policy pays off only under load, so the load
average is part of the result.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time

import torch

from .results_dir import load_averages, report
from .run import TrainingPair, training_workload

U64 = ctypes.c_uint64
# targets/cpu_threads.py's limits: late floor, first and longest alone windows (ns).
POLICY = {"on": (200_000, 10_000_000, 1_000_000_000), "off": (1 << 62, 10_000_000,
                                                              1_000_000_000)}


def measure(key: str, calls: int) -> dict:
    from lazymlir.targets import cpu

    pair = TrainingPair(*training_workload(key))
    eager = pair.eager_step

    def lazy():  # the step's run waited for: the policy acts on the compiled code
        pair.lazy_step(wait=True)
    for _ in range(3):
        lazy()
        eager()
    lib = cpu.threads_library()
    before = cpu.threads_stats()
    times: dict[str, list[float]] = {"on": [], "off": [], "eager": []}
    try:
        for _ in range(calls):
            for name in times:
                if name != "eager":
                    lib.lazymlir_threads_tune(*(U64(v) for v in POLICY[name]))
                began = time.perf_counter()
                (eager if name == "eager" else lazy)()
                times[name].append(time.perf_counter() - began)
    finally:
        lib.lazymlir_threads_tune(*(U64(v) for v in POLICY["on"]))
    after = cpu.threads_stats()
    return {"ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
            "ratio": {k: statistics.median(a / e for a, e in zip(times[k], times["eager"]))
                      for k in ("on", "off")},
            "late": after["late_forks"] - before["late_forks"],
            "alone": after["alone_forks"] - before["alone_forks"],
            "forks": after["forks"] - before["forks"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    load = [os.getloadavg()]
    lines = ["| workload | lazy, policy on ms | lazy, policy off ms | eager ms | on/eager | "
             "off/eager | forks | late | run alone |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key in args.only.split(","):
        r = measure(key, args.calls)
        lines.append(f"| {key} train step | {r['ms']['on']:.2f} | {r['ms']['off']:.2f} | "
                     f"{r['ms']['eager']:.2f} | {r['ratio']['on']:.2f} | {r['ratio']['off']:.2f} "
                     f"| {r['forks']} | {r['late']} | {r['alone']} |")
        print(lines[-1], flush=True)
    load.append(os.getloadavg())
    text = "\n".join([
        f"# Late-team policy on/off ({args.label or 'unlabeled'})", "",
        f"    PYTHONPATH=. python -m benchmarks.late_teams --only {args.only} --calls {args.calls}",
        "", f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{load_averages(*load)}, on a 2-core machine shared with "
        f"other jobs. {args.calls} rounds of (lazy on, lazy off, eager), one call each, every "
        "call timed; medians; ratios are medians of per-round ratios.", "", *lines])
    report(text, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
