"""What slows a torch.compile(backend="lazymlir") step that alternates with other work:
the step timed right after each kind of partner call, against itself called in a row.

    PYTHONPATH=. python -m benchmarks.alternation_partners [--only mlp] [--rounds 5]
        [--label NAME]

benchmarks.alternation found the compiled MLP step 1.2-1.3x its solo time when
alternated with eager and the lazy device. Partners here: the eager step, the lazy
step (background run, and run at mark_step(): no background thread), a 2 ms sleep,
2 ms of pure-Python work, and an eager pass over 16 MB (`mul_` and `sum` of a 4M-float
tensor: memory traffic, no lazymlir code). Per round and partner: six times (partner,
then the timed step), then the step once untimed and six times timed in a row. Figures:
medians of the step's wall time and of its thread's CPU time (`time.thread_time`),
after the partner and alone: a step slowed by another thread shows in its wall time
only; one that starts with its data and code evicted from the caches, in its CPU time.
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


def measure(key: str, rounds: int) -> dict:
    make_model, make_opt, loss_fn, x, y = training_workload(key)
    pair = TrainingPair(make_model, make_opt, loss_fn, x, y)
    model = make_model()
    opt = make_opt(model.parameters())
    compiled = torch.compile(lambda: _train_step(model, opt, x, y, loss_fn),
                             backend="lazymlir", dynamic=False)
    big = torch.ones(4 << 20)

    def python_work() -> None:
        began = time.perf_counter()
        while time.perf_counter() - began < 0.002:
            [object() for _ in range(50)]

    partners = {
        "eager step": lambda: pair.eager_step().item(),
        "lazy step": lambda: pair.lazy_step().item(),
        "lazy step at mark_step": lambda: pair.lazy_step(mark_step=False).item(),
        "sleep 2 ms": lambda: time.sleep(0.002),
        "Python work 2 ms": python_work,
        "16 MB eager pass": lambda: big.mul_(1.0).sum().item(),
    }

    def step() -> None:
        compiled().item()

    for _ in range(3):  # warm-up: compiles, caches
        step()
        for partner in partners.values():
            partner()
    clock, cpu = time.perf_counter, time.thread_time
    result = {}
    samples = {name: {"after": [], "after_cpu": [], "alone": [], "alone_cpu": []}
               for name in partners}
    for _ in range(rounds):
        for name, partner in partners.items():
            s = samples[name]
            for _ in range(6):
                partner()
                c, t = cpu(), clock()
                step()
                s["after"].append(clock() - t)
                s["after_cpu"].append(cpu() - c)
            step()
            for _ in range(6):
                c, t = cpu(), clock()
                step()
                s["alone"].append(clock() - t)
                s["alone_cpu"].append(cpu() - c)
    for name, s in samples.items():
        result[name] = {k: 1e3 * statistics.median(v) for k, v in s.items()}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    import lazymlir

    load = [os.getloadavg()]
    lines = ["| workload | partner | step after it ms | alone ms | ratio | CPU after ms | "
             "CPU alone ms | CPU ratio |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    print("\n".join(lines), flush=True)
    for key in args.only.split(","):
        for name, r in measure(key, args.rounds).items():
            lines.append(f"| {key} train step, compile(lazymlir) | {name} | {r['after']:.2f} | "
                         f"{r['alone']:.2f} | {r['after'] / r['alone']:.2f} | "
                         f"{r['after_cpu']:.2f} | {r['alone_cpu']:.2f} | "
                         f"{r['after_cpu'] / r['alone_cpu']:.2f} |")
            print(lines[-1], flush=True)
    load.append(os.getloadavg())
    text = "\n".join([
        f"# A compiled step after other work, against itself in a row "
        f"({args.label or 'unlabeled'})", "",
        f"    PYTHONPATH=. python -m benchmarks.alternation_partners {' '.join(sys.argv[1:])}",
        "", f"lazymlir {lazymlir.__version__}, target {lazymlir.target()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads; {load_averages(*load)}, "
        f"on a 2-core machine shared with other jobs. {args.rounds} rounds; medians.", "",
        *lines])
    report(text, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
