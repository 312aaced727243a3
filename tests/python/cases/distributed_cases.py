"""One rank of the torch.distributed checks (tests/python/e2e/test_distributed.py).

Run as `python distributed_cases.py RANK WORLD_SIZE PORT [CHECK,...]` (LOCAL_RANK set,
as torchrun sets it): joins a gloo group on
127.0.0.1 (init_process_group() with no backend, as a torchrun script would), runs
every check in order and prints `RESULT <json>`: per check, the largest difference
from eager CPU and what else the test asserts on. Each check's eager reference runs
in this process (the same collectives on CPU tensors, or one process's step on the
whole batch).
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

import lazymlir

L = "lazy_mlir"


def diff(actual, expected) -> float:
    if isinstance(actual, (list, tuple)):
        return max(diff(a, e) for a, e in zip(actual, expected))
    return (actual.detach().cpu().double() - expected.detach().double()).abs().max().item()


def collectives(rank: int, world: int) -> dict:
    """Each c10d collective on lazy tensors (pending, computed, a view) against the
    same collective on CPU tensors."""
    errors = {}

    def both(name, make, run):
        """`make(device)` -> the tensors; `run(tensors)` does the collective in place;
        the lazy tensors afterwards must equal the CPU ones."""
        cpu = make("cpu")
        try:
            run(cpu)
        except RuntimeError as eager_error:
            # This torch's CPU backend lacks the collective (gloo's all_to_all before
            # torch 2.12): the lazy tensors must fail with eager's error, not another.
            try:
                run(make(L))
            except RuntimeError as lazy_error:
                errors[name] = 0.0 if str(lazy_error) == str(eager_error) else float("inf")
            else:
                errors[name] = float("inf")
            return
        lazy = make(L)
        run(lazy)
        errors[name] = diff([t for t in lazy if t is not None],
                            [t for t in cpu if t is not None])

    def base(device, n=6):
        """Computed values (a copy to the device: nothing to compile)."""
        return (torch.arange(n, dtype=torch.float32) * (rank + 1) + 0.5).to(device)

    both("all_reduce_pending", lambda d: [base(d) * 2],
         lambda t: dist.all_reduce(t[0]))
    both("all_reduce_computed", lambda d: [base(d)],
         lambda t: dist.all_reduce(t[0], dist.ReduceOp.MAX))

    # A view of a pending tensor: the base tensor, and its other views, see the result.
    def viewed(d):
        whole = base(d, 12).reshape(3, 4) + 1
        return [whole, whole[1], whole[:, 2]]
    both("all_reduce_view", viewed, lambda t: dist.all_reduce(t[1]))
    both("all_reduce_async", lambda d: [base(d)],
         lambda t: dist.all_reduce(t[0], async_op=True).wait())
    both("broadcast", lambda d: [base(d) + 3], lambda t: dist.broadcast(t[0], 1))
    both("all_gather", lambda d: [base(d, 2)] + [torch.zeros(2, device=d) for _ in range(world)],
         lambda t: dist.all_gather(t[1:], t[0]))
    both("all_gather_into_tensor", lambda d: [base(d, 3), torch.zeros(3 * world, device=d)],
         lambda t: dist.all_gather_into_tensor(t[1], t[0]))
    both("reduce_scatter", lambda d: [torch.zeros(2, device=d)] +
         [base(d, 2) + i for i in range(world)],
         lambda t: dist.reduce_scatter(t[0], t[1:]))
    both("reduce_scatter_tensor", lambda d: [torch.zeros(2, device=d), base(d, 2 * world)],
         lambda t: dist.reduce_scatter_tensor(t[0], t[1]))
    both("all_to_all_single", lambda d: [torch.zeros(2 * world, device=d), base(d, 2 * world)],
         lambda t: dist.all_to_all_single(t[0], t[1]))
    both("all_to_all", lambda d: [torch.zeros(2, device=d) for _ in range(world)] +
         [base(d, 2) + i for i in range(world)],
         lambda t: dist.all_to_all(t[:world], t[world:]))
    both("reduce", lambda d: [base(d)], lambda t: dist.reduce(t[0], 0))
    both("gather", lambda d: [base(d, 2)] + [torch.zeros(2, device=d) for _ in range(world)],
         lambda t: dist.gather(t[0], t[1:] if rank == 0 else None, dst=0))
    both("scatter", lambda d: [torch.zeros(2, device=d)] + [base(d, 2) + i for i in range(world)],
         lambda t: dist.scatter(t[0], t[1:] if rank == 0 else None, src=0))

    def send_recv(t):
        if rank == 0:
            dist.send(t[0], 1)
        elif rank == 1:
            dist.recv(t[0], 0)
    both("send_recv", lambda d: [base(d)], send_recv)

    # Functional collectives called eagerly (outside torch.compile) on lazy tensors.
    def functional(t):
        reduced = funcol.all_reduce(t[0] * 2, "sum", dist.group.WORLD)
        t[1] = funcol.wait_tensor(funcol.all_gather_tensor(reduced, 0, dist.group.WORLD))
    both("functional_eager", lambda d: [base(d), None], functional)
    dist.barrier()
    return {"errors": errors, "fallbacks": lazymlir.metrics.fallback_ops()}


def _model(rank: int):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    reference = copy.deepcopy(model)
    if rank:  # DDP's constructor must broadcast rank 0's parameters
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    return model, reference


def ddp_lazy(rank: int, world: int, optimizer: str, bucket_view: bool, accumulate: bool,
             steps: int = 4) -> dict:
    """DDP on lazy_mlir, several buckets, against one process on the whole batch."""
    model, reference = _model(rank)
    ddp = DDP(model.to(L), bucket_cap_mb=0.0005, gradient_as_bucket_view=bucket_view)
    make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
            "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01)}[optimizer]
    opt, ref_opt = make(ddp.parameters()), make(reference.parameters())
    gen = torch.Generator().manual_seed(1)
    per_rank = 4
    compiles, fallbacks = [], {}
    for _ in range(steps):
        data = torch.randn(world * per_rank, 8, generator=gen)
        target = torch.randn(world * per_rank, 4, generator=gen)
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        lazymlir.metrics.reset()
        if accumulate:  # two micro-batches: gradients add up locally, then sync
            halves = [slice(mine.start, mine.start + 2), slice(mine.start + 2, mine.stop)]
            with ddp.no_sync():
                loss = ((ddp(data[halves[0]].to(L)) - target[halves[0]].to(L)) ** 2).mean()
                (loss / 2).backward()
            loss = ((ddp(data[halves[1]].to(L)) - target[halves[1]].to(L)) ** 2).mean()
            (loss / 2).backward()
        else:
            ((ddp(data[mine].to(L)) - target[mine].to(L)) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        lazymlir.mark_step()
        compiles.append(lazymlir.metrics.counter("UncachedCompile"))
        for op, n in lazymlir.metrics.fallback_ops().items():
            fallbacks[op] = fallbacks.get(op, 0) + n
        ref_loss = ((reference(data) - target) ** 2).mean()
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
    return {"error": diff(list(ddp.parameters()), list(reference.parameters())),
            "compiles": compiles, "fallbacks": fallbacks}


def device_index(rank: int, world: int) -> dict:
    """lazy_mlir:<LOCAL_RANK>, as a CUDA script names its device under torchrun: the
    factories, a move, set_device and DDP's device_ids (which moves the inputs there)
    take it; another index raises."""
    mine = torch.device(L, int(os.environ["LOCAL_RANK"]))
    torch.lazy_mlir.set_device(mine.index)
    devices = [str(torch.ones(2, device=mine).device), str(torch.arange(3, device=mine).device),
               str(torch.zeros(2).to(mine).device)]
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    reference = copy.deepcopy(model)
    ddp = DDP(model.to(mine), device_ids=[mine.index])
    ddp(torch.ones(3, 4) * (rank + 1)).sum().backward()  # a CPU input: DDP moves it
    # One process on both ranks' inputs: the mean of the per-rank gradients.
    sum(reference(torch.ones(3, 4) * (r + 1)).sum() for r in range(world)).backward()
    error = diff([p.grad for p in ddp.parameters()],
                 [p.grad / world for p in reference.parameters()])
    try:
        torch.ones(2, device=f"{L}:{2 + rank}")
        raised = None
    except ValueError as e:
        raised = str(e)
    return {"devices": devices, "ddp_error": error, "raised": raised}


def no_cpu_backend(rank: int, world: int) -> dict:
    """A group with no CPU backend (as an NCCL-only group; gloo stands in for NCCL on
    this CPU build) refuses a collective on lazy tensors, naming what to use instead."""
    group = dist.new_group(backend="cuda:gloo")
    try:
        dist.all_reduce(torch.ones(2).to(L), group=group)
        raised = None
    except lazymlir.UnsupportedOperationError as error:
        raised = str(error)
    return {"raised": raised}


def functional_compiled(rank: int, world: int) -> dict:
    """Functional collectives inside torch.compile(backend="lazymlir"), under
    LAZYMLIR_FALLBACK=error (set by main for the compiled checks)."""
    def f(x):
        y = funcol.all_reduce(x * 2, "sum", dist.group.WORLD)
        z = funcol.all_gather_tensor(y + 1, 0, dist.group.WORLD)
        return z.sum(0) * 3 + y
    x = torch.arange(6.0).reshape(2, 3) + rank
    lazymlir.metrics.reset()
    got = torch.compile(f, backend="lazymlir")(x)
    return {"error": diff(got, f(x)), "fallbacks": lazymlir.metrics.fallback_ops(),
            "collectives": lazymlir.metrics.counter("Collective")}


def ddp_compiled(rank: int, world: int, mode: str) -> dict:
    """torch.compile(DDP(cpu model), backend="lazymlir") in one of Dynamo's DDP modes."""
    torch._dynamo.reset()
    torch._dynamo.config.optimize_ddp = mode
    model, reference = _model(0)
    ddp = DDP(model)
    compiled = torch.compile(ddp, backend="lazymlir")
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(2)
    lazymlir.metrics.reset()
    for _ in range(2):
        data, target = torch.randn(world * 3, 8, generator=gen), torch.randn(world * 3, 4,
                                                                             generator=gen)
        mine = slice(rank * 3, (rank + 1) * 3)
        if mode == "python_reducer":
            with torch._dynamo.compiled_autograd._enable(torch.compile(backend="lazymlir")):
                ((compiled(data[mine]) - target[mine]) ** 2).mean().backward()
        else:
            ((compiled(data[mine]) - target[mine]) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        ((reference(data) - target) ** 2).mean().backward()
        ref_opt.step()
        ref_opt.zero_grad()
    return {"error": diff(list(ddp.parameters()), list(reference.parameters())),
            "fallbacks": lazymlir.metrics.fallback_ops(),
            "collectives": lazymlir.metrics.counter("Collective")}


def fsdp2_lazy(rank: int, world: int) -> dict:
    """FSDP2 over a lazy_mlir mesh (lazymlir's init_device_mesh) raises the documented
    error at the first forward, not a wrong number or an internal error."""
    mesh = lazymlir.distributed.init_device_mesh((world,))
    model = nn.Linear(8, 4).to(L)
    fully_shard(model, mesh=mesh)
    try:
        model(torch.randn(2, 8).to(L))
    except lazymlir.UnsupportedOperationError as error:
        return {"raised": str(error), "mesh": str(mesh)}
    return {"raised": None, "mesh": str(mesh)}


def main() -> None:
    rank, world, port = (int(a) for a in sys.argv[1:4])
    only = sys.argv[4].split(",") if len(sys.argv) > 4 else None
    # No backend: lazymlir makes gloo the default (a torchrun script's call).
    dist.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    checks = {
        "collectives": lambda: collectives(rank, world),
        "device_index": lambda: device_index(rank, world),
        "no_cpu_backend": lambda: no_cpu_backend(rank, world),
        "ddp_sgd": lambda: ddp_lazy(rank, world, "sgd", bucket_view=False,
                                    accumulate=False),
        "ddp_adamw_bucket_view": lambda: ddp_lazy(rank, world, "adamw", bucket_view=True,
                                                  accumulate=True),
        "functional_compiled": lambda: functional_compiled(rank, world),
        "fsdp2_lazy": lambda: fsdp2_lazy(rank, world),
        **{f"ddp_compiled_{mode}": (lambda mode=mode: ddp_compiled(rank, world, mode))
           for mode in ("ddp_optimizer", "no_optimization", "python_reducer")},
    }
    results = {}
    settings = lazymlir.session.current().settings
    for name, check in checks.items():
        if only is None or name in only:
            # The compiled checks run with LAZYMLIR_FALLBACK=error: a collective run as
            # an op fallback raises.
            settings.fallback = "error" if "compiled" in name else "warn"
            start = time.perf_counter()
            results[name] = check()
            results[name]["seconds"] = round(time.perf_counter() - start, 1)
    print("RESULT " + json.dumps(results), flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: nothing left to flush


if __name__ == "__main__":
    main()
