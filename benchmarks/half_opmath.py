"""Cost of computing half/bfloat16 ops as eager does (float32, one rounding) on the cpu target.

    PYTHONPATH=. python -m benchmarks.half_opmath [--elements 4194304] [--calls 30]
        [--label NAME]

Each graph is traced once on the lazy device; its fx graph is compiled from the `fx`
stage two ways and both builds are called in turn, call by call, then eager PyTorch as
many times, on the same inputs:

- `eager-rules` (as the cpu target compiles now): lowering/front/numerics_opmath.py
  (mul/div by a number in float32, add alpha, activations and log_softmax in float32),
  half `math` in float32 and expm1/log1p from exp and log (lowering/cpu/bf16_rounding.py,
  small_math.py);
- `before`: those rules off (only the pools/fmod/_trilinear opmath that existed before),
  half `math` left to LLVM's promotion, expm1/log1p as exp(x) - 1 and log(1 + x).

The table gives each build's median call, its ratio to `before`, and how many output
values differ from eager's bits.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bf16_rounding import _alternate  # noqa: E402
from benchmarks.results_dir import report  # noqa: E402

BF16, F16 = torch.bfloat16, torch.float16
GRAPHS = {
    "bf16 (a * 1e-3 + b) * 0.5 - a / 3": (lambda a, b: (a * 1e-3 + b) * 0.5 - a / 3, BF16),
    "bf16 gelu(a) * b + a * 0.1": (lambda a, b: F.gelu(a) * b + a * 0.1, BF16),
    "bf16 a + 0.3 * b (alpha)": (lambda a, b: torch.add(a, b, alpha=0.3), BF16),
    "f16 (a * 1e-3 + b).abs().rsqrt()": (lambda a, b: (a * 1e-3 + b).abs().rsqrt(), F16),
    "f16 sigmoid(a) * b.expm1()": (lambda a, b: a.sigmoid() * b.expm1(), F16),
    "f32 expm1(a) + log1p(b.abs())": (lambda a, b: a.expm1() + b.abs().log1p(), torch.float32),
}
VARIANTS = ("before", "eager-rules")


def _patches(variant: str) -> list:
    from lazymlir.lowering.cpu import bf16_rounding, small_math
    from lazymlir.lowering.front import numerics_opmath as rules

    if variant != "before":
        return []
    old_opmath = {op for op in rules.OPMATH if "pool" in str(op) or "fmod" in str(op)
                  or "trilinear" in str(op)}
    return [mock.patch.object(rules, "OPMATH", old_opmath),
            mock.patch.object(rules, "SCALAR_OPMATH", set()),
            mock.patch.object(rules, "ALPHA_OPS", set()),
            mock.patch.object(rules, "log_softmax", lambda b, node: None),
            mock.patch.object(rules, "elu", lambda b, node: None),
            mock.patch.object(bf16_rounding, "HALF_MATH_PIPELINE",
                              "builtin.module(func.func(math-extend-to-supported-types"
                              "{extra-types=f16 target-type=f32}))"),
            mock.patch.object(small_math, "expand", lambda module: 0)]


def _build(fx_text: str, variant: str, out: Path) -> Path:
    from lazymlir.lowering import stages
    from lazymlir.lowering.cpu import codegen, stages as cpu_stages
    from lazymlir.lowering.front import numerics

    with ExitStack() as stack:
        for patch in _patches(variant):
            stack.enter_context(patch)
        # (numerics.REWRITES holds the functions: look them up again under the patches)
        from lazymlir.lowering.front import numerics_opmath as rules
        rewrites = tuple(getattr(rules, f.__name__) if f.__module__ == rules.__name__ else f
                         for f in numerics.REWRITES)
        stack.enter_context(mock.patch.object(numerics, "REWRITES", rewrites))
        loops = stages.run_stages(fx_text, stages.Options(target="cpu"), start="fx",
                                  stop="loops").text
        module = cpu_stages.to_llvm(loops)
        out.mkdir(parents=True)
        return codegen.build_shared_object(module, out)


def _inputs(elements: int, dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(elements, generator=g).to(dtype) for _ in range(2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=4 * 1024 * 1024)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--label", default=None)
    args = parser.parse_args()

    import lazymlir
    from lazymlir.lowering.front import fx_graph
    from lazymlir.targets.cpu import CpuExecutable

    loads = [os.getloadavg()[0]]
    lines = [f"`python -m benchmarks.half_opmath --elements {args.elements} "
             f"--calls {args.calls}`", "",
             "| graph | build | median call ms | vs before | values not eager's |",
             "| --- | --- | ---: | ---: | ---: |"]
    with tempfile.TemporaryDirectory(prefix="lazymlir-half-opmath-") as scratch:
        for number, (name, (fn, dtype)) in enumerate(GRAPHS.items()):
            inputs = _inputs(args.elements, dtype)
            folder = Path(scratch) / f"dump{number}"
            with lazymlir.dump_to(str(folder)):
                fn(*(x.to("lazy_mlir") for x in inputs)).cpu()
            (fx_path,) = folder.glob("*/00-fx.fx.json")
            fx_text = fx_path.read_text()
            graph = json.loads(fx_text)
            used = [inputs[meta_index] for meta_index in range(len(graph["inputs"]))]
            values = _scalar_values(fn, dtype, len(graph.get("scalars", [])))
            executables = [
                CpuExecutable(_build(fx_text, variant, Path(scratch) / f"{number}-{variant}"),
                              fx_graph.output_metas(graph), fx_graph.in_place_pairs(graph))
                for variant in VARIANTS]
            expected = fn(*inputs)
            view = torch.int16 if expected.dtype in (BF16, F16) else torch.int32
            wrong = []
            for executable in executables:
                got = executable.run(used, values)[0]
                wrong.append(int((got.view(view) != expected.view(view)).sum()))
            times = _alternate([functools.partial(e.run, used, values) for e in executables],
                               args.calls)
            times += _alternate([functools.partial(fn, *inputs)], args.calls)
            wrong.append(0)
            loads.append(os.getloadavg()[0])
            base = statistics.median(times[0])
            for variant, samples, bad in zip([*VARIANTS, "eager"], times, wrong):
                median = statistics.median(samples)
                lines.append(f"| {name} | {variant} | {median * 1e3:.2f} | "
                             f"{median / base:.2f} | {bad} |")
    lines.append("")
    lines.append(f"load average (1 min) during the run: {min(loads):.1f}-{max(loads):.1f}; "
                 f"torch threads {torch.get_num_threads()}")
    report("\n".join(lines), args.label)


# The numbers each graph's tracer lifted to scalar inputs, in order (what the lazy
# device passes at run time).
SCALARS = {
    "bf16 (a * 1e-3 + b) * 0.5 - a / 3": [1e-3, 0.5],
    "bf16 gelu(a) * b + a * 0.1": [0.1],
    "bf16 a + 0.3 * b (alpha)": [0.3],
    "f16 (a * 1e-3 + b).abs().rsqrt()": [1e-3],
}


def _scalar_values(fn, dtype, count: int) -> list[float]:
    name = next(n for n, (f, _) in GRAPHS.items() if f is fn)
    values = SCALARS.get(name, [])
    if len(values) != count:
        raise RuntimeError(f"{name}: {count} scalar inputs, expected {values}")
    return values


if __name__ == "__main__":
    main()
