"""Speed of compiled bfloat16 roundings: LLVM's, eager's integer sequence, and libcalls.

    PYTHONPATH=. python -m benchmarks.bf16_rounding [--elements 4194304] [--calls 30]
        [--subnormal-every 64] [--label NAME]

Three one-input graphs on the lazy device (a float32 input of `--elements` values for
the first two, bfloat16 for the third), each traced once and its `loops` stage
(`05-loops.mlir` of a dump) lowered and built three ways:

- `integers` (lowering/cpu/bf16_rounding.py, as the cpu target compiles now): every
  float -> bfloat16 rounding in integer instructions, bfloat16 arithmetic in float;
- `llvm` (before it): the `fptrunc`s and `bfloat` arithmetic left to LLVM, which on
  a CPU with AVX512-BF16 uses `vcvtneps2bf16` (subnormals -> 0) and elsewhere calls
  `__truncsfbf2` per element;
- `no-avx512bf16`: `llvm`'s IR with `-mattr=-avx512bf16` for `opt`/`llc` (the other
  way to keep subnormals on such a CPU: one `__truncsfbf2` call per element).

The builds are loaded in this process and called in turn, call by call, then eager
PyTorch's own run of the function as many times, on the same input: normal values,
every `--subnormal-every`th one a float32 subnormal (subnormal operands and results
slow the float units). The table gives each one's median call, its ratio to
`integers`, and how many output values differ from eager's bits on that input.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.results_dir import report  # noqa: E402


def _convert_chain(x):  # float -> bf16 -> float, four times
    t = x
    for _ in range(4):
        t = (t + x).bfloat16().float()
    return t


GRAPHS = {
    "f32 -> bf16 (store)": (lambda x: x.bfloat16(), torch.float32),
    "f32 -> bf16 -> f32 x4": (_convert_chain, torch.float32),
    "bf16 arithmetic (a*a+a)*a": (lambda a: (a * a + a) * a, torch.bfloat16),
}
VARIANTS = ("integers", "llvm", "no-avx512bf16")


def _input(elements: int, dtype: torch.dtype, subnormal_every: int = 64) -> torch.Tensor:
    x = torch.randn(elements, generator=torch.Generator().manual_seed(0))
    if subnormal_every:  # float32 subnormals (and, as bfloat16, bfloat16 subnormals)
        x[::subnormal_every] *= 1e-39
    return x.to(dtype)


def _trace(fn, x: torch.Tensor, folder: Path) -> Path:
    """The dump folder of `fn(x)`'s graph on the lazy device."""
    import lazymlir

    with lazymlir.dump_to(str(folder)):
        fn(x.to("lazy_mlir")).cpu()
    graphs = [found.parent for found in folder.glob("*/05-loops.mlir")]
    if len(graphs) != 1:
        raise RuntimeError(f"expected one graph in {folder}, found {len(graphs)}")
    return graphs[0]


def _build(loops_text: str, variant: str, out: Path) -> Path:
    from lazymlir.lowering.cpu import bf16_rounding, codegen, stages

    patches = []
    if variant != "integers":  # the llvm stage as before bf16_rounding's rounding
        patches += [mock.patch.object(bf16_rounding, name, lambda module: None)
                    for name in ("round_in_integers", "widen_in_integers")]
        patches.append(mock.patch.object(bf16_rounding, "BF16_ARITHMETIC_PIPELINE", None))
    if variant == "no-avx512bf16":
        real_run = codegen._run

        def run(cmd):
            if Path(cmd[0]).name in ("opt", "llc"):
                cmd = [*cmd, "-mattr=-avx512bf16"]
            return real_run(cmd)
        patches.append(mock.patch.object(codegen, "_run", run))
    for patch in patches:
        patch.start()
    try:
        module = stages.to_llvm(loops_text)
        out.mkdir(parents=True)
        return codegen.build_shared_object(module, out)
    finally:
        for patch in reversed(patches):
            patch.stop()


def _alternate(calls: list, count: int) -> list[list[float]]:
    """Seconds of each of `count` calls of each of `calls`, taken in turn (after two
    rounds of warm-up)."""
    times: list[list[float]] = [[] for _ in calls]
    for round_ in range(count + 2):
        for k, call in enumerate(calls):
            began = time.perf_counter()
            call()
            if round_ >= 2:
                times[k].append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=4 * 1024 * 1024)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--subnormal-every", type=int, default=64,
                        help="every Nth input value a subnormal (0: none)")
    parser.add_argument("--label", default=None)
    args = parser.parse_args()

    from lazymlir.lowering.front import fx_graph
    from lazymlir.targets.cpu import CpuExecutable

    loads = [os.getloadavg()[0]]
    lines = [f"`python -m benchmarks.bf16_rounding --elements {args.elements} "
             f"--calls {args.calls} --subnormal-every {args.subnormal_every}`", "",
             "| graph | build | median call ms | vs integers | values not eager's |",
             "| --- | --- | ---: | ---: | ---: |"]
    with tempfile.TemporaryDirectory(prefix="lazymlir-bf16-rounding-") as scratch:
        for number, (name, (fn, dtype)) in enumerate(GRAPHS.items()):
            x = _input(args.elements, dtype, args.subnormal_every)
            folder = _trace(fn, x, Path(scratch) / f"dump{number}")
            graph = json.loads((folder / "00-fx.fx.json").read_text())
            assert len(graph["inputs"]) == 1 and not graph.get("scalars"), name
            loops_text = (folder / "05-loops.mlir").read_text()
            executables = [
                CpuExecutable(_build(loops_text, variant, Path(scratch) / f"{number}-{variant}"),
                              fx_graph.output_metas(graph), fx_graph.in_place_pairs(graph))
                for variant in VARIANTS]
            expected = fn(x).view(torch.int16 if fn(x).dtype == torch.bfloat16 else torch.int32)
            wrong = []
            for executable in executables:
                got = executable.run([x])[0]
                wrong.append(int((got.view(expected.dtype) != expected).sum()))
            # Eager apart, after them: its OpenMP threads spin a while after each op
            # (libgomp), on the cores the compiled code's threads then want.
            times = _alternate([functools.partial(e.run, [x]) for e in executables], args.calls)
            times += _alternate([functools.partial(fn, x)], args.calls)
            wrong.append(0)
            loads.append(os.getloadavg()[0])
            base = statistics.median(times[0])
            for variant, samples, bad in zip([*VARIANTS, "eager"], times, wrong):
                median = statistics.median(samples)
                lines.append(f"| {name} | {variant} | {median * 1e3:.2f} | "
                             f"{median / base:.2f} | {bad} |")
    lines.append("")
    lines.append(f"load average (1 min) during the run: {min(loads):.1f}-{max(loads):.1f}; "
                 f"torch threads {torch.get_num_threads()}; host AVX512-BF16: "
                 f"{'avx512_bf16' in Path('/proc/cpuinfo').read_text()}")
    report("\n".join(lines), args.label)


if __name__ == "__main__":
    main()
