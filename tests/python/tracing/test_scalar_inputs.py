"""Python scalars are graph inputs: changing values (a learning rate schedule, other
constants) reuse one compiled graph and still give eager's numbers."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, assert_no_fallback
from torch import nn

import lazymlir
from lazymlir import metrics


def _train(device, steps, schedule):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = schedule(opt)
    torch.manual_seed(1)
    data = [(torch.randn(6, 8), torch.randn(6, 4)) for _ in range(steps)]
    compiles = []
    for x, y in data:
        opt.zero_grad()
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if device == DEVICE:
            lazymlir.mark_step()
            compiles.append(metrics.counter("UncachedCompile"))
    return [p.detach().cpu() for p in model.parameters()], compiles


@pytest.mark.parametrize("schedule", [
    lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10),
    lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
], ids=["cosine", "halving"])
def test_lr_schedule_compiles_its_step_once(schedule):
    lazymlir.session.reset()  # a fresh graph cache: count every compile of this loop
    metrics.reset()
    expected, _ = _train("cpu", 10, schedule)
    actual, compiles = _train(DEVICE, 10, schedule)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
    # Step 1 creates the momentum buffers, step 2 reads them: two distinct graphs,
    # then every step is a cache hit although the learning rate changes each time.
    assert compiles[-1] == compiles[1] == 2, compiles
    assert_no_fallback()


def test_scalar_values_do_not_change_the_graph():
    x = torch.randn(5).to(DEVICE)
    results = [(x * s + s).cpu() for s in (0.5, 1.5, -2.25)]
    assert metrics.counter("UncachedCompile") <= 1
    for s, r in zip((0.5, 1.5, -2.25), results):
        torch.testing.assert_close(r, x.cpu() * s + s)
    # ints and floats promote differently: both give eager's dtype.
    i = torch.arange(4).to(DEVICE)
    assert (i * 2).cpu().dtype == torch.int64
    assert (i * 2.5).cpu().tolist() == [0.0, 2.5, 5.0, 7.5]

