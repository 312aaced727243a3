"""Graphs run in the background: mark_step() launches, reads wait (execution/runs.py).

Small graphs, few compiles: each test's graphs are cached after their first step.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time

import lazymlir
from lazymlir.tracing import values
import pytest
import torch
from conftest import DEVICE, assert_no_fallback, target_name

pytestmark = pytest.mark.skipif(target_name() != "cpu",
                                reason="background runs are the cpu target's")


def _pair():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    lazy = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    lazy.load_state_dict(eager.state_dict())
    return eager, lazy.to(DEVICE)


def _step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def test_steps_match_eager_with_reads_in_between(background):
    eager, lazy = _pair()
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    lazy_opt = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(4, 6), torch.randn(4, 2)
    xl, yl = x.to(DEVICE), y.to(DEVICE)
    states = set()
    for step in range(5):
        expected = _step(eager, eager_opt, x, y)
        loss = _step(lazy, lazy_opt, xl, yl)
        lazymlir.mark_step()
        states.add(repr(values.inner(loss)).rsplit(" ", 1)[-1])
        if step % 2:  # a read waits for the run that computes it
            assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-6)
    lazymlir.wait()
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.cpu(), pe, rtol=1e-5, atol=1e-6)
    assert states <= {"running)", "materialized)"}, states
    assert_no_fallback()


def test_a_launched_graph_runs_while_the_users_thread_holds_the_gil(background):
    """The compiled code of a launched graph runs on a thread that never takes the GIL:
    it finishes while the user's thread keeps the GIL (tracing the next step, say),
    where a Python execution thread could not even start it; values are eager's."""
    from lazymlir.targets import cpu

    x = torch.randn(64, 32)
    xl = x.to(DEVICE)
    ((xl * 2).relu() @ xl.t()).sum().item()  # compiled; the runtime loaded
    holding = ctypes.PyDLL(cpu.background_library()._name)  # its calls keep the GIL
    holding.lazymlir_background_finished.restype = ctypes.c_uint64
    before = holding.lazymlir_background_finished()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(100.0)  # no other Python thread gets the GIL from this one
    try:
        y = ((xl * 2).relu() @ xl.t()).sum()
        lazymlir.mark_step()
        deadline = time.monotonic() + 60  # a bound, not a timing: a hang fails
        while holding.lazymlir_background_finished() == before and \
                time.monotonic() < deadline:
            pass
        finished = holding.lazymlir_background_finished() > before
    finally:
        sys.setswitchinterval(switch)
    assert finished
    torch.testing.assert_close(y.cpu(), ((x * 2).relu() @ x.t()).sum(), rtol=1e-5, atol=1e-5)
    assert_no_fallback()


def test_in_place_updates_between_steps(background):
    """Parameters written in place (no_grad, copy_ from a host tensor) between launched
    steps, and a host tensor written after its upload while a run reads it."""
    eager, lazy = _pair()
    x = torch.randn(4, 6)
    host = x.clone()
    xl = host.to(DEVICE)
    for step in range(3):
        expected = eager(x).sum().item()
        out = lazy(xl).sum()
        lazymlir.mark_step()
        host.mul_(2)  # the upload shares memory copy-on-write: the lazy value keeps x
        with torch.no_grad():
            for p, q in zip(lazy.parameters(), eager.parameters()):
                p.mul_(0.5)
                q.mul_(0.5)
            lazy[0].bias.copy_(torch.full((8,), float(step)))
            eager[0].bias.copy_(torch.full((8,), float(step)))
        lazymlir.mark_step()
        assert out.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.cpu(), pe)
    torch.testing.assert_close(lazy(xl).cpu(), eager(x), rtol=1e-5, atol=1e-6)
    assert_no_fallback()


def test_a_background_error_surfaces_once_at_the_next_wait_point(background):
    x = torch.arange(8.).reshape(4, 2).to(DEVICE)
    bad = x[torch.tensor([0, 10]).to(DEVICE)] * 2  # bounds check fails when it runs
    lazymlir.mark_step()  # launched: returns before the run
    with pytest.raises(IndexError, match="index 10 is out of bounds") as raised:
        lazymlir.wait()
    assert any("ran in the background" in note for note in raised.value.__notes__)
    lazymlir.wait()  # raised once
    with pytest.raises(IndexError, match="index 10 is out of bounds"):
        bad.cpu()  # its values stay failed
    # Another read surfaces it, not only wait(); a value read raises it only once.
    bad2 = x[torch.tensor([10, 0]).to(DEVICE)] + 1
    lazymlir.mark_step()
    good = x.sum() * 1
    with pytest.raises(IndexError, match="out of bounds"):
        good.item()
    assert good.item() == 28.0  # still pending after the raise: nothing lost
    with pytest.raises(IndexError, match="out of bounds"):
        bad2.cpu()
    lazymlir.wait()
    # A value computed from a failed one fails with the same error, raised once.
    bad3 = x[torch.tensor([0, 10]).to(DEVICE)] * 2
    lazymlir.mark_step()
    derived = bad3 + 1
    raised = 0
    for wait_point in (lazymlir.mark_step, lazymlir.wait, lazymlir.wait):
        try:  # mark_step raises it if bad3's run has ended by then, else wait() does
            wait_point()
        except IndexError:
            raised += 1
    assert raised == 1
    with pytest.raises(IndexError, match="out of bounds"):
        derived.cpu()
    assert (x * 3).sum().item() == 84.0


def test_no_deadlock_with_late_teams_and_fallbacks(background, monkeypatch):
    """Runs whose loops go to the calling thread alone after a late fork, and eager
    fallbacks (a data-dependent op) reading launched values; on a thread of its own,
    so that a deadlock fails the test instead of hanging it."""
    from lazymlir.targets import cpu

    x = torch.randn(64, 32)
    xl = x.to(DEVICE)
    (xl * 2).relu().sum().item()  # loads the graph runtime
    lib = cpu.threads_library()
    u64 = ctypes.c_uint64
    lib.lazymlir_threads_tune(u64(0), u64(1_000_000), u64(4_000_000))
    # The fallback warns from the worker thread, outside pytest's warning capture.
    monkeypatch.setattr(lazymlir.config.settings(), "fallback", "silent")
    errors = []

    def work():
        try:
            for _ in range(4):
                y = (xl * 2).relu() @ xl.t()
                lazymlir.mark_step()
                n = (y > 0).nonzero().shape[0]  # falls back: waits for y's run
                assert n == int(((x * 2).relu() @ x.t() > 0).sum())
        except BaseException as error:  # noqa: BLE001
            errors.append(error)
    try:
        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        thread.join(timeout=120)
        assert not thread.is_alive(), "deadlock"
    finally:
        lib.lazymlir_threads_tune(u64(200_000), u64(10_000_000), u64(1_000_000_000))
    assert errors == []
    assert set(lazymlir.metrics.fallback_ops()) == {"aten::nonzero"}


def test_async_off_runs_at_mark_step():
    settings = lazymlir.config.settings()
    before = settings.async_execution
    settings.async_execution = False
    try:
        y = torch.ones(3).to(DEVICE) * 5
        lazymlir.mark_step()
        assert repr(values.inner(y)).endswith("materialized)")
        torch.lazy_mlir.synchronize()
        assert y.cpu().tolist() == [5.0, 5.0, 5.0]
    finally:
        settings.async_execution = before


def test_runner_order_errors_and_waiting_threads_running_the_head():
    """execution/runs.py alone: runs in launch order, a failed input's error is not
    raised twice, and a waiting thread runs the head itself when it can."""
    from lazymlir.execution import runs

    runner = runs.Runner(in_flight=3)
    order, bound = [], {}
    gate = threading.Event()

    def job(name, fail=None):
        def run():
            if name == "a":
                gate.wait(30)
            order.append((name, threading.current_thread().name))
            if fail is not None:
                raise fail
            return [name]
        return run

    def done(name):
        return lambda outputs, error: bound.__setitem__(name, error or outputs)
    first = ValueError("boom")
    a, b, c = runs.Run("a"), runs.Run("b"), runs.Run("c")
    runner.launch(a, job("a", first), done("a"))
    runner.launch(b, job("b", runs.FailedInput(first)), done("b"))
    runner.launch(c, job("c"), done("c"))
    gate.set()
    runner.wait_for(c)
    assert [name for name, _ in order] == ["a", "b", "c"]
    assert bound == {"a": first, "b": first, "c": ["c"]}
    assert any("graph a" in note for note in first.__notes__)
    assert runner.take_error() is first and runner.take_error() is None
    # With the execution thread held up, a waiting thread runs the head itself.
    runner.close()
    held = runs.Runner(thread=False)  # stands in for an execution thread not scheduled yet
    d = runs.Run("d")
    held.launch(d, job("d"), done("d"))
    held.wait_for(d)
    assert order[-1] == ("d", threading.current_thread().name) and bound["d"] == ["d"]


def test_a_read_waits_for_a_run_another_thread_launched_under_it(background, monkeypatch):
    """The interleaving of two training threads: a read finds its value pending, then,
    before it takes the session lock, another thread's mark_step() launches every live
    pending value, its own included. The read must wait for that run, not read no data."""
    from lazymlir.tracing import materialize

    real_compute = materialize._compute

    def other_thread_marks_step_first(current, pending, wait):
        if wait:
            other = threading.Thread(target=lazymlir.mark_step)
            other.start()
            other.join()
            assert all(v.run is not None or v.data is not None for v in pending)
        return real_compute(current, pending, wait)

    monkeypatch.setattr(materialize, "_compute", other_thread_marks_step_first)
    x = torch.randn(5, 3)
    got = (x.to(DEVICE) * 2 + 1).sum(0)
    torch.testing.assert_close(got.cpu(), (x * 2 + 1).sum(0))
    assert_no_fallback()
