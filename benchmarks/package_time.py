"""CPU code generation time of a dumped `llvm` stage, with the graph entry compiled apart
at -O0 (the default for large modules) and with everything at -O3, alternating; with
`--then`, a second graph's after the first's nests went to an empty per-nest cache.

    PYTHONPATH=. python -m benchmarks.package_time <dump>/06-llvm.mlir [--rounds 2]
        [--then <dump of another graph>/06-llvm.mlir]

The input is the `llvm` stage's text from a `LAZYMLIR_DUMP_DIR` dump (e.g. the one
benchmarks/real_step_compile.py writes). Each round parses it once per contender (as the
stage hands its module to `package`: not timed) and times lowering/cpu/codegen.py's
`build_shared_object` on it: wall time and CPU time of this process and its tools. A
profiling tool for compile time (benchmarks/results/2026-11-27/densenet-step-package-breakdown.md),
not a table of ratios to eager.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path


def _cpu() -> float:
    own, tools = (resource.getrusage(who) for who in
                  (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + tools.ru_utime + tools.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("llvm_mlir", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--then", type=Path, default=None,
                        help="a graph compiled after the first with the first's nests cached")
    args = parser.parse_args()

    from mlir import ir

    from lazymlir.lowering.cpu import codegen

    text = args.llvm_mlir.read_text()
    then = args.then.read_text() if args.then else None
    apart = codegen.ENTRY_APART_MIN_BYTES
    print(f"{args.llvm_mlir}: {len(text) / 1e6:.1f} MB of LLVM dialect; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| round | build | wall s | CPU s |\n| --- | --- | ---: | ---: |")

    def build(round_, label, source, cache=None):
        context = ir.Context()
        with context:
            module = ir.Module.parse(source)
        with tempfile.TemporaryDirectory(prefix="lazymlir-package-") as directory:
            began, cpu = time.perf_counter(), _cpu()
            codegen.build_shared_object(module, Path(directory), cache)
            wall, cpu = time.perf_counter() - began, _cpu() - cpu
        print(f"| {round_} | {label} | {wall:.1f} | {cpu:.1f} |", flush=True)

    for round_ in range(args.rounds):
        for label, threshold in (("entry apart at -O0", apart), ("all at -O3", 1 << 62)):
            codegen.ENTRY_APART_MIN_BYTES = threshold
            build(round_, label, text)
        codegen.ENTRY_APART_MIN_BYTES = apart
        if then is not None:
            with tempfile.TemporaryDirectory(prefix="lazymlir-objects-") as cache:
                build(round_, "empty nest cache", text, cache)
                build(round_, f"{args.then.parent.name} after it", then, cache)
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
