"""What crash isolation costs: compiles in the worker process vs in-process.

    PYTHONPATH=. python -m benchmarks.compile_isolation

Prints, for a small elementwise graph and an MLP training step (each compiled
cold, then hit in the memory cache): the first compile (worker start included),
later compiles of new graphs, and a cache hit, with LAZYMLIR_COMPILE_WORKER=1
(default) and =0, each measured in a fresh process. Medians of 3 new graphs per
row. Writes benchmarks/results/<today>/compile-worker-isolation-cost.md.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import textwrap

from benchmarks.results_dir import result_path

_CHILD = textwrap.dedent("""
    import json, statistics, time, torch, lazymlir
    from torch import nn
    D = "lazy_mlir"

    def elementwise(n):
        x = torch.randn(n, 7).to(D)
        return lambda: ((x * 2 + 1).relu() * 3).sum().cpu()

    def mlp_step(n):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(n, 32), nn.ReLU(), nn.Linear(32, 4)).to(D)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        x = torch.randn(8, n).to(D)
        def step():
            opt.zero_grad(); m(x).sum().backward(); opt.step(); lazymlir.mark_step()
        return step

    def timed(fn):
        began = time.perf_counter(); fn(); return time.perf_counter() - began

    out = {}
    for name, make in (("elementwise", elementwise), ("mlp_step", mlp_step)):
        first = timed(make(3))            # the first compile of the process (worker start)
        news = [timed(make(n)) for n in (4, 5, 6)]
        again = make(6)
        again()
        hits = [timed(again) for _ in range(5)]
        out[name] = {"first": first, "new": statistics.median(news),
                     "hit": statistics.median(hits)}
    print("RESULT", json.dumps(out))
""")


def _measure(worker: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    # No disk cache: every graph of every run compiles (it is on by default).
    env.update(LAZYMLIR_TARGET="cpu", LAZYMLIR_COMPILE_WORKER="1" if worker else "0",
               LAZYMLIR_CACHE_DIR="off")
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                          text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def main() -> None:
    isolated, inprocess = _measure(True), _measure(False)
    rows = ["| graph | measure | worker (ms) | in-process (ms) | ratio |",
            "| --- | --- | ---: | ---: | ---: |"]
    for graph in isolated:
        for what, label in (("first", "first compile (incl. worker start)"),
                            ("new", "compile of a new graph (median of 3)"),
                            ("hit", "memory-cache hit, whole step (median of 5)")):
            a, b = 1e3 * isolated[graph][what], 1e3 * inprocess[graph][what]
            rows.append(f"| {graph} | {label} | {a:.1f} | {b:.1f} | {a / b:.2f} |")
    table = "\n".join(rows)
    print(table)
    header = (f"# Compile isolation cost\n\n`PYTHONPATH=. python -m benchmarks.compile_isolation`, "
              f"{datetime.date.today()}, {platform.machine()} {os.cpu_count()} cores, "
              f"Python {platform.python_version()}.\n\n")
    out = result_path("compile-worker-isolation-cost.md")
    out.write_text(header + table + "\n")


if __name__ == "__main__":
    main()
