"""Where the first lazy training step of a real-size model spends its time, stage by stage.

    LAZYMLIR_CACHE_DIR=<empty> PYTHONPATH=. python -m benchmarks.real_step_compile [densenet121]

Builds one of the real-size models of tests/python/cases/real_models.py (the networks the
slow tests train), runs one training step on the lazy device (forward, backward, SGD with
momentum, `mark_step`, `loss.item()`) with its stage outputs dumped to a temporary folder,
and prints the tracing time, the step's wall time, the process's CPU time (its own and its
compile workers'), and, per compiled graph (each segment of a graph split for compiling,
execution/partition.py's `cut_points`, in the order they finished), its size and each
compile stage's time from the dump's manifest (lowering/compiler.py). A profiling tool
for compile time (benchmarks/results/2026-11-27/densenet-step-compile-breakdown.md), not a
table of ratios: it compiles once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# The model definitions live with the tests that train them.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python" / "cases"))

from .results_dir import load_averages  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="densenet121")
    args = parser.parse_args()
    dump = tempfile.mkdtemp(prefix="lazymlir-real-step-")
    os.environ["LAZYMLIR_DUMP_DIR"] = dump

    import torch
    from real_models import MODELS

    import lazymlir
    from lazymlir import session

    torch.manual_seed(0)
    model, x, y, loss_fn = MODELS[args.model]()
    model = model.to("lazy_mlir")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    load_before = os.getloadavg()
    cpu_before = os.times()
    began = time.perf_counter()
    loss = loss_fn(model(x.to("lazy_mlir")), y.to("lazy_mlir"))
    loss.backward()
    opt.step()
    traced = time.perf_counter()
    lazymlir.mark_step()
    loss.item()
    done = time.perf_counter()
    session.current().close()  # ends the compile workers: their CPU counts once waited for
    cpu = os.times()
    own = cpu.user + cpu.system - cpu_before.user - cpu_before.system
    workers = cpu.children_user + cpu.children_system - \
        cpu_before.children_user - cpu_before.children_system
    print(f"{args.model}: trace {traced - began:.1f} s, compile and run {done - traced:.1f} s, "
          f"step {done - began:.1f} s wall; CPU {own + workers:.1f} s (this process {own:.1f}, "
          f"compile workers and their tools {workers:.1f}); "
          f"{load_averages(load_before, os.getloadavg())}")
    manifests = sorted(Path(dump).rglob("manifest.json"), key=lambda p: p.stat().st_mtime)
    for manifest in manifests:
        found = json.loads(manifest.read_text())
        stages = ", ".join(f"{k} {v / 1e3:.1f}" for k, v in found["timings_ms"].items())
        cpu = f", CPU {found['cpu_ms'] / 1e3:.1f}" if "cpu_ms" in found else ""
        print(f"graph of {found['num_nodes']} nodes, {found['num_inputs']} inputs, "
              f"{found['num_outputs']} outputs; seconds: {stages}{cpu}")


if __name__ == "__main__":
    main()
