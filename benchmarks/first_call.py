"""First calls of a training step through torch.compile, and the floor of a free compiler.

    PYTHONPATH=. python -m benchmarks.first_call [--only mlp,gpt] [--rounds 2]
        [--backends aot_eager,lazymlir-warm,lazymlir,lazymlir-ewc,inductor] [--label NAME]

Each contender's first call of the MLP or GPT step of benchmarks/compiled_steps.py,
one fresh process per call, contenders alternating round by round (this machine's
speed drifts between processes), every cache empty (lazymlir's and inductor's own
folders per call). Contenders: any Dynamo backend; `lazymlir-ewc` (options
eager_while_compiling); `lazymlir-warm`, lazymlir's first call in a second process
that finds every graph in the disk cache the first process filled: Dynamo's and
AOTAutograd's tracing plus loading, i.e. what the first call would cost if compiling
took no time at all. The ratios to inductor's first call are per round.
Writes benchmarks/results/<today>/<label>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .results_dir import result_path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import json, sys, time
import torch
import torch._inductor.config as inductor_config
import lazymlir.dynamo  # noqa: F401  backend="lazymlir" from a source checkout too
from benchmarks.compiled_steps import VARIANTS, WORKLOADS

inductor_config.fx_graph_cache = False
backend, workload = sys.argv[1], sys.argv[2]
name, options = VARIANTS.get(backend, (backend, None))
make_step = WORKLOADS[workload][1]
make_step()  # the eager reference's model, as compiled_steps.py makes one first
step = torch.compile(make_step(), backend=name, dynamic=False, options=options)
start = time.perf_counter()
step()
print(json.dumps(time.perf_counter() - start))
"""


def first_call(backend: str, workload: str) -> float:
    """Seconds of `backend`'s first call in a fresh process with empty caches (for
    lazymlir-warm: in the second of two processes sharing one cache folder)."""
    env = dict(os.environ, LAZYMLIR_CACHE_DIR=tempfile.mkdtemp(prefix="lazymlir-first-"),
               TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-first-"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    name = backend.removesuffix("-warm")
    for _ in range(2 if backend.endswith("-warm") else 1):
        done = subprocess.run([sys.executable, "-c", _CHILD, name, workload], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{backend} on {workload} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="mlp,gpt")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backends",
                        default="aot_eager,lazymlir-warm,lazymlir,lazymlir-ewc,inductor")
    parser.add_argument("--label", default=None)
    args = parser.parse_args()
    backends = args.backends.split(",")
    load_before = os.getloadavg()[0]
    title = f"# First calls through torch.compile, cold and at the floor ({args.label or '-'})"
    lines = [title,
             "", f"    PYTHONPATH=. python -m benchmarks.first_call --only {args.only} "
             f"--rounds {args.rounds} --backends {args.backends}", ""]
    tables = []
    for workload in args.only.split(","):
        seconds: dict[str, list[float]] = {b: [] for b in backends}
        for _ in range(args.rounds):
            for backend in backends:
                seconds[backend].append(first_call(backend, workload))
                print(f"{workload} {backend} {seconds[backend][-1]:.2f} s", flush=True)
        rows = [f"## {workload}", "", "| contender | first call, s (each round) | median s |"
                + (" / inductor (each round) |" if "inductor" in seconds else ""),
                "| --- | --- | ---: |" + (" --- |" if "inductor" in seconds else "")]
        for backend, values in seconds.items():
            row = (f"| {backend} | {', '.join(f'{v:.2f}' for v in values)} | "
                   f"{statistics.median(values):.2f} |")
            if "inductor" in seconds:
                row += " " + ", ".join(f"{v / i:.2f}" for v, i in
                                       zip(values, seconds["inductor"])) + " |"
            rows.append(row)
        tables += rows + [""]
        print("\n".join(rows), flush=True)
    lines.append(f"{os.cpu_count()} cores, load average {load_before:.2f} before, "
                 f"{os.getloadavg()[0]:.2f} after. lazymlir-warm: lazymlir's first call in a "
                 "second process whose disk cache holds every graph (what a compiler that "
                 "took no time would give).")
    lines += [""] + tables
    if args.label:
        out = result_path(f"{args.label}.md")
        out.write_text("\n".join(lines))
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
