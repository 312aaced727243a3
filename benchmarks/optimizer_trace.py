"""Tracing cost of an optimizer step on the lazy device: the small GPT's AdamW step and
one in-place `_foreach_` op, in process CPU time.

    PYTHONPATH=. python -m benchmarks.optimizer_trace [--steps 15] [--decompose-from COMMIT]
        [--without-foreach-meta] [--with-subclass-torch-function]
    PYTHONPATH=. python -m benchmarks.optimizer_trace --alternate foreach-dispatcher [--label NAME]

Prints (1) the median tracing CPU ms of the small GPT's training step (forward,
backward, AdamW; `benchmarks.run.training_workload("gpt")`, 3 warm-up steps, graphs run
in `mark_step()`: LAZYMLIR_ASYNC=0) and (2) the median CPU us per element of
`torch._foreach_addcmul_(vs, gs, gs, value=0.001)` over 30 lazy 64x64 tensors (AdamW's
second-moment update: one value in two places). Process CPU time, not wall time: the
machine may be shared (docs/tracing-performance.md).

`--decompose-from COMMIT` loads `lazymlir/tracing/decompose.py` of that commit (git) in
place of the current one, to compare a change of the decomposition templates in fresh
processes alternated with the current code. `--without-foreach-meta` unregisters the
fast Meta kernels of in-place foreach ops (tracing/foreach_meta.py), so that
functionalization's meta check runs PyTorch's own per-element kernels, as before them.
`--with-subclass-torch-function` gives the inner LazyTensor back Tensor's default
`__torch_function__` (as before tracing/values.py disabled it).

Also prints the step's tracing split into forward, backward (the autograd engine's
device thread included: process CPU time) and the optimizer step.

`--alternate VARIANT` compares the current code with a variant step by step in one
process, for the MLP (SGD) and GPT (AdamW) steps: each round traces one step each way
(variant first), timing the optimizer step and the whole step in process CPU time,
then `mark_step(); wait()`; medians over `--steps` rounds, written to
benchmarks/results/<today>/<label>.md. Variants: `foreach-dispatcher` (a `_foreach_`
op's element ops go back through PyTorch's dispatcher, as before
tracing/functional.py called the tracer's entry for them; with the C++ entry's
foreach route only where the Python tracer takes the call), `detached-parameters` (a second model
whose parameters stay views of a detached base after `.to("lazy_mlir")`, as before
lazymlir/module_moves.py made them bases).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import types


def _old_decompose(commit: str) -> None:
    from lazymlir.tracing import decompose

    source = subprocess.run(["git", "show", f"{commit}:lazymlir/tracing/decompose.py"],
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("lazymlir.tracing._decompose_then")
    module.__package__ = "lazymlir.tracing"
    exec(compile(source, f"{commit}:decompose.py", "exec"), module.__dict__)  # noqa: S102
    decompose.decomposer = module.decomposer  # routes are made on first use, after this


def gpt_step_ms(steps: int) -> float:
    import lazymlir

    from .run import TrainingPair, training_workload

    pair = TrainingPair(*training_workload("gpt"))
    for _ in range(3):
        pair.lazy_step()
    cpu = []
    parts = []
    clock = time.process_time
    model, opt = pair.lazy_model, pair.lazy_opt
    for _ in range(steps):
        began = clock()
        opt.zero_grad()
        loss = pair.loss_fn(model, pair.xl, pair.yl)
        forward = clock()
        loss.backward()
        backward = clock()
        opt.step()
        end = clock()
        cpu.append(end - began)
        parts.append((forward - began, backward - forward, end - backward))
        lazymlir.mark_step()
    global STEP_PARTS_MS
    STEP_PARTS_MS = [1e3 * statistics.median(p[i] for p in parts) for i in range(3)]
    return 1e3 * statistics.median(cpu)


STEP_PARTS_MS = [0.0, 0.0, 0.0]  # medians of gpt_step_ms's last run: forward, backward, step


def foreach_addcmul_us(rounds: int = 60) -> float:
    import lazymlir
    import torch

    vs = [torch.randn(64, 64).to("lazy_mlir") for _ in range(30)]
    gs = [torch.randn(64, 64).to("lazy_mlir") for _ in range(30)]
    times = []
    for r in range(rounds):
        began = time.process_time()
        torch._foreach_addcmul_(vs, gs, gs, value=0.001)
        times.append(time.process_time() - began)
        if r % 10 == 9:
            lazymlir.mark_step()
    return 1e6 * statistics.median(times[5:]) / len(vs)


VARIANTS = {"foreach-dispatcher": ("lazymlir.tracing.functional", "DIRECT_ELEMENTS", False),
            "detached-parameters": ("lazymlir.module_moves", "REBASE", False)}
# Variants that hold at the module move: a second model is moved with the variant on.
_AT_MOVE = {"detached-parameters"}


def alternate(variant: str, key: str, steps: int) -> dict:
    """Median CPU ms of (optimizer step, whole step) with `variant` and without."""
    import importlib

    import lazymlir

    from .run import TrainingPair, training_workload

    module, name, value = VARIANTS[variant]
    module = importlib.import_module(module)
    current = getattr(module, name)
    workload = training_workload(key)
    pair = TrainingPair(*workload)
    models = {False: (pair.lazy_model, pair.lazy_opt)}
    if variant in _AT_MOVE:
        setattr(module, name, value)
        variant_model = workload[0]().to("lazy_mlir")
        setattr(module, name, current)
        models[True] = variant_model, workload[1](variant_model.parameters())
    clock = time.process_time
    times: dict = {True: [], False: []}

    def step(on: bool) -> tuple[float, float]:
        model, opt = models.get(on, models[False])
        setattr(module, name, value if on and variant not in _AT_MOVE else current)
        began = clock()
        opt.zero_grad()
        loss = pair.loss_fn(model, pair.xl, pair.yl)
        loss.backward()
        middle = clock()
        opt.step()
        end = clock()
        setattr(module, name, current)
        lazymlir.mark_step()
        lazymlir.wait()
        return end - middle, end - began
    for _ in range(3):
        step(True), step(False)
    for _ in range(steps):
        for on in (True, False):
            times[on].append(step(on))
    return {on: tuple(1e3 * statistics.median(t[i] for t in times[on]) for i in range(2))
            for on in times}


def _alternate_report(variant: str, steps: int, label: str | None) -> None:
    from .results_dir import load_averages, report

    before = os.getloadavg()
    rows = []
    for key in ("mlp", "gpt"):
        result = alternate(variant, key, steps)
        (v_opt, v_step), (c_opt, c_step) = result[True], result[False]
        rows.append(f"| {key} | {c_opt:.3f} | {v_opt:.3f} | {c_step:.3f} | {v_step:.3f} |")
    command = (f"PYTHONPATH=. python -m benchmarks.optimizer_trace --alternate {variant} "
               f"--steps {steps}" + (f" --label {label}" if label else ""))
    lines = [f"# Optimizer tracing, current code against `{variant}`", "", f"    {command}", "",
             f"Tracing CPU ms per step (process CPU time), alternated step by step in one "
             f"process, {steps} rounds, medians; {load_averages(before, os.getloadavg())}, "
             "on a 2-core machine shared with other jobs.", "",
             "| step | optimizer, current | optimizer, variant | whole step, current "
             "| whole step, variant |", "| --- | ---: | ---: | ---: | ---: |", *rows]
    report("\n".join(lines), label)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--decompose-from", default=None)
    parser.add_argument("--without-foreach-meta", action="store_true")
    parser.add_argument("--with-subclass-torch-function", action="store_true")
    parser.add_argument("--alternate", choices=sorted(VARIANTS), default=None)
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    os.environ["LAZYMLIR_ASYNC"] = "0"
    if args.alternate:
        _alternate_report(args.alternate, args.steps, args.label)
        return 0
    if args.decompose_from:
        _old_decompose(args.decompose_from)
    if args.without_foreach_meta:
        from lazymlir.tracing import foreach_meta

        foreach_meta.uninstall()
    if args.with_subclass_torch_function:
        from lazymlir.tracing.values import LazyTensor

        del LazyTensor.__torch_function__
    step = gpt_step_ms(args.steps)
    forward, backward, optimizer = STEP_PARTS_MS
    print(f"gpt step tracing {step:.1f} CPU ms (forward {forward:.1f}, backward {backward:.1f}, "
          f"optimizer {optimizer:.1f}); foreach_addcmul_(v, g, g) "
          f"{foreach_addcmul_us():.1f} CPU us per element; load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
