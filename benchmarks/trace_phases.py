"""A lazy training step's tracing by phase of the step, against the same Python code
eagerly on tiny tensors (PyTorch's own per-step cost: modules, autograd, optimizer,
dispatch, with kernels of a few nanoseconds), in one process.

    PYTHONPATH=. python -m benchmarks.trace_phases [--only mlp|gpt] [--calls 200] [--label NAME]

Per round, one call each of: the lazy MLP step (64x256-512-256, SGD; zero_grad,
forward, backward and the optimizer step timed apart, then `mark_step(); wait()`),
and the same step eagerly on a 4-8-4 MLP of batch 2 (the same modules, ops and
optimizer); `--only gpt`: the small GPT's AdamW step (benchmarks/models.py) against
the same GPT of width 8, sequence 4 and batch 2. Process CPU time (every thread: the
autograd engine's and the execution thread's included), one torch thread (two
intra-op threads make a tiny eager step wait for each other), medians over the
calls. `mark_step + wait` is the lazy step's sync: graph key, plan lookup, launch
and the compiled code; the eager column has no counterpart. `compiled code` is the
CPU time inside the compiled graph's entry (on the thread that ran it) and `sync
less the code` the sync's fixed cost: what the runtime adds around the code
(collecting the pending values, the key, the plan lookup, the launch and the
hand-off to the execution thread, the argument frame and output buffers, binding
the outputs). The ratio of a phase is how much more the lazy device's recording
costs than eager's dispatch of the same calls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from .results_dir import load_averages, report
from . import models
from .run import TrainingPair, _mse, training_workload

PHASES = ("zero_grad", "forward", "backward", "optimizer step", "traced step", "mark_step + wait",
          "compiled code", "sync less the code")
_code = [0.0]  # CPU seconds in compiled code (on whichever thread ran it)


def _time_compiled_code() -> None:
    """Wrap each cpu executable's entry to add its thread CPU time to `_code`."""
    from lazymlir.targets import cpu

    init = cpu.CpuExecutable.__init__

    def init_timed(executable, *args, **kwargs):
        init(executable, *args, **kwargs)
        entry, clock = executable._entry, time.thread_time

        def timed(frame):
            began = clock()
            entry(frame)
            _code[0] += clock() - began
        executable._entry = timed
    cpu.CpuExecutable.__init__ = init_timed


def _step(model, opt, x, y, sync: bool, loss_fn=_mse) -> list[float]:
    import lazymlir

    clock = time.process_time
    a = clock()
    opt.zero_grad()
    b = clock()
    loss = loss_fn(model, x, y)
    c = clock()
    loss.backward()
    d = clock()
    opt.step()
    e = clock()
    _code[0] = 0.0
    if sync:
        lazymlir.mark_step()
        lazymlir.wait()
    f = clock()
    return [b - a, c - b, d - c, e - d, e - a, f - e, _code[0], f - e - _code[0]]


def _tiny(key: str):
    """(model, optimizer, x, y, loss_fn) of the workload's step on tiny tensors."""
    torch.manual_seed(0)
    if key == "mlp":
        tiny = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
        return tiny, torch.optim.SGD(tiny.parameters(), lr=0.01), torch.randn(2, 4), \
            torch.randn(2, 4), _mse
    config = models.GPTConfig(vocab=16, seq=4, dim=8, heads=2, layers=2)
    tiny = models.gpt(config, 0)
    return (tiny, torch.optim.AdamW(tiny.parameters(), lr=1e-3),
            *models.gpt_batch(config, 2, torch.Generator().manual_seed(1)), models.gpt_loss)


def measure(calls: int, key: str = "mlp") -> dict:
    _time_compiled_code()
    pair = TrainingPair(*training_workload(key))
    tiny, tiny_opt, tx, ty, tiny_loss = _tiny(key)
    for _ in range(5):  # warm-up (the first lazy step compiles)
        _step(pair.lazy_model, pair.lazy_opt, pair.xl, pair.yl, True, pair.loss_fn)
        _step(tiny, tiny_opt, tx, ty, False, tiny_loss)
    lazy, eager = [], []
    for _ in range(calls):
        lazy.append(_step(pair.lazy_model, pair.lazy_opt, pair.xl, pair.yl, True, pair.loss_fn))
        eager.append(_step(tiny, tiny_opt, tx, ty, False, tiny_loss))
    return {p: (1e6 * statistics.median(r[i] for r in lazy),
                1e6 * statistics.median(r[i] for r in eager)) for i, p in enumerate(PHASES)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp", choices=("mlp", "gpt"),
                        help="mlp (64x256-512-256, SGD) or gpt (benchmarks/models.py, AdamW)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--label", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("LAZYMLIR_TARGET", "cpu")
    torch.set_num_threads(1)
    import lazymlir

    load = [os.getloadavg()]
    r = measure(args.calls, args.only)
    step = args.only.upper()
    load.append(os.getloadavg())
    lines = [f"| phase of the {step} step | lazy (traced) CPU us | eager, tiny tensors CPU us | "
             "lazy / eager |", "| --- | ---: | ---: | ---: |"]
    for phase, (lazy, eager) in r.items():
        ratio = f"{lazy / eager:.2f}x" if phase in PHASES[:5] else "-"
        lines.append(f"| {phase} | {lazy:.0f} | {eager:.0f} | {ratio} |")
    text = "\n".join([
        f"# Lazy step tracing by phase against eager dispatch ({args.label or 'unlabeled'})", "",
        f"    PYTHONPATH=. python -m benchmarks.trace_phases {' '.join(sys.argv[1:])}", "",
        f"lazymlir {lazymlir.__version__}, target {lazymlir.target()}, torch "
        f"{torch.__version__}, 1 torch thread; "
        f"{load_averages(*load)}, on a 2-core machine shared with "
        f"other jobs. {args.calls} rounds of (lazy {step} step, eager tiny {step} step), process "
        "CPU time, medians.", "", *lines])
    report(text, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
