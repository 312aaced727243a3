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
