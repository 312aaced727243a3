"""Where recording one small op goes, layer by layer, and where a GPT training step's
tracing goes, part by part; process CPU time, one torch thread.

    PYTHONPATH=. python -m benchmarks.trace_attribution [--label NAME]

Per op (`torch.add` of two 8x8 tensors, chains of 1000, medians of 7 alternated
rounds): eager CPU; the lazy device (FunctionalTensorWrapper over the tracer's
LazyTensor), without and with autograd; the inner LazyTensor alone through PyTorch's
dispatcher (no functionalization, no autograd: PyTorch's C++ -> Python dispatch
entry, then the tracer); the Python tracer's entry called from Python (no dispatcher); the
op's Python recorder alone; an inner tensor made from Python (`LazyTensor(value)`)
alone. Differences between rows attribute the cost to a layer. Since 2026-11-28 the
dispatcher's entry is C++ (tracing/native_entry.cpp), which records `add` itself: the
Python rows are what an op the C++ entry hands to Python costs.

Per step: the small GPT's training step (benchmarks.run's "gpt": AdamW) split into
zero_grad, forward, backward (the autograd engine's device thread included) and the
optimizer step, lazy (traced, synced after each step outside the timing) and eager.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

N = 1000


def per_op() -> list[tuple[str, float]]:
    import lazymlir
    from lazymlir.tracing import recording, tracer
    from lazymlir.tracing.values import LazyTensor, value_of

    add = torch.ops.aten.add.Tensor
    xc, yc = torch.randn(8, 8), torch.randn(8, 8)
    xg = xc.clone().requires_grad_()
    xl, yl = xc.to("lazy_mlir"), yc.to("lazy_mlir")
    xlg = xc.to("lazy_mlir").requires_grad_()
    inner, inner_y = torch._from_functional_tensor(xl), torch._from_functional_tensor(yl)
    record = recording.recorder_of(add) or recording.make_recorder(add)
    value = value_of(inner)

    def chain(x, y):
        for _ in range(N):
            x = torch.add(x, y)

    def inner_chain(x):
        with torch._C.DisableTorchFunctionSubclass():  # as under a FunctionalTensorWrapper
            for _ in range(N):
                x = add(x, inner_y)

    def entry(x):
        for _ in range(N):
            x = tracer.dispatch(add, (x, inner_y), {})

    def recorder(x):
        for _ in range(N):
            x = record(add, (x, inner_y), {})

    def wrappers(x):
        for _ in range(N):
            LazyTensor(value)

    rows = {"eager CPU dispatch": (chain, xc, yc),
            "eager, x requires grad": (chain, xg, yc),
            "lazy_mlir tensor": (chain, xl, yl),
            "lazy_mlir tensor, x requires grad": (chain, xlg, yl),
            "inner LazyTensor through the dispatcher (no functionalization)": (inner_chain, inner),
            "tracer entry called from Python (no dispatcher)": (entry, inner),
            "the op's recorder alone": (recorder, inner),
            "an inner tensor made from Python alone": (wrappers, inner)}
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(9):
        for name, (fn, *args) in rows.items():
            began = time.process_time()
            fn(*args)
            times[name].append((time.process_time() - began) / N * 1e6)
        lazymlir.mark_step()
    return [(name, statistics.median(t[2:])) for name, t in times.items()]


def per_step(steps: int = 9) -> dict[str, list[float]]:
    import lazymlir

    from .run import TrainingPair, training_workload

    make_model, make_opt, loss_fn, x, y = training_workload("gpt")
    pair = TrainingPair(make_model, make_opt, loss_fn, x, y)

    def split(model, opt, xx, yy):
        clock = time.process_time
        t = [clock()]
        opt.zero_grad()
        t.append(clock())
        loss = loss_fn(model, xx, yy)
        t.append(clock())
        loss.backward()
        t.append(clock())
        opt.step()
        t.append(clock())
        return [1e3 * (b - a) for a, b in zip(t, t[1:])]
    for _ in range(3):
        pair.lazy_step(wait=True)
        pair.eager_step()
    lazy, eager = [], []
    for _ in range(steps):
        lazy.append(split(pair.lazy_model, pair.lazy_opt, pair.xl, pair.yl))
        lazymlir.mark_step()
        lazymlir.wait()
        eager.append(split(pair.eager_model, pair.eager_opt, x, y))
    return {name: [statistics.median(r[i] for r in rows) for i in range(4)]
            for name, rows in (("lazy_mlir (traced)", lazy), ("eager", eager))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    torch.set_num_threads(1)
    import lazymlir

    from .results_dir import report

    before = os.getloadavg()[0]
    ops = per_op()
    steps = per_step()
    eager = ops[0][1]
    lines = [f"# Tracing cost attributed ({args.label or 'unlabeled'})", "",
             "    PYTHONPATH=. python -m benchmarks.trace_attribution" +
             (f" --label {args.label}" if args.label else ""), "",
             f"lazymlir {lazymlir.__version__}, torch {torch.__version__}, 1 torch thread, "
             f"process CPU time; load average {before:.1f} before, {os.getloadavg()[0]:.1f} "
             "after (2-core machine shared with other jobs).", "",
             "| add 8x8, chain of 1000 | us per op | x eager |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {us:.2f} | {us / eager:.2f}x |" for name, us in ops]
    lines += ["", "| GPT training step, CPU ms | zero_grad | forward | backward | optimizer step |",
              "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {name} | " + " | ".join(f"{v:.2f}" for v in parts) + " |"
              for name, parts in steps.items()]
    report("\n".join(lines), args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
