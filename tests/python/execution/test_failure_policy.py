"""Failure policy at sync points: a graph that fails to compile marks its values and
spares the rest, also when the failure happens inside backward."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import DEVICE

import lazymlir
from lazymlir import metrics
from lazymlir.lowering.front import fft

# A transform longer than the DFT decomposition takes stays an `_fft_r2c`, which
# torch-mlir cannot lower: a real compile failure naming its op.
UNLOWERED = fft.MAX_LENGTH + 1


def _unlowered(x):
    return torch.fft.fft(x).real


@pytest.fixture
def no_fallbacks():
    settings = lazymlir.config.settings()
    saved, settings.fallback = settings.fallback, "error"
    yield
    settings.fallback = saved


def test_failed_graph_marks_its_values_and_spares_the_rest(no_fallbacks):
    good = (torch.arange(6.0).to(DEVICE) * 2)
    assert good.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    bad = _unlowered(torch.randn(2, UNLOWERED).to(DEVICE))  # no lowering, fallback forbidden
    with pytest.raises(lazymlir.CompileError) as first:
        lazymlir.mark_step()
    assert "reproduce with: lazymlir-opt" in str(first.value)
    assert first.value.op == "torch.aten._fft_r2c", first.value.op
    # Reading a value of the failed graph raises the same error again, and the
    # next mark_step does not retry it.
    with pytest.raises(lazymlir.CompileError, match="_fft_r2c"):
        bad.cpu()
    before = metrics.counter("UncachedCompile")
    lazymlir.mark_step()
    assert metrics.counter("UncachedCompile") == before
    # Earlier values stay readable; new work compiles and runs.
    assert good.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert (good + 1).sum().item() == 36.0


def test_failed_input_poisons_only_what_depends_on_it(no_fallbacks):
    bad = _unlowered(torch.randn(2, UNLOWERED).to(DEVICE))
    with pytest.raises(lazymlir.CompileError):
        bad.cpu()
    with pytest.raises(lazymlir.CompileError):
        (bad * 2).cpu()  # uses a failed value: the original error again
    assert (torch.ones(3).to(DEVICE) * 4).sum().item() == 12.0


def test_a_value_computed_from_a_failed_one_fails_once(no_fallbacks):
    """A value whose graph cannot be built because an input failed is failed too: while
    it stays alive, later mark_step()s skip it instead of raising its error again."""
    bad = _unlowered(torch.randn(2, UNLOWERED).to(DEVICE))
    with pytest.raises(lazymlir.CompileError):
        bad.cpu()
    derived = bad * 2
    with pytest.raises(lazymlir.CompileError, match="_fft_r2c"):
        derived.cpu()
    lazymlir.mark_step()  # `derived` is alive and was never computed: not retried
    x = torch.ones(3).to(DEVICE)
    x.add_(1)
    lazymlir.mark_step()
    assert x.cpu().tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(lazymlir.CompileError, match="_fft_r2c"):
        derived.cpu()  # reading it still raises the original error


def test_compile_error_inside_backward_is_the_clear_error(no_fallbacks):
    class SyncInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            scale = _unlowered(grad).sum().item()  # a sync point inside backward
            return grad * scale

    x = torch.randn(2, UNLOWERED).to(DEVICE).requires_grad_()
    with pytest.raises(lazymlir.CompileError, match="_fft_r2c"):
        SyncInBackward.apply(x).sum().backward()
    assert (x.detach() * 0 + 1).sum().item() == 2.0 * UNLOWERED


def test_error_in_a_builtin_backward_op_surfaces_on_read(monkeypatch):
    """Autograd runs backward on its own thread, where an exception from
    __torch_dispatch__ is lost (SystemError / abort); the tracer turns it into
    failed gradients instead, and reading one raises the original error."""
    from lazymlir.tracing import native, tracer

    mul = torch.ops.aten.mul.Tensor
    (torch.ones(2).to(DEVICE) * torch.ones(2).to(DEVICE)).cpu()  # mul gets its recorder
    real = tracer._LEAVES[id(mul)]

    def injected(func, args, kwargs):
        if torch._C._current_graph_task_id() != -1:  # only while backward runs
            raise lazymlir.CompileError("injected failure in MulBackward0")
        return real(func, args, kwargs)

    monkeypatch.setitem(tracer._LEAVES, id(mul), injected)
    x = torch.randn(3).to(DEVICE).requires_grad_()
    y = torch.randn(3).to(DEVICE)
    # (the C++ entry would record mul itself: here it goes to the Python recorder)
    with native.python_recording():
        (x * y).sum().backward()  # completes: the failure travels with the gradient
    monkeypatch.setitem(tracer._LEAVES, id(mul), real)
    with pytest.raises(lazymlir.CompileError, match="injected failure in MulBackward0"):
        x.grad.cpu()
    assert (y * 2).sum().item() == pytest.approx(2 * y.cpu().sum().item())


KERNEL_ERROR_IN_BACKWARD = textwrap.dedent("""
    import torch, lazymlir
    # ctc_loss has no meta kernel: its backward runs eagerly, inside the C++ autograd
    # node CtcLossBackward0, on the engine's thread for the device; its CPU kernel
    # is made to raise.
    lib = torch.library.Library("aten", "IMPL")
    def raising(*args, **kwargs):
        raise RuntimeError("error raised by the eager kernel")
    lib.impl("_ctc_loss_backward.Tensor", raising, "CPU")
    lib.impl("_ctc_loss_backward", raising, "CPU")
    log_probs = torch.randn(20, 2, 8).to("lazy_mlir").requires_grad_()
    targets = torch.randint(1, 8, (2, 5)).to("lazy_mlir")
    loss = torch.nn.functional.ctc_loss(log_probs.log_softmax(-1), targets, [20, 20],
                                        [5, 5], reduction="sum")
    try:
        loss.backward()
    except RuntimeError as error:
        print("RAISED", error)
    print("ALIVE", (torch.ones(3).to("lazy_mlir") * 2).sum().item())
""")


def test_a_kernel_error_inside_a_cpp_autograd_node_raises_it():
    """The autograd engine unwinds such an error with the Python error still pending,
    through a stream guard of our device; PyTorch's Python-backend device guard
    called into Python there and the process aborted (std::terminate). In a child
    process: a regression must not take the test run with it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    done = subprocess.run([sys.executable, "-c", KERNEL_ERROR_IN_BACKWARD], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RAISED error raised by the eager kernel" in done.stdout, done.stdout
    assert "ALIVE 6.0" in done.stdout, done.stdout
    assert "device guard" not in done.stderr, done.stderr  # the C++ guard built



def test_a_transient_compiler_crash_is_retried_once(monkeypatch, no_fallbacks):
    # A compile worker killed from outside (the OOM killer on a loaded machine) looks
    # like a compiler crash: the graph compiles again in a fresh worker instead of
    # being split into pieces that run with eager fallback.
    from lazymlir.execution import executor

    real, crashes = executor._worker_request, []

    def crash_once(current, kind, payload):
        if kind == "compile" and not crashes:
            crashes.append(payload["key"])
            raise lazymlir.CompilerCrashError("the MLIR compiler crashed (SIGKILL)")
        return real(current, kind, payload)

    monkeypatch.setattr(executor, "_worker_request", crash_once)
    metrics.reset()
    x = torch.arange(5.0)
    got = (x.to(DEVICE) * 3 + 0.25).exp().cpu()
    torch.testing.assert_close(got, (x * 3 + 0.25).exp())
    assert crashes and metrics.counter("CompileRetry") == 1
    assert metrics.fallback_ops() == {}


def test_a_compile_that_crashes_twice_is_a_compile_error(monkeypatch, no_fallbacks):
    from lazymlir.execution import executor

    def always_crash(current, kind, payload):
        raise lazymlir.CompilerCrashError("the MLIR compiler crashed (SIGSEGV)")

    monkeypatch.setattr(executor, "_worker_request", always_crash)
    with pytest.raises(lazymlir.CompileError, match="SIGSEGV"):
        (torch.arange(7.0).to(DEVICE) * 5 - 0.5).sin().cpu()
