"""A graph with symbolic sizes against its static specializations, next to eager.

    PYTHONPATH=. python -m benchmarks.dynamic_shapes [--sizes 16,64,256] [--calls 20]
        [--unscheduled]

torch.compile(backend="lazymlir", dynamic=True) compiles one graph whose sizes are read
at run time (lazymlir/dynamo_dynamic.py); dynamic=False compiles one graph per size, in
which every size is a constant. Both run here, with eager, alternating call by call in
one process, for an MLP's forward over a batch and a causal attention block's forward
over a sequence length (inference: torch.no_grad). Prints per-call medians and the
median of per-round ratios, and writes the table to benchmarks/results/<today>/.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import types

import torch
from torch import nn

from .results_dir import result_path


class Attention(nn.Module):
    def __init__(self, width=256, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x):
        batch, time_, width = x.shape
        q, k, v = self.qkv(self.norm(x)).split(width, dim=2)
        q, k, v = [t.view(batch, time_, self.heads, width // self.heads).transpose(1, 2)
                   for t in (q, k, v)]
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(y.transpose(1, 2).reshape(batch, time_, width))


def _workloads():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
    attention = Attention()
    return {
        # size -> input: the MLP's batch, the attention block's sequence length
        "mlp": (mlp, lambda n: torch.randn(n, 256)),
        "attention": (attention, lambda n: torch.randn(2, n, 256)),
    }


def _own_code(function):
    """`function` with a code object of its own: Dynamo caches graphs per code object,
    so the dynamic and the static variant never share one."""
    return types.FunctionType(function.__code__.replace(), function.__globals__,
                              closure=function.__closure__)


def measure(name: str, sizes: list[int], calls: int) -> list[dict]:
    import lazymlir.dynamo  # noqa: F401  registers the backend in a source checkout

    model, make_input = _workloads()[name]

    def forward(x):
        return model(x)

    dynamic = torch.compile(_own_code(forward), backend="lazymlir", dynamic=True)
    statics = {n: torch.compile(_own_code(forward), backend="lazymlir", dynamic=False)
               for n in sizes}
    inputs = {n: make_input(n) for n in sizes}
    rows = []
    with torch.no_grad():
        for n in sizes:  # compile (and check) first
            x = inputs[n]
            expected = model(x)
            for fn in (dynamic, statics[n]):
                torch.testing.assert_close(fn(x), expected, rtol=1e-4, atol=1e-4)
        for n in sizes:
            x = inputs[n]
            runs = {"eager": model, "static": statics[n], "dynamic": dynamic}
            times: dict[str, list[float]] = {k: [] for k in runs}
            for _ in range(3):
                for fn in runs.values():
                    fn(x)
            for _ in range(calls):
                for key, fn in runs.items():
                    began = time.perf_counter()
                    fn(x)
                    times[key].append(time.perf_counter() - began)
            rows.append({"workload": name, "size": n,
                         **{k: 1e3 * statistics.median(v) for k, v in times.items()},
                         "static/eager": _ratio(times, "static", "eager"),
                         "dynamic/eager": _ratio(times, "dynamic", "eager"),
                         "dynamic/static": _ratio(times, "dynamic", "static")})
    return rows


def _ratio(times: dict, a: str, b: str) -> float:
    return statistics.median(p / q for p, q in zip(times[a], times[b]))


def table(rows: list[dict]) -> str:
    lines = ["| workload | size | eager ms | static ms | dynamic ms | static/eager | "
             "dynamic/eager | dynamic/static |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['size']} | {r['eager']:.3f} | {r['static']:.3f} "
                     f"| {r['dynamic']:.3f} | {r['static/eager']:.2f} | "
                     f"{r['dynamic/eager']:.2f} | {r['dynamic/static']:.2f} |")
    return "\n".join(lines)


def _without_dynamic_schedule() -> None:
    """Compile in this process with the cpu schedule of ops with `?` sizes off
    (lowering/cpu/dynamic.py; what a schedule failure falls back to): the baseline."""
    from lazymlir import config
    from lazymlir.lowering.cpu import schedule

    config.settings().compile_worker = False
    apply = schedule.apply
    schedule.apply = lambda module, dynamic_sizes=True: apply(module, dynamic_sizes=False)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,64,256")
    parser.add_argument("--only", default="mlp,attention")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--label", default="dynamic-vs-static")
    parser.add_argument("--unscheduled", action="store_true",
                        help="the code before the cpu schedule took `?` sizes: ops with "
                             "dynamic sizes as scalar loops (compiles in this process)")
    args = parser.parse_args(argv)
    if args.unscheduled:
        _without_dynamic_schedule()
    sizes = [int(s) for s in args.sizes.split(",")]
    load = os.getloadavg()[0]
    rows = []
    for name in args.only.split(","):
        rows += measure(name, sizes, args.calls)
    unscheduled = (" The symbolic graph's ops with `?` sizes as scalar loops (--unscheduled)."
                   if args.unscheduled else "")
    text = (f"# {args.label}\n\nOne graph with symbolic sizes (torch.compile dynamic=True) "
            f"against one static graph per size (dynamic=False) and eager, forward under "
            f"no_grad, alternating call by call; medians of {args.calls} calls, ratios are "
            f"medians of per-round ratios. torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, load average {load:.1f}.{unscheduled}\n\n"
            f"{table(rows)}\n")
    print(text)
    path = result_path(f"{args.label}.md")
    path.write_text(text)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
