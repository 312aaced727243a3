"""Where a benchmark run writes its table: `benchmarks/results/<today, UTC>/<name>`.

Every script writes through `result_path`, so a new run lands in a folder of its own
day and never overwrites (or lets a cleanup of scratch runs delete) a result that the
docs cite; benchmarks/results/README.md indexes the kept ones.
"""

from __future__ import annotations

import datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def result_path(name: str) -> Path:
    """`results/<YYYY-MM-DD>/<name>` for today (UTC), its folder created."""
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    path = RESULTS / day / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def report(text: str, label: str | None) -> None:
    """The run's table: written to `result_path(<label>.md)` when the run is labelled
    (and the path printed), else printed."""
    if label:
        out = result_path(f"{label}.md")
        out.write_text(text + "\n")
        print(f"wrote {out}")
    else:
        print(text)


def load_averages(before: tuple[float, ...], after: tuple[float, ...]) -> str:
    """The machine's load around a run (`os.getloadavg()` before and after), which every
    table states: "load average (1, 5, 15 min) 0.4, 1.2, 3.0 before, 0.9, 1.2, 2.9 after"."""
    def triple(values) -> str:
        return ", ".join(f"{v:.1f}" for v in values)
    return f"load average (1, 5, 15 min) {triple(before)} before, {triple(after)} after"
