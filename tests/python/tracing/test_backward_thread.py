"""Which thread traces backward: the caller's for roots on the lazy device, as on CPU.

The autograd engine hands a non-CPU device's backward to a thread of its own, a
hand-off of two scheduler wake-ups per `backward()`; the device asks it to run
backward from lazy roots on the calling thread (device_guard.py). Tracing only, no
compiles: the hooks run while backward is traced.
"""

from __future__ import annotations

import threading

import pytest
import torch
from conftest import DEVICE


def _hook_threads(x, run_backward):
    """The threads the hooks on `x` and on a value inside the graph ran on."""
    threads = []
    w = x.detach().clone().requires_grad_(True)
    mid = w * 2.0
    mid.register_hook(lambda g: threads.append(threading.get_ident()))
    w.register_hook(lambda g: threads.append(threading.get_ident()))
    run_backward(w, mid.sin().sum())
    return threads


@pytest.mark.parametrize("entry", ["backward", "grad"])
def test_lazy_backward_runs_on_the_calling_thread(entry):
    def run(w, loss):
        if entry == "backward":
            loss.backward()
            assert w.grad is not None and w.grad.device.type == DEVICE
        else:
            (grad,) = torch.autograd.grad(loss, w)
            assert grad.device.type == DEVICE

    threads = _hook_threads(torch.ones(3, device=DEVICE), run)
    assert threads == [threading.get_ident()] * 2


def test_lazy_backward_on_another_user_thread_runs_there():
    seen = {}

    def worker():
        seen["worker"] = threading.get_ident()
        seen["hooks"] = _hook_threads(torch.ones(3, device=DEVICE),
                                      lambda w, loss: loss.backward())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["hooks"] == [seen["worker"]] * 2


def test_multithreading_setting_is_restored_after_backward():
    _hook_threads(torch.ones(3, device=DEVICE), lambda w, loss: loss.backward())
    assert torch._C._is_multithreading_enabled()


def test_lazy_gradients_match_cpu():
    x = torch.linspace(-1.0, 1.0, 5)
    w = x.clone().requires_grad_(True)
    (w * 2.0).sin().sum().backward()
    wl = x.to(DEVICE).requires_grad_(True)
    (wl * 2.0).sin().sum().backward()
    torch.testing.assert_close(wl.grad.cpu(), w.grad)
