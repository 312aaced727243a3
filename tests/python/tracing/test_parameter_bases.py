"""A module's parameters moved to lazy_mlir are their own bases (module_moves.py): no
view copy is dispatched to regenerate them after an optimizer step, the first step
records the graph every later step does, and user aliases of a parameter made after the
move still follow it."""

from __future__ import annotations

import collections

import pytest
import torch
from conftest import DEVICE, assert_no_fallback
from torch import nn
from torch._C import _functionalization

import lazymlir
from lazymlir import metrics
from lazymlir.tracing import native, tracer


@pytest.fixture
def dispatched(monkeypatch):
    """Counts of the ops reaching the tracer (top-level calls only; the C++ entry's
    own recording is off, so that every op reaches the Python one)."""
    counts = collections.Counter()
    entry = tracer._torch_dispatch
    depth = [0]

    def counting(cls, func, types, args=(), kwargs=None):
        if not depth[0]:
            counts[str(func)] += 1
        depth[0] += 1
        try:
            return entry(cls, func, types, args, kwargs)
        finally:
            depth[0] -= 1
    monkeypatch.setattr(tracer, "_torch_dispatch", counting)
    with native.python_recording():
        yield counts


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def test_moved_parameters_are_bases_and_train_as_eager(dispatched):
    lazymlir.session.reset()  # a fresh graph cache: count every compile of this loop
    metrics.reset()
    eager = _model()
    lazy = _model().to(DEVICE)
    for p in lazy.parameters():
        assert _functionalization.get_view_meta_sequence(p) == []
    x, y = torch.randn(4, 6), torch.randn(4, 3)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, lazy)]
    batches = ((x, y), (x.to(DEVICE), y.to(DEVICE)))
    compiles = []
    for step in range(3):
        losses = []
        for model, opt, (xs, ys) in zip((eager, lazy), opts, batches):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(xs), ys)
            loss.backward()
            if step == 2 and model is lazy:
                dispatched.clear()
            opt.step()
            losses.append(loss.item())
        lazymlir.mark_step()
        compiles.append(metrics.counter("UncachedCompile"))
        torch.testing.assert_close(losses[1], losses[0])
    # Plain SGD makes the same graphs at every step (the loss read, then the rest), the
    # first included: the parameters' views are regenerated at the first step as at
    # every later one.
    assert compiles[0] == compiles[-1], compiles
    # A parameter that is a view of a detached base is regenerated (detach_copy) after it
    # is mutated.
    assert dispatched["aten.detach_copy.default"] == 0, dispatched
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.cpu(), pe)
    assert_no_fallback()


def test_alias_of_a_moved_parameter_follows_it():
    results = []
    for device in ("cpu", DEVICE):
        torch.manual_seed(0)
        module = nn.Linear(3, 2).to(device)
        alias, view = module.weight.detach(), module.weight[0]
        with torch.no_grad():
            module.weight.mul_(2)
        alias.add_(1)
        results.append([t.detach().cpu() for t in (module.weight, alias, view)])
        assert module.weight.requires_grad and isinstance(module.weight, nn.Parameter)
    for lazy, eager in zip(results[1], results[0]):
        torch.testing.assert_close(lazy, eager)
    assert_no_fallback()
