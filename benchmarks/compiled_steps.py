"""Steady-state training steps through torch.compile: eager against each backend, interleaved.

    PYTHONPATH=. python -m benchmarks.compiled_steps [--backends lazymlir,lazymlir-ewc,inductor]
        [--only mlp,gpt] [--rounds 10] [--threads N] [--label NAME]

The steady-state figure is a ratio to eager (the MLP and GPT steps of
benchmarks/run.py, same models, optimizers and batches). On a small machine that
ratio moves with whatever else runs, and the two sides do not feel load equally
(a parallel loop waits for its slowest thread). So here the contenders alternate
call by call (eager, then each backend, each on its own copy of the same initial
weights), every call timed, as a training script alternates eager work with its
steps (a switch between them is part of what a user pays), and the table gives
the median of the per-call times and the median of the per-round ratios to eager
(a round: one call of each; `--rounds` x the workload's calls per round).
Each backend runs in a process of its own (with its own eager reference): in one
process, the MLP step measured 0.96x eager through lazymlir alone and 1.34x next
to inductor's compiled step (eager itself went from 0.99 to 1.34 ms there).
Each backend's first call (its cold compile: give lazymlir an empty
LAZYMLIR_CACHE_DIR to measure one) is reported too; inductor gets a private cold
cache, as in benchmarks/run.py. Writes benchmarks/results/<today>/<label>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import statistics
import tempfile
import time
from pathlib import Path

import torch

from . import models
from .results_dir import report
from .run import _mlp, _mse, _train_step



def _mlp_step(seed: int = 0):
    model = _mlp(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 256, generator=generator), torch.randn(64, 256, generator=generator)
    return lambda: _train_step(model, opt, x, y, _mse)


def _gpt_step(seed: int = 0):
    config = models.GPTConfig()
    model = models.gpt(config, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, targets = models.gpt_batch(config, models.BENCH_BATCH, torch.Generator().manual_seed(1))
    return lambda: _train_step(model, opt, idx, targets, models.gpt_loss)


WORKLOADS = {
    # (title, step factory, calls of each contender per round)
    "mlp": ("mlp train step 64x256-512-256 SGD", _mlp_step, 50),
    "gpt": (f"gpt train step {models.GPTConfig().layers}x(d{models.GPTConfig().dim},"
            f"h{models.GPTConfig().heads}) b{models.BENCH_BATCH}xs{models.GPTConfig().seq} "
            "AdamW", _gpt_step, 5),
}


# Contender names beyond Dynamo's backends: lazymlir with options.
VARIANTS = {"lazymlir-ewc": ("lazymlir", {"eager_while_compiling": True})}


def measure(make_step, backends: list[str], block: int, rounds: int) -> dict:
    steps = {"eager": make_step()}
    first_s, ready_s = {}, {}
    for backend in backends:
        name, options = VARIANTS.get(backend, (backend, None))
        compiled = torch.compile(make_step(), backend=name, dynamic=False, options=options)
        start = time.perf_counter()
        compiled()
        first_s[backend] = time.perf_counter() - start
        if options is not None:  # eager_while_compiling: until every graph is compiled
            import lazymlir

            lazymlir.wait_for_compiles()
        ready_s[backend] = time.perf_counter() - start
        steps[backend] = compiled
    for step in steps.values():
        for _ in range(3):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds * block):
        for name, step in steps.items():  # one call each, every call timed
            start = time.perf_counter()
            step()
            times[name].append((time.perf_counter() - start) * 1e3)
    ratios = {name: statistics.median(t / e for t, e in zip(times[name], times["eager"]))
              for name in backends}
    return {"ms": {name: statistics.median(t) for name, t in times.items()},
            "ratio": ratios, "first_s": first_s, "ready_s": ready_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="lazymlir,inductor")
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--label", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cold-"))
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False
    import lazymlir.dynamo  # noqa: F401  backend="lazymlir" from a source checkout too

    backends = args.backends.split(",")
    load_before = os.getloadavg()[0]
    rows = []
    for key in args.only.split(","):
        title, make_step, block = WORKLOADS[key]
        if args.child:
            print(json.dumps(measure(make_step, backends, block, args.rounds)))
            continue
        result: dict = {"ms": {}, "ratio": {}, "first_s": {}, "ready_s": {}}
        for backend in backends:  # one process each (see the module docstring)
            command = [sys.executable, "-m", "benchmarks.compiled_steps", "--child",
                       "--backends", backend, "--only", key, "--rounds", str(args.rounds)]
            if args.threads:
                command += ["--threads", str(args.threads)]
            env = dict(os.environ)
            if env.get("LAZYMLIR_CACHE_DIR") and backend.startswith("lazymlir"):
                # A folder per lazymlir contender: the second would find the first's
                # graphs on disk and measure a warm start instead of a cold compile.
                env["LAZYMLIR_CACHE_DIR"] = os.path.join(env["LAZYMLIR_CACHE_DIR"], backend)
            done = subprocess.run(command, capture_output=True, text=True,
                                  cwd=Path(__file__).parent.parent, env=env)
            if done.returncode != 0:
                raise SystemExit(f"{backend} on {key} failed:\n{done.stderr[-3000:]}")
            child = json.loads(done.stdout.strip().splitlines()[-1])
            result["ms"][f"eager ({backend})"] = child["ms"]["eager"]
            for field in result:
                result[field][backend] = child[field][backend]
        rows.append((title, result))
        ms = result["ms"]
        cells = "  ".join(f"{b} {ms[b]:.3f} ms vs eager {ms[f'eager ({b})']:.3f} "
                          f"({result['ratio'][b]:.2f}x, first {result['first_s'][b]:.1f} s, "
                          f"compiled after {result['ready_s'][b]:.1f} s)"
                          for b in backends)
        print(f"{title}: {cells}", flush=True)
    if args.child:
        return
    load_after = os.getloadavg()[0]
    lines = [f"# torch.compile steady state, interleaved with eager ({args.label or 'unlabeled'})",
             "", f"    PYTHONPATH=. python -m benchmarks.compiled_steps --backends {args.backends} "
             f"--only {args.only} --rounds {args.rounds}"
             + (f" --threads {args.threads}" if args.threads else ""), "",
             f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
             f"{load_before:.2f} before, {load_after:.2f} after. One process per backend "
             f"and workload, each with its own eager reference; medians over {args.rounds} x "
             f"({', '.join(f'{k} {WORKLOADS[k][2]}' for k in args.only.split(','))}) calls "
             "of each contender, alternating call by call; ratio = median of the per-round "
             "(one call each) ratios to eager; first s = the "
             "backend's first call (a cold compile only with empty caches); ready s = "
             "from the first call's start until every graph runs compiled (lazymlir-ewc: "
             "lazymlir with options={'eager_while_compiling': True}, whose first calls run "
             "eagerly while the graphs compile; otherwise = first s).", "",
             "| workload | " + " | ".join(f"eager ms ({b}'s process) | {b} ms | {b}/eager | "
                                          f"{b} first s | {b} ready s" for b in backends) + " |",
             "| --- | " + " | ".join("---: | ---: | ---: | ---: | ---:" for _ in backends) + " |"]
    for title, result in rows:
        lines.append(f"| {title} | " + " | ".join(
            f"{result['ms'][f'eager ({b})']:.3f} | {result['ms'][b]:.3f} | "
            f"{result['ratio'][b]:.2f} | {result['first_s'][b]:.1f} | "
            f"{result['ready_s'][b]:.1f}" for b in backends) + " |")
    report("\n".join(lines), args.label)


if __name__ == "__main__":
    main()
