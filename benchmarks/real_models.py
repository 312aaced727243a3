"""Training steps of the real-size models, on each entry point against eager, interleaved.

    PYTHONPATH=. python -m benchmarks.real_models [--only mobilenet_v3_small,vit_tiny]
        [--contenders lazy,lazymlir,inductor] [--rounds 5] [--label NAME]

The models are the networks the slow tests train (tests/python/cases/real_models.py:
MobileNetV3, EfficientNet, ConvNeXt, Swin, DenseNet, ViT and GPT-2 shapes with hundreds of
parameter tensors), each with its test's optimizer (SGD with momentum for classifiers,
AdamW with gradient clipping for transformers) and batch. Contenders:

- `lazy`: the model on the lazy_mlir device, `mark_step()` after the optimizer step;
- `lazymlir`: `torch.compile(backend="lazymlir")` of the model and of `opt.step`;
- `inductor`: the same with PyTorch's inductor (a private cold cache).

Each (model, contender) runs in a process of its own with its own eager copy of the same
weights, so one contender's threads and caches do not touch another's. In it, the
contender's first step is timed (its cold compile with an empty LAZYMLIR_CACHE_DIR), then
after warm-up steps eager and the contender alternate call by call, every call timed; the
loss is read (`.item()`) at every step, as a training loop that logs it does. The table
gives medians, the median of the per-round ratios to eager, the first step's time, the
graphs compiled after the warm-up (none is the goal) and the largest graph's buffers.
Writes benchmarks/results/<today>/<label>.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from .results_dir import load_averages, report

CASES = Path(__file__).resolve().parent.parent / "tests" / "python" / "cases"
WARMUP_STEPS = 3  # step 1 creates the optimizer state, step 2 is the steady-state graph


def _step_of(name: str, model, x, y, loss_fn, contender: str):
    """One training step of `model` as `contender` runs it (the slow tests' optimizer
    and clipping, real_models.py); returns the loss as a float."""
    from optimizers import OPTIMIZERS
    from real_models import CLIP, OPTIMIZER

    import lazymlir

    device = "lazy_mlir" if contender == "lazy" else "cpu"
    model = model.to(device)
    opt = OPTIMIZERS[OPTIMIZER[name]](model.parameters())
    forward, opt_step = model, opt.step
    if contender in ("lazymlir", "inductor"):
        forward = torch.compile(model, backend=contender, dynamic=False)
        opt_step = torch.compile(opt.step, backend=contender, dynamic=False)
    xs, ys = x.to(device), y.to(device)

    def step() -> float:
        opt.zero_grad()
        loss = loss_fn(forward(xs), ys)
        loss.backward()
        if name in CLIP:
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP[name])
        opt_step()
        if contender == "lazy":
            lazymlir.mark_step()
        return loss.item()
    return step


def _graphs_compiled() -> int:
    """Graphs compiled so far: lazymlir's (compiled, or loaded from its disk cache) plus the
    graphs Dynamo captured (what inductor compiles)."""
    import lazymlir
    from torch._dynamo.utils import counters as dynamo_counters

    counters = lazymlir.metrics.counters()
    return (counters.get("UncachedCompile", 0) + counters.get("DiskCacheHit", 0)
            + dynamo_counters["stats"]["unique_graphs"])


def measure(name: str, contender: str, rounds: int) -> dict:
    """Eager against `contender` on model `name` (in this process), with the buffers of
    the largest graph run."""
    from graph_buffers import largest_graph

    with largest_graph() as largest:
        result = _measure(name, contender, rounds)
    return {**result, "buffers": largest["buffers"]}


def _measure(name: str, contender: str, rounds: int) -> dict:
    from real_models import MODELS

    import lazymlir
    import lazymlir.dynamo  # noqa: F401  backend="lazymlir" from a source checkout too

    torch.manual_seed(0)
    model, x, y, loss_fn = MODELS[name]()
    eager = _step_of(name, copy.deepcopy(model), x, y, loss_fn, "eager")
    other = _step_of(name, model, x, y, loss_fn, contender)
    parameters = len(list(model.parameters()))
    start = time.perf_counter()
    other()
    first_s = time.perf_counter() - start
    for _ in range(WARMUP_STEPS - 1):
        eager(), other()
    misses_before = _graphs_compiled()
    times: dict[str, list[float]] = {"eager": [], contender: []}
    for _ in range(rounds):
        for key, step in (("eager", eager), (contender, other)):
            start = time.perf_counter()
            step()
            times[key].append((time.perf_counter() - start) * 1e3)
    counters = lazymlir.metrics.counters()
    return {"eager_ms": statistics.median(times["eager"]),
            "ms": statistics.median(times[contender]),
            "ratio": statistics.median(t / e for t, e in zip(times[contender], times["eager"])),
            "first_s": first_s, "late_compiles": _graphs_compiled() - misses_before,
            "parameters": parameters,
            "fallbacks": counters.get("FallbackOps", 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mobilenet_v3_small,efficientnet_b0,convnext_tiny,"
                        "swin_tiny,densenet121,vit_tiny,gpt2_small")
    parser.add_argument("--contenders", default="lazy,lazymlir,inductor")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", default=None)
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "CONTENDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(CASES))  # the model definitions live with the slow tests
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cold-"))
        print(json.dumps(measure(*args.child, args.rounds)))
        return
    contenders = args.contenders.split(",")
    load_before = os.getloadavg()
    rows = []
    for name in args.only.split(","):
        for contender in contenders:
            env = dict(os.environ)
            if env.get("LAZYMLIR_CACHE_DIR"):  # a cold folder per contender
                env["LAZYMLIR_CACHE_DIR"] = os.path.join(env["LAZYMLIR_CACHE_DIR"],
                                                         f"{name}-{contender}")
            done = subprocess.run([sys.executable, "-m", "benchmarks.real_models", "--child",
                                   name, contender, "--rounds", str(args.rounds)],
                                  capture_output=True, text=True, env=env,
                                  cwd=Path(__file__).resolve().parent.parent)
            if done.returncode != 0:
                print(f"{name} / {contender} failed: {done.stderr[-2000:]}", flush=True)
                rows.append((name, contender, None))
                continue
            result = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append((name, contender, result))
            print(f"{name} / {contender}: {result}", flush=True)
    load_after = os.getloadavg()
    lines = [f"# Real-size models: training step per entry point vs eager "
             f"({args.label or 'unlabeled'})", "",
             f"    PYTHONPATH=. python -m benchmarks.real_models --only {args.only} "
             f"--contenders {args.contenders} --rounds {args.rounds}", "",
             f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
             f"{load_averages(load_before, load_after)}. One process per model and "
             f"contender, each with its own eager copy; {args.rounds} rounds of one eager and "
             "one contender step, alternating; medians; the loss read at every step. "
             "first s: the contender's first step (compiles included; cold only with empty "
             "caches); late compiles: lazymlir graphs compiled or loaded from disk, plus "
             "graphs Dynamo captured, after the warm-up steps; "
             "buffers: inputs and outputs of the largest lazymlir graph run.", "",
             "| model | parameters | contender | eager ms | contender ms | ratio to eager | "
             "first s | late compiles | largest graph buffers | fallback ops |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, contender, r in rows:
        if r is None:
            lines.append(f"| {name} | | {contender} | failed | | | | | | |")
            continue
        lines.append(f"| {name} | {r['parameters']} | {contender} | {r['eager_ms']:.1f} | "
                     f"{r['ms']:.1f} | {r['ratio']:.2f} | {r['first_s']:.1f} | "
                     f"{r['late_compiles']} | {r['buffers'] or '-'} | {r['fallbacks']} |")
    report("\n".join(lines), args.label)


if __name__ == "__main__":
    main()
