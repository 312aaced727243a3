"""Tracing cost per op on lazy_mlir against eager CPU dispatch, in one run.

    PYTHONPATH=. python benchmarks/trace_overhead.py [--repeats N] [--out FILE]

For each workload the same Python code runs on CPU tensors (eager) and on
lazy_mlir tensors (traced, never synced inside the timed region). The table
gives medians over the repeats, per recorded op: the lazy count is the number
of trace nodes the workload made, and eager time is divided by the same count,
so the ratio is the ratio of the two totals. `graph+hash` is the sync-side
cost of `build_graph` + `structural_hash` for the same trace, per op; the
compile and the run are excluded. `floor` is the same workload on a
FunctionalTensorWrapper over a `__torch_dispatch__` subclass that only makes
its output: the least this design (Python dispatch below functionalization)
can cost. Eager, floor and traced runs are interleaved, so a load change on
the machine hits all three. The first-op and first-step rows are measured in
fresh processes.

The table is printed and written to benchmarks/results/<today>/trace-overhead-per-op.md
(or --out) with the command and the date.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import lazymlir  # noqa: E402
from lazymlir import session  # noqa: E402
from lazymlir.lowering.front import fx_graph  # noqa: E402
from lazymlir.tracing import values as lazy_values  # noqa: E402
from lazymlir.tracing.graph import build_graph  # noqa: E402

from benchmarks.results_dir import result_path  # noqa: E402

LAZY = "lazy_mlir"
OPS = 1000  # ops per chain workload
# "cpu": process CPU time (all threads of this process: the autograd engine traces
# backward ops on its device thread). On a shared machine it leaves out the time
# spent waiting for a core, which wall time charges at random to either side.
CLOCK = "cpu"


# ------------------------------------------------------------------ workloads
# Each workload: setup(device) -> state, run(state) -> something to keep alive.

def _chain_setup(device):
    return torch.randn(8, 8).to(device)


def _mul_add(x):
    for _ in range(OPS // 2):
        x = x * 1.0001 + 0.5
    return x


def _relu(x):
    for _ in range(OPS):
        x = torch.relu(x)
    return x


def _add_setup(device):
    return torch.randn(8, 8).to(device), torch.randn(8, 8).to(device)


def _add(state):
    x, y = state
    for _ in range(OPS):
        x = x + y
    return x


def _reshape(x):
    # Views of one base: a chain of views of views costs O(depth) per op in PyTorch's
    # functionalization itself (see docs/tracing-performance.md).
    out = None
    for _ in range(OPS // 2):
        out = x.reshape(64).view(8, 8)
    return out


def _sum_dim(x):
    out = None
    for _ in range(OPS):
        out = x.sum(1)
    return out


def _matmul_setup(device):
    return torch.randn(8, 8).to(device), (torch.randn(8, 8) * 0.3).to(device)


def _matmul(state):
    x, w = state
    for _ in range(OPS):
        x = x @ w
    return x


def _mlp_setup(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)
    return model, opt, data


def _mlp_step(state):
    model, opt, (x, y) = state
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


WORKLOADS = [  # name, setup, run, has a floor row
    ("x * 1.0001 + 0.5", _chain_setup, _mul_add, True),
    ("relu", _chain_setup, _relu, True),
    ("add (two tensors)", _add_setup, _add, True),
    ("reshape / view", _chain_setup, _reshape, True),
    ("sum(dim)", _chain_setup, _sum_dim, True),
    ("matmul 8x8", _matmul_setup, _matmul, True),
    ("MLP fwd+bwd+SGD step", _mlp_setup, _mlp_step, False),
]


# ------------------------------------------------------------------ the floor

class _Floor(torch.Tensor):
    """Only makes its output (shape and dtype from a dict filled by meta inference once):
    what Python dispatch below functionalization costs with no tracer at all."""

    @staticmethod
    def __new__(cls, shape, dtype):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=_FLOOR_DEVICE)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        key = (id(func), *[(a.shape, a.dtype) if isinstance(a, torch.Tensor) else
                           (tuple(a) if type(a) is list else a) for a in args])
        out = _FLOOR_SHAPES.get(key)
        if out is None:
            meta = func(*[torch.empty(a.shape, dtype=a.dtype, device="meta")
                          if isinstance(a, torch.Tensor) else a for a in args], **(kwargs or {}))
            out = _FLOOR_SHAPES[key] = (tuple(meta.shape), meta.dtype)
        return _Floor(*out)


_FLOOR_SHAPES: dict = {}
_FLOOR_DEVICE = torch.device(LAZY, 0)


def _floor(value: torch.Tensor) -> torch.Tensor:
    return torch._to_functional_tensor(_Floor(tuple(value.shape), value.dtype))


def _floor_setup(setup):
    def make(device):
        state = setup("cpu")
        if isinstance(state, tuple):
            return tuple(_floor(s) for s in state)
        return _floor(state)
    return make


# ------------------------------------------------------------------ measuring

def _next_seq() -> int:
    return next(lazy_values.node_ids)


def _clock():
    return (time.process_time() if CLOCK == "cpu" else time.perf_counter())


def _time(run, state) -> float:
    began = _clock()
    keep = run(state)
    elapsed = _clock() - began
    del keep
    return elapsed


def _graph_and_hash() -> tuple[float, int]:
    """Time build_graph + structural_hash for what is pending now; (seconds, nodes)."""
    current = session.current()
    began = _clock()
    pending = lazy_values.live_pending_values()
    graph, _, _ = build_graph(pending, frozenset(current.static_scalar_ops))
    fx_graph.structural_hash(graph, lazymlir.target())
    return _clock() - began, len(graph["nodes"])


def measure(name, setup, run, repeats: int, floor: bool) -> dict:
    # The MLP's parameters stay pending after a step: it syncs after each one (a graph
    # cache hit after the first), outside the timed region. The chains are dropped.
    sync = name.startswith("MLP")
    eager_state, lazy_state = setup("cpu"), setup(LAZY)
    floor_state = _floor_setup(setup)(LAZY) if floor else None
    run(eager_state)
    if floor:
        run(floor_state)
    run(lazy_state)  # warm up: shape cache, decomposition decisions, first compile
    if sync:
        lazymlir.mark_step()
    eager, lazy, graph_cost, ops, floors = [], [], [], [], []
    for _ in range(repeats):  # interleaved: a load change on the machine hits all sides
        gc.collect()
        eager.append(_time(run, eager_state))
        if floor:
            gc.collect()
            floors.append(_time(run, floor_state))
        gc.collect()
        first = _next_seq()
        began = _clock()
        keep = run(lazy_state)
        lazy.append(_clock() - began)
        ops.append(_next_seq() - first - 1)
        seconds, _ = _graph_and_hash()
        graph_cost.append(seconds)
        if sync:
            lazymlir.mark_step()
        del keep
    count = max(1, int(statistics.median(ops)))
    e, t, g = (statistics.median(v) for v in (eager, lazy, graph_cost))
    f = statistics.median(floors) if floor else None
    return {"name": name, "ops": count, "eager_us": 1e6 * e / count,
            "lazy_us": 1e6 * t / count, "ratio": t / e, "graph_us": 1e6 * g / count,
            "floor_us": None if f is None else 1e6 * f / count,
            "floor_ratio": None if f is None else f / e}


class _Reuse(torch.Tensor):
    """Returns one preallocated output: Python dispatch with no tensor made."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _REUSED[0]


class _Make(torch.Tensor):
    """Makes its output and nothing else (fixed 8x8 float32: relu only)."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return torch.Tensor._make_wrapper_subclass(_Make, (8, 8), dtype=torch.float32,
                                                   device=_FLOOR_DEVICE)


_REUSED: list = []


def measure_parts(repeats: int) -> str:
    """Where a traced relu's time goes: eager, dispatch alone, the floor, the tracer."""
    wrapper = torch.Tensor._make_wrapper_subclass
    _REUSED.append(wrapper(_Reuse, (8, 8), dtype=torch.float32, device=_FLOOR_DEVICE))
    cases = {
        "eager CPU dispatch": torch.randn(8, 8),
        "FunctionalTensorWrapper over a subclass returning one preallocated tensor":
            torch._to_functional_tensor(wrapper(_Reuse, (8, 8), dtype=torch.float32,
                                                device=_FLOOR_DEVICE)),
        "... that makes its output with _make_wrapper_subclass (design floor)":
            torch._to_functional_tensor(wrapper(_Make, (8, 8), dtype=torch.float32,
                                                device=_FLOOR_DEVICE)),
        "the same subclass without functionalization":
            wrapper(_Make, (8, 8), dtype=torch.float32, device=_FLOOR_DEVICE),
        "lazymlir tracer": torch.randn(8, 8).to(LAZY),
        "lazymlir tracer, gc disabled during the run": torch.randn(8, 8).to(LAZY),
    }
    times: dict = {k: [] for k in cases}
    for x in cases.values():
        _relu(x)
    for _ in range(repeats):
        for name, x in cases.items():
            gc.collect()
            if "gc disabled" in name:
                gc.disable()
            try:
                times[name].append(_time(_relu, x))
            finally:
                gc.enable()
    eager = statistics.median(times["eager CPU dispatch"])
    lines = ["| relu, 1000 ops | us/op | x eager |", "| --- | ---: | ---: |"]
    for name, values in times.items():
        m = statistics.median(values)
        lines.append(f"| {name} | {1e6 * m / OPS:.2f} | {m / eager:.2f}x |")
    return "\n".join(lines)


_FIRST = r"""
import time, sys
t0 = time.perf_counter()
import torch, torch.nn as nn
t1 = time.perf_counter()
import lazymlir
t2 = time.perf_counter()
x = torch.randn(8, 8).to("lazy_mlir")
t3 = time.perf_counter()
y = x * 1.0001 + 0.5
t4 = time.perf_counter()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to("lazy_mlir")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
a, b = torch.randn(8, 16).to("lazy_mlir"), torch.randn(8, 4).to("lazy_mlir")
t5 = time.perf_counter()
opt.zero_grad(); nn.functional.mse_loss(model(a), b).backward(); opt.step()
t6 = time.perf_counter()
opt.zero_grad(); nn.functional.mse_loss(model(a), b).backward(); opt.step()
t7 = time.perf_counter()
print(t2 - t1, t4 - t3, t6 - t5, t7 - t6)
"""


def measure_first(repeats: int = 3) -> dict:
    """Fresh processes: import lazymlir, first traced op, first and second MLP step trace."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    samples = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", _FIRST], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        samples.append([float(v) for v in out])
    return {k: 1e3 * statistics.median(s[i] for s in samples)
            for i, k in enumerate(("import_ms", "first_op_ms", "first_step_ms", "second_step_ms"))}


# ------------------------------------------------------------------ report

def _git() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return rev + (" (modified)" if dirty else "")
    except OSError:
        return "unknown"


def table(rows: list[dict], first: dict | None) -> str:
    lines = ["| workload | recorded ops | eager us/op | traced us/op | **traced / eager** "
             "| floor us/op | floor / eager | build_graph+hash us/op |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        floor = ("- | -" if r["floor_us"] is None
                 else f"{r['floor_us']:.2f} | {r['floor_ratio']:.2f}x")
        lines.append(f"| {r['name']} | {r['ops']} | {r['eager_us']:.2f} | {r['lazy_us']:.2f} "
                     f"| **{r['ratio']:.2f}x** | {floor} | {r['graph_us']:.1f} |")
    if first:
        lines += ["", "| fresh process | ms |", "| --- | ---: |",
                  f"| import lazymlir | {first['import_ms']:.0f} |",
                  f"| first traced op (x * 1.0001 + 0.5, 2 ops) | {first['first_op_ms']:.1f} |",
                  f"| first MLP step trace (fwd+bwd+SGD, no sync) | {first['first_step_ms']:.1f} |",
                  f"| second MLP step trace | {first['second_step_ms']:.1f} |"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out",
                        help="default: benchmarks/results/<today>/trace-overhead-per-op.md")
    parser.add_argument("--no-first", action="store_true", help="skip the fresh-process rows")
    parser.add_argument("--only", default=None, help="run workloads whose name contains this")
    parser.add_argument("--parts", action="store_true",
                        help="also break a traced relu down into dispatch, floor and tracer")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="process CPU time (default) or wall time")
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = args.clock

    # 8x8 ops never profit from intra-op threads, and on a loaded 2-core machine the
    # thread pool's hand-offs made an eager MLP step take 100+ ms instead of ~0.15 ms.
    torch.set_num_threads(1)

    rows = []
    for name, setup, run, floor in WORKLOADS:
        if args.only and args.only not in name:
            continue
        rows.append(measure(name, setup, run, args.repeats, floor))
        print(f"  {name}: {rows[-1]['ratio']:.2f}x", file=sys.stderr)
    first = None if args.no_first else measure_first()
    text = table(rows, first)
    if args.parts:
        text += "\n\n" + measure_parts(args.repeats)
    command = "PYTHONPATH=. python benchmarks/trace_overhead.py " + shlex.join(argv or sys.argv[1:])
    header = (f"# Tracing overhead per op\n\n`{command.strip()}`  \n"
              f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, commit "
              f"{_git()}, torch {torch.__version__}, Python {platform.python_version()}, "
              f"{os.cpu_count()} CPUs, target {lazymlir.target()}, medians of "
              f"{args.repeats} runs, {torch.get_num_threads()} torch thread(s), "
              f"{'process CPU' if CLOCK == 'cpu' else 'wall'} time, load average "
              f"{os.getloadavg()[0]:.1f} at the end\n\n")
    print(text)
    out = Path(args.out) if args.out else result_path("trace-overhead-per-op.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
