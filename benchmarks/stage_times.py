"""Wall and CPU time of each compile stage on a dumped graph, in one process.

    PYTHONPATH=. python -m benchmarks.stage_times <dump>/00-fx.fx.json [--to loops] [--target cpu]

Runs the stages after the input's (detected from its marker, as `lazymlir-opt` does) up
to `--to`, and prints each stage's wall and CPU seconds with the load average when it
ended. On a shared machine the wall time moves with the load; the CPU time is this
process's own (the stages before `package` run in it). A dump comes from
LAZYMLIR_DUMP_DIR (benchmarks/real_step_compile.py makes one of a real-size model's
training step). A profiling tool, like real_step_compile.py, not a table of ratios.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input")
    parser.add_argument("--to", default="loops", help="last stage to run")
    parser.add_argument("--target", default="cpu")
    args = parser.parse_args()

    from lazymlir.lowering import stages

    text = Path(args.input).read_text()
    began: dict[str, tuple[float, float]] = {}

    def on_start(name: str) -> None:
        began[name] = (time.perf_counter(), time.process_time())

    def on_stage(record) -> None:
        wall, cpu = began[record.name]
        print(f"| {record.name} | {time.perf_counter() - wall:.1f} | "
              f"{time.process_time() - cpu:.1f} | {os.getloadavg()[0]:.1f} |", flush=True)

    print("| stage | wall s | CPU s | load |\n| --- | ---: | ---: | ---: |")
    wall, cpu = time.perf_counter(), time.process_time()
    stages.run_stages(text, stages.Options(target=args.target), stop=args.to,
                      on_start=on_start, on_stage=on_stage)
    print(f"| total | {time.perf_counter() - wall:.1f} | {time.process_time() - cpu:.1f} | |")


if __name__ == "__main__":
    main()
