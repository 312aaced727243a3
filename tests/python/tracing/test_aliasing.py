"""Views and their bases stay linked across mutations, sync points and mark_step."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, assert_no_fallback

import lazymlir
from lazymlir import metrics

# Also run on the cuda target with the emulator driver (scripts/test.sh's second pass).
pytestmark = pytest.mark.emulator


def _pair():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return base, base.to(DEVICE)


def test_view_mutation_updates_base():
    e, x = _pair()
    for t in (e, x):
        t[1].mul_(10)
        t[:, 2].add_(1)
    assert torch.equal(x.cpu(), e)
    assert_no_fallback()


def test_base_mutation_updates_view():
    e, x = _pair()
    ev, xv = e[:, 1:3], x[:, 1:3]
    e.add_(100)
    x.add_(100)
    assert torch.equal(xv.cpu(), ev)
    assert_no_fallback()


def test_mark_step_between_view_and_view_mutation():
    e, x = _pair()
    ev, xv = e.t()[1], x.t()[1]
    lazymlir.mark_step()
    ev.fill_(-1)
    xv.fill_(-1)
    lazymlir.mark_step()
    assert torch.equal(x.cpu(), e)
    assert torch.equal(xv.cpu(), ev)
    assert_no_fallback()


def test_mark_step_between_view_and_base_mutation():
    e, x = _pair()
    ev, xv = e[1:, ::2], x[1:, ::2]
    lazymlir.mark_step()
    e.mul_(3)
    x.mul_(3)
    lazymlir.mark_step()
    assert torch.equal(xv.cpu(), ev)
    assert torch.equal(x.cpu(), e)
    assert_no_fallback()


def test_inplace_on_tensor_from_earlier_step():
    e, x = _pair()
    lazymlir.mark_step()
    for _ in range(3):
        e.add_(1)
        x.add_(1)
        e[1:3] *= 2
        x[1:3] *= 2
        lazymlir.mark_step()
        lazymlir.mark_step()
    assert torch.equal(x.cpu(), e)
    assert_no_fallback()


def test_view_of_view():
    e, x = _pair()
    ev, xv = e[1:].t()[1:3], x[1:].t()[1:3]
    ev.sub_(5)
    xv.sub_(5)
    assert torch.equal(x.cpu(), e)
    assert torch.equal(xv.cpu(), ev)
    e.mul_(2)
    x.mul_(2)
    assert torch.equal(xv.cpu(), ev)
    assert_no_fallback()


def test_cpu_twice_does_not_recompile():
    e, x = _pair()
    y = (x * 2).sum(0)
    first = y.cpu()
    before = metrics.counters()
    second = y.cpu()
    after = metrics.counters()
    assert torch.equal(first, second)
    assert torch.equal(first, (e * 2).sum(0))
    for name in ("Sync", "UncachedCompile", "CachedCompile"):
        assert after.get(name, 0) == before.get(name, 0), (name, before, after)
    assert_no_fallback()


def test_host_copies_are_independent_of_the_device_value():
    """`.to(DEVICE)` and `.cpu()` are copies in eager's sense (the cpu target makes them
    copy-on-write): writing either side, or the device tensor, never shows on the other."""
    host = torch.arange(6, dtype=torch.float32)
    x = host.to(DEVICE)
    host.add_(100)                       # the source after the move
    assert torch.equal(x.cpu(), torch.arange(6, dtype=torch.float32))
    y = (x * 2)
    out = y.cpu()
    out.mul_(-1)                         # the host result of a compiled graph
    again = y.cpu()
    assert torch.equal(again, torch.arange(6, dtype=torch.float32) * 2)
    y.add_(1)                            # the device tensor after its host copy was taken
    assert torch.equal(again, torch.arange(6, dtype=torch.float32) * 2)
    assert torch.equal(y.cpu(), torch.arange(6, dtype=torch.float32) * 2 + 1)
    z = x + 0                            # a graph reading x after its source changed
    assert torch.equal(z.cpu(), torch.arange(6, dtype=torch.float32))
    assert_no_fallback()


def test_a_graph_never_writes_the_memory_of_its_inputs():
    """slice_scatter's result was bufferized into its input's buffer, which `.to(DEVICE)`
    shares (copy-on-write) with the host tensor: the host tensor changed."""
    host, rows = torch.zeros(4, 3), torch.ones(2, 3)
    x, y = host.to(DEVICE), rows.to(DEVICE)
    z = torch.slice_scatter(x, y, 0, 0, 2)
    assert torch.equal(z.cpu(), torch.slice_scatter(host, rows, 0, 0, 2))
    assert torch.equal(host, torch.zeros(4, 3))
    assert torch.equal(x.cpu(), torch.zeros(4, 3))
    assert_no_fallback()
