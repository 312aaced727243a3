"""Cost of the compiled index / zero-divisor checks (lowering/front/checks.py), in one run.

    PYTHONPATH=. python benchmarks/bounds_checks.py [--repeats N] [--out FILE]

Each workload is one graph with the ops the checks guard. It runs on lazy_mlir
with the checks on (the default) and off (`LAZYMLIR_BOUNDS_CHECKS=0`, set through
`lazymlir.config.settings()`), interleaved, after a warm-up that compiles both
variants; a timed run is trace + sync (`.cpu()`) of the graph, as a user sees it.
The table gives medians and the overhead of the checked variant.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import lazymlir  # noqa: E402
from lazymlir import config  # noqa: E402

D = "lazy_mlir"


def workloads():
    g = torch.Generator().manual_seed(0)
    table = torch.randn(50_000, 256, generator=g).to(D)
    tokens = torch.randint(0, 50_000, (8, 512), generator=g).to(D)
    logits = torch.randn(4096, 1000, generator=g).to(D)
    labels = torch.randint(0, 1000, (4096, 1), generator=g).to(D)
    rows = torch.randint(0, 4096, (2048,), generator=g).to(D)
    a = torch.randint(-1000, 1000, (1 << 20,), generator=g).to(D)
    b = torch.randint(1, 50, (1 << 20,), generator=g).to(D)
    return {
        "embedding 8x512 of 50000x256": lambda: torch.nn.functional.embedding(tokens, table),
        "gather 4096x1 of 4096x1000": lambda: logits.gather(1, labels),
        "x[idx] 2048 rows of 4096x1000": lambda: logits[rows],
        "scatter_add 4096x1 into 4096x1000": lambda: torch.zeros(4096, 1000, device=D)
        .scatter_add(1, labels, torch.ones(4096, 1, device=D)),
        "int64 a // b, a % b (1M)": lambda: (a // b) + (a % b),
    }


def timed(fn) -> float:
    began = time.perf_counter()
    fn().cpu()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/bounds_checks.md"))
    args = parser.parse_args()
    settings = config.settings()
    rows = []
    for name, fn in workloads().items():
        times = {True: [], False: []}
        for checked in (True, False):  # warm-up: compile both variants
            settings.bounds_checks = checked
            timed(fn)
        for _ in range(args.repeats):
            for checked in (True, False):
                settings.bounds_checks = checked
                times[checked].append(timed(fn))
        on, off = statistics.median(times[True]), statistics.median(times[False])
        rows.append(f"| {name} | {off * 1e3:.3f} | {on * 1e3:.3f} | {100 * (on / off - 1):+.1f}% |")
    settings.bounds_checks = True
    load = os.getloadavg()
    lines = [
        "# Cost of the compiled bounds / zero-divisor checks",
        "",
        f"`PYTHONPATH=. python benchmarks/bounds_checks.py --repeats {args.repeats}` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, target "
        f"{lazymlir.config.settings().target}, load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}, {os.cpu_count()} CPUs. Median of trace + sync per run.",
        "",
        "| workload | checks off (ms) | checks on (ms) | overhead |",
        "| --- | --- | --- | --- |",
        *rows,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
