"""Side-by-side table of two benchmark result files (markdown, printed).

    python benchmarks/compare.py A.json B.json    # two benchmarks.run results

Rows are matched by workload name. Each file's eager column comes from its own
run (eager and lazy interleaved there), so compare ratios and `code ms` across
files; absolute eager times move with the machine's load.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _load(path: str) -> tuple[dict, dict[str, dict]]:
    data = json.loads(Path(path).read_text())
    return data["meta"], {row["name"]: row for row in data["rows"]}


def _gflops(row: dict, key: str) -> str:
    return f"{row['flops'] / row[key] / 1e6:.1f}" if row.get("flops") else ""


def table(before_path: str, after_path: str) -> str:
    (mb, before), (ma, after) = _load(before_path), _load(after_path)
    lines = [f"before: `{mb['label']}` at `{mb['commit']}` ({mb['date']}); "
             f"after: `{ma['label']}` at `{ma['commit']}` ({ma['date']}).", "",
             "| workload | before: eager ms | lazy ms | code ms | lazy/eager | "
             "after: eager ms | lazy ms | code ms | lazy/eager | code speed-up | "
             "GFLOP/s before (eager / code) | GFLOP/s after (eager / code) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, a in after.items():
        b = before.get(name)
        if b is None:
            continue
        gb = f"{_gflops(b, 'eager_ms')} / {_gflops(b, 'code_ms')}" if b.get("flops") else ""
        ga = f"{_gflops(a, 'eager_ms')} / {_gflops(a, 'code_ms')}" if a.get("flops") else ""
        lines.append(
            f"| {name} | {b['eager_ms']:.2f} | {b['lazy_ms']:.2f} | {b['code_ms']:.2f} | "
            f"{b['ratio']:.2f} | {a['eager_ms']:.2f} | {a['lazy_ms']:.2f} | {a['code_ms']:.2f} | "
            f"{a['ratio']:.2f} | {b['code_ms'] / a['code_ms']:.1f}x | {gb} | {ga} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(*sys.argv[1:3]))
