"""What a second process pays when the persistent compile cache is warm.

    PYTHONPATH=. python -m benchmarks.warm_start [--runs 3]

Runs the MLP training step of benchmarks/run.py (batch 64, 256->512->256, SGD,
the loss read with .item()) for three steps in fresh processes sharing one new,
private cache folder: the first process compiles (cold), the next ones should
compile nothing. Each line: the imports (torch + lazymlir), the first step
(tracing, cache lookups, compiles or disk loads, the run, the sync), the next
steps, the whole process's wall time, and the counters that say what happened.
Writes benchmarks/results/<today>/warm-cache-first-step.md. Timings depend on the machine's load:
the load average is printed with them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

from benchmarks.results_dir import result_path

_CHILD = textwrap.dedent("""
    import time
    began = time.perf_counter()
    import json, sys, torch, lazymlir
    import torch.nn.functional as F
    imported = time.perf_counter()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256)).to("lazy_mlir")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256).to("lazy_mlir"), torch.randn(64, 256).to("lazy_mlir")

    def step():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        lazymlir.mark_step()
        return loss.item()

    t0 = time.perf_counter()
    losses = [step()]
    t1 = time.perf_counter()
    losses += [step(), step()]
    t2 = time.perf_counter()
    c = lazymlir.metrics.counters()
    print("RESULT", json.dumps({
        "import_s": imported - began, "first_step_s": t1 - t0, "next_steps_s": (t2 - t1) / 2,
        "uncached": c.get("UncachedCompile", 0), "disk_hits": c.get("DiskCacheHit", 0),
        "worker_starts": c.get("CompileWorkerStart", 0),
        "torch_mlir_imported": "torch_mlir" in sys.modules, "losses": losses}))
""")


def _run_child(cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    env.update(LAZYMLIR_TARGET="cpu", LAZYMLIR_CACHE_DIR=cache)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                          text=True, timeout=600)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return {**json.loads(line[len("RESULT "):]), "process_s": wall}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="warm processes after the cold one")
    args = parser.parse_args(argv)
    cache = tempfile.mkdtemp(prefix="lazymlir-warm-start-")
    try:
        results = [("cold", _run_child(cache))]
        results += [(f"warm {i + 1}", _run_child(cache)) for i in range(args.runs)]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    load = os.getloadavg()
    header = ("| process | imports s | first step s | next steps s | process wall s | "
              "UncachedCompile | DiskCacheHit | worker starts | torch_mlir imported |")
    lines = [header, "|" + " --- |" * 9]
    for name, r in results:
        lines.append(f"| {name} | {r['import_s']:.2f} | {r['first_step_s']:.3f} | "
                     f"{r['next_steps_s']:.4f} | {r['process_s']:.2f} | {r['uncached']} | "
                     f"{r['disk_hits']} | {r['worker_starts']} | {r['torch_mlir_imported']} |")
    same = all(r["losses"] == results[0][1]["losses"] for _, r in results)
    lines.append("")
    lines.append(f"Losses identical in every process: {same}. Load average while measured: "
                 f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs).")
    table = "\n".join(lines)
    print(table)
    out = result_path("warm-cache-first-step.md")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = f"PYTHONPATH=. python -m benchmarks.warm_start --runs {args.runs}"
    out.write_text(f"# Second process with a warm compile cache\n\n`{command}`, {stamp}.\n\n"
                   f"{table}\n")
    print(f"wrote {out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
