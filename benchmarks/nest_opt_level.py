"""Speed of the compiled code and its `opt` time with the loop nests at two `opt` levels.

    PYTHONPATH=. python -m benchmarks.nest_opt_level <dump>/<graph> ... [--levels -O3,-O1]
        [--calls 30] [--label NAME]

Each argument is a graph's folder of a `LAZYMLIR_DUMP_DIR` dump (its `00-fx.fx.json`
and `06-llvm.mlir`). For each level, lowering/cpu/codegen.py builds the graph's
`.so` with `NEST_OPT_LEVEL` set to it (the nests' parts; a small module, compiled
whole, entirely), timing the `opt` processes; then every build is loaded in this
process and called in turn, call by call, on the same inputs (random floats,
integer inputs 0, every scalar 0.1: the code's speed, not its results). The table
gives each level's median call and its ratio to the first level's, and the CPU
seconds `opt` took: a compile-time choice, so the reference is the compiled code
at the other level, not eager.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.results_dir import report  # noqa: E402


def _build(folder: Path, level: str, out: Path) -> tuple[Path, float]:
    """(the graph's .so with the nests at `level`, CPU seconds of its `opt` runs)."""
    from mlir import ir

    from lazymlir.lowering.cpu import codegen

    opt_cpu = [0.0]
    real_run = codegen._run

    def run(cmd):  # each process's own CPU time (os.wait4), for the opt runs
        if Path(cmd[0]).name != "opt" or cmd[1] != level:
            return real_run(cmd)
        process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        if status != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({status})")
        opt_cpu[0] += usage.ru_utime + usage.ru_stime

    codegen._run, codegen.NEST_OPT_LEVEL = run, level
    try:
        with ir.Context():
            module = ir.Module.parse((folder / "06-llvm.mlir").read_text())
        out.mkdir(parents=True)
        so = codegen.build_shared_object(module, out)
    finally:
        codegen._run, codegen.NEST_OPT_LEVEL = real_run, "-O3"
    return so, opt_cpu[0]


def _inputs(graph: dict) -> list[torch.Tensor]:
    from lazymlir.lowering.front import fx_graph

    generator = torch.Generator().manual_seed(0)
    inputs = []
    for desc in graph["inputs"]:
        dtype = fx_graph.dtype_from_name(desc["dtype"])
        if dtype.is_floating_point:
            inputs.append(torch.randn(desc["shape"], generator=generator).to(dtype) * 0.1)
        else:
            inputs.append(torch.zeros(desc["shape"], dtype=dtype))
    scalars = torch.full((len(graph.get("scalars", ())),), 0.1, dtype=fx_graph.SCALAR_DTYPE)
    return inputs + list(scalars.unbind())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graphs", nargs="+", type=Path)
    parser.add_argument("--levels", default="-O3,-O1")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--label", default=None)
    args = parser.parse_args()
    levels = args.levels.split(",")

    from lazymlir.lowering.front import fx_graph
    from lazymlir.targets.cpu import CpuExecutable

    loads = [os.getloadavg()[0]]
    lines = [f"`python -m benchmarks.nest_opt_level {' '.join(map(str, args.graphs))} "
             f"--levels {args.levels} --calls {args.calls}`", "",
             "| graph | nodes | level | opt CPU s | median call ms | vs " + levels[0] + " |",
             "| --- | ---: | --- | ---: | ---: | ---: |"]
    with tempfile.TemporaryDirectory(prefix="lazymlir-opt-level-") as scratch:
        for number, folder in enumerate(args.graphs):
            graph = json.loads((folder / "00-fx.fx.json").read_text())
            executables, opt_cpu = [], []
            for level in levels:
                so, cpu = _build(folder, level, Path(scratch) / f"{number}{level}")
                executables.append(CpuExecutable(so, fx_graph.output_metas(graph),
                                                 fx_graph.in_place_pairs(graph)))
                opt_cpu.append(cpu)
            inputs = _inputs(graph)
            times: list[list[float]] = [[] for _ in levels]
            for call in range(args.calls + 2):  # (the first two: warm-up)
                for k, executable in enumerate(executables):
                    began = time.perf_counter()
                    executable.run(inputs)
                    if call >= 2:
                        times[k].append(time.perf_counter() - began)
            loads.append(os.getloadavg()[0])
            base = statistics.median(times[0])
            for level, cpu, samples in zip(levels, opt_cpu, times):
                median = statistics.median(samples)
                lines.append(f"| {folder.name} | {len(graph['nodes'])} | {level} | {cpu:.1f} | "
                             f"{median * 1e3:.2f} | {median / base:.3f} |")
    lines.append("")
    lines.append(f"load average (1 min) during the run: {min(loads):.1f}-{max(loads):.1f}; "
                 f"torch threads {torch.get_num_threads()}")
    report("\n".join(lines), args.label)


if __name__ == "__main__":
    main()
