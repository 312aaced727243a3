"""Reads of an output a running graph has finished (lowering/cpu/output_signals.py,
targets/cpu_background.py, tracing/materialize.py `_bound_early`): a training step's
loss read right after mark_step() waits for the code up to the loss, not for the
backward and the optimizer update after it."""

from __future__ import annotations

import lazymlir
import pytest
import torch
from conftest import DEVICE, assert_no_fallback, target_name

pytestmark = pytest.mark.skipif(target_name() != "cpu",
                                reason="background runs are the cpu target's")


def _early_reads() -> int:
    return lazymlir.metrics.counter("EarlyReads")


def test_loss_read_every_step_matches_eager(background):
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    lazy = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    lazy.load_state_dict(eager.state_dict())
    lazy = lazy.to(DEVICE)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    lazy_opt = torch.optim.SGD(lazy.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    xl, yl = x.to(DEVICE), y.to(DEVICE)
    before = _early_reads()
    for _ in range(6):
        for model, opt, a, b in ((eager, eager_opt, x, y), (lazy, lazy_opt, xl, yl)):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(a), b)
            loss.backward()
            opt.step()
            if model is eager:
                expected = loss.item()
        lazymlir.mark_step()
        assert loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
        # The parameters' new values (written into their old buffers: not early) too.
        torch.testing.assert_close(lazy[2].bias.cpu(), eager[2].bias, rtol=1e-5, atol=1e-6)
    # Each loss was bound from its signal (the bias read after it waited for the end).
    assert _early_reads() - before == 6
    lazymlir.wait()
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.cpu(), pe, rtol=1e-5, atol=1e-6)
    assert_no_fallback()


def test_a_read_returns_before_the_rest_of_the_graph_has_run(background):
    """The loss comes first, then ~0.1 s of matmuls nothing reads yet: its read
    returns while they run (the background thread's count of finished submissions
    has not moved). Timing decides only whether the run was still going; the
    runs are long enough that one of three must be."""
    from lazymlir.targets import cpu

    torch.manual_seed(0)
    a, w = torch.randn(64, 64), torch.randn(512, 512) / 24
    al, wl = a.to(DEVICE), w.to(DEVICE)
    library = cpu.background_library()
    early, before = 0, _early_reads()
    for _ in range(3):
        loss = (al * al).sum()
        tail = wl
        for _ in range(24):  # ~6 GFLOP, done after the loss
            tail = torch.tanh(tail @ wl)
        lazymlir.mark_step()
        finished = library.lazymlir_background_finished()
        assert loss.item() == pytest.approx((a * a).sum().item(), rel=1e-5)
        early += library.lazymlir_background_finished() == finished
        expected = w
        for _ in range(24):
            expected = torch.tanh(expected @ w)
        torch.testing.assert_close(tail.cpu(), expected, rtol=1e-4, atol=1e-5)
    # (the tail's read too: its signal is set before the run's end is bound)
    assert _early_reads() - before == 6
    assert early >= 1
    assert_no_fallback()


def _embedding_step(index: torch.Tensor):
    """An embedding's loss and its weight's gradient (the loss read first)."""
    torch.manual_seed(0)
    weight = torch.randn(8, 4).to(DEVICE).requires_grad_()
    loss = torch.nn.functional.embedding(index.to(DEVICE), weight).square().sum()
    loss.backward()
    lazymlir.mark_step()
    return loss, weight.grad


def _embedding_expected(index: torch.Tensor):
    torch.manual_seed(0)
    weight = torch.randn(8, 4).requires_grad_()
    loss = torch.nn.functional.embedding(index, weight).square().sum()
    loss.backward()
    return loss, weight.grad


@pytest.mark.parametrize("bounds_checks", [True, False], ids=["check_flag", "asserts"])
def test_graphs_with_checks_are_read_early_once_their_checks_passed(background, monkeypatch,
                                                                    bounds_checks):
    """An embedding's index is checked by our flag (LAZYMLIR_BOUNDS_CHECKS, or-ed where
    each check is: final after the last one) or, without it, by torch-mlir's asserts
    (peeked at the value's signal): valid indices, an early read; an out-of-range one,
    no value handed out: the graph reruns eagerly and the read raises eager's error.
    (Without our flag, the compiled backward would write the bad row for real: that
    case runs in a subprocess, test_robustness's test of failed asserts.)"""
    monkeypatch.setattr(lazymlir.config.settings(), "bounds_checks", bounds_checks)
    good = torch.tensor([1, 7, 3])
    before = _early_reads()
    loss, grad = _embedding_step(good)
    expected_loss, expected_grad = _embedding_expected(good)
    assert loss.item() == pytest.approx(expected_loss.item(), rel=1e-5)
    assert _early_reads() == before + 1
    torch.testing.assert_close(grad.cpu(), expected_grad)
    lazymlir.wait()
    if not bounds_checks:
        return
    before = _early_reads()
    loss, grad = _embedding_step(torch.tensor([1, 9, 3]))  # row 9 of 8
    with pytest.raises(IndexError, match="index out of range"):
        loss.item()
    assert _early_reads() == before
    with pytest.raises(IndexError):
        grad.cpu()


def test_segments_are_read_at_the_end(background, monkeypatch):
    """A graph cut into segments runs as a chain: its values are bound at its end."""
    settings = lazymlir.config.settings()
    monkeypatch.setattr(settings, "segment_nodes", 4)
    x = torch.randn(8, 8)
    xl = x.to(DEVICE)
    before = _early_reads()
    loss = (xl * 2).sum()
    rest = ((xl + 1).relu() * 3 - 1).exp()
    lazymlir.mark_step()
    assert loss.item() == pytest.approx((x * 2).sum().item(), rel=1e-5)
    torch.testing.assert_close(rest.cpu(), ((x + 1).relu() * 3 - 1).exp())
    assert _early_reads() == before


def test_an_early_read_after_another_wait_finished_the_run(background, monkeypatch):
    """A second thread's wait may finish a run (taking the check flag off its outputs)
    while the first thread still reads it early: the read must see the run's buffers
    as they were. Done here in order, on one thread, as that race ran on two (the
    two-thread training test of test_robustness.py failed with an IndexError)."""
    from lazymlir.execution import compiled_plan

    monkeypatch.setattr(lazymlir.config.settings(), "bounds_checks", True)
    started = []
    real_start = compiled_plan.Started.__init__

    def record(self, *args):
        real_start(self, *args)
        started.append(self)
    monkeypatch.setattr(compiled_plan.Started, "__init__", record)
    good = torch.tensor([1, 7, 3])
    loss, grad = _embedding_step(good)
    expected_loss, expected_grad = _embedding_expected(good)
    (run,) = started
    assert run.plan.flags
    finished = run.result()  # the check flag taken off
    early = [run.early_output(k) for k in range(len(finished))]
    for got, want in zip(early, finished):
        assert got is want
    assert loss.item() == pytest.approx(expected_loss.item(), rel=1e-5)
    torch.testing.assert_close(grad.cpu(), expected_grad)
