"""DDP training steps on lazy_mlir against eager DDP (gloo), with 1 and 2 local processes.

    PYTHONPATH=. python -m benchmarks.distributed_step [--worlds 1,2] [--only mlp,wide]
                                                        [--calls 20] [--label NAME]

Starts WORLD processes on 127.0.0.1 (a gloo group, as torchrun would). Each rank
holds two copies of the model with the same initial weights: DDP over the CPU model
(eager) and DDP over the model on lazy_mlir, and alternates one training step of
each, call by call, every call timed (the lazy step ends with `mark_step` and a
read of its loss, so its graphs have run). Rank 0 reports medians and the median of
per-call lazy/eager ratios, and for the lazy step the collectives per step and
the time in them: gloo itself (`collectives.run_on_host`) and bringing their inputs
to the host (`collectives.to_host`, which computes the pending gradients first).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from .results_dir import load_averages, report

WORKLOADS = {
    # name: (layer widths, batch per rank)
    "mlp": ((256, 512, 256), 64),
    "wide": ((1024, 2048, 1024), 64),
}


def _model(widths, seed=0) -> torch.nn.Module:
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers += [torch.nn.Linear(a, b)] + ([torch.nn.ReLU()] if i < len(widths) - 2 else [])
    return torch.nn.Sequential(*layers)


def _step(model, opt, x, y, mark_step=None) -> float:
    """One DDP training step; the loss read at the end (a lazy step's graphs have run)."""
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if mark_step is not None:
        mark_step()
    return loss.item()


def _rank_main(rank: int, world: int, port: int, only: list[str], calls: int) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import lazymlir
    from lazymlir.distributed import collectives

    dist.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=300))
    spent = {"gloo": 0.0, "to_host": 0.0}

    def timed(fn, key):
        def run(*args, **kwargs):
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - began
        return run
    collectives.run_on_host = timed(collectives.run_on_host, "gloo")
    collectives.to_host = timed(collectives.to_host, "to_host")

    results = {}
    for key in only:
        widths, batch = WORKLOADS[key]
        eager = DDP(_model(widths))
        lazy = DDP(_model(widths).to("lazy_mlir"))
        eager_opt = torch.optim.SGD(eager.parameters(), lr=0.01)
        lazy_opt = torch.optim.SGD(lazy.parameters(), lr=0.01)
        generator = torch.Generator().manual_seed(rank)
        x, y = torch.randn(batch, widths[0], generator=generator), \
            torch.randn(batch, widths[-1], generator=generator)
        xl, yl = x.to("lazy_mlir"), y.to("lazy_mlir")

        eager_step = functools.partial(_step, eager, eager_opt, x, y)
        lazy_step = functools.partial(_step, lazy, lazy_opt, xl, yl, lazymlir.mark_step)
        for _ in range(4):  # compiles, DDP's bucket rebuild
            eager_step()
            lazy_step()
        times = {"eager": [], "lazy": []}
        spent.update(gloo=0.0, to_host=0.0)
        lazymlir.metrics.reset()
        for _ in range(calls):
            for name, step in (("eager", eager_step), ("lazy", lazy_step)):
                dist.barrier()  # every rank starts the step together
                began = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - began)
        results[key] = {
            "ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
            "ratio": statistics.median(lz / e for lz, e in zip(times["lazy"], times["eager"])),
            "collectives": lazymlir.metrics.counter("Collective") / calls,
            "gloo_ms": 1e3 * spent["gloo"] / calls,
            "to_host_ms": 1e3 * spent["to_host"] / calls,
            "compiles": lazymlir.metrics.counter("UncachedCompile"),
        }
    if rank == 0:
        print("RESULT " + json.dumps(results), flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(world: int, only: list[str], calls: int) -> dict:
    port = _free_port()
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // world)),
               LOCAL_WORLD_SIZE=str(world))
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.distributed_step", "--rank",
                               str(rank), "--world", str(world), "--port", str(port),
                               "--only", ",".join(only), "--calls", str(calls)],
                              env=dict(env, LOCAL_RANK=str(rank)), stdout=subprocess.PIPE,
                              text=True)
             for rank in range(world)]
    outputs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a rank failed: {[p.returncode for p in procs]}")
    line = next(s for s in outputs[0].splitlines() if s.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worlds", default="1,2")
    parser.add_argument("--only", default="mlp,wide")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--label", default="")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    only = args.only.split(",")
    if args.rank is not None:
        _rank_main(args.rank, args.world, args.port, only, args.calls)
        return 0
    load = [os.getloadavg()]
    lines = ["| workload | processes | eager DDP ms | lazy DDP ms | lazy/eager | "
             "collectives/step | gloo ms/step | to host ms/step | compiles (timed calls) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for world in (int(w) for w in args.worlds.split(",")):
        results = _launch(world, only, args.calls)
        for key in only:
            r = results[key]
            widths, batch = WORKLOADS[key]
            name = f"{key} {'-'.join(map(str, widths))}, batch {batch}/rank, SGD"
            lines.append(f"| {name} | {world} | {r['ms']['eager']:.2f} | {r['ms']['lazy']:.2f} "
                         f"| {r['ratio']:.2f} | {r['collectives']:.1f} | "
                         f"{r['gloo_ms']:.2f} | {r['to_host_ms']:.2f} | {r['compiles']} |")
            print(lines[-1], flush=True)
    load.append(os.getloadavg())
    text = "\n".join([
        f"# DDP steps on lazy_mlir against eager DDP ({args.label or 'unlabeled'})", "",
        f"    PYTHONPATH=. python -m benchmarks.distributed_step --worlds {args.worlds} "
        f"--only {args.only} --calls {args.calls}", "",
        f"torch {torch.__version__}, gloo on 127.0.0.1, each rank OMP threads = cores / "
        f"processes; {load_averages(*load)}, on a "
        f"{os.cpu_count()}-core machine. {args.calls} rounds of (eager DDP step, lazy DDP "
        "step), one call each after a barrier, every call timed on rank 0; medians; "
        "lazy/eager is the median of per-call ratios. For the lazy step: 'gloo' is the time "
        "in the collectives themselves (gloo on host buffers, waiting for the other rank "
        "included), 'to host' the time bringing their inputs to the host (the pending "
        "gradients computed first: the backward graph up to that bucket runs there).",
        "", *lines])
    report(text, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
