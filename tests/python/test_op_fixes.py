"""Regression tests for op bugs the OpInfo sweep (test_opinfo.py) found."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, assert_no_fallback, compare_factory, compare_with_eager


@pytest.mark.parametrize("dim", [0, -1])
def test_sum_and_mean_of_a_0d_tensor_over_dim_0(dim):
    # numerics' blocked sums indexed the shape of a 0-d tensor with its dim.
    x = torch.tensor(2.5)
    compare_with_eager(lambda t: (t.sum(dim), t.sum(dim, keepdim=True), t.mean(dim)), x)
    assert_no_fallback()


@pytest.mark.parametrize("size", [(3,), (0,), (2, 4), (3, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_eye(size, dtype):
    # eye(n, device=lazy_mlir) reached the tracer as empty + eye.m_out with a
    # (0,)-shaped out: the result kept that shape.
    compare_factory(lambda device: torch.eye(*size, dtype=dtype, device=device))
    assert_no_fallback()


def test_worker_messages_over_a_raw_pipe():
    # The compile worker's stdout was a buffered reader: a "stage" and the "ok"
    # that followed could arrive in one read, the "ok" stayed in the buffer and
    # select() on the pipe waited for LAZYMLIR_COMPILE_TIMEOUT. The pipe is raw
    # now; messages must survive partial reads and writes on it.
    import os
    import threading

    from lazymlir.execution.worker import _wait_readable, read_message, write_message

    r, w = os.pipe()
    with os.fdopen(r, "rb", buffering=0) as reader, os.fdopen(w, "wb", buffering=0) as writer:
        big = ("ok", b"x" * (1 << 20))  # larger than a pipe's buffer
        sender = threading.Thread(target=lambda: (write_message(writer, ("stage", "linalg")),
                                                  write_message(writer, big)))
        sender.start()
        assert read_message(reader) == ("stage", "linalg")
        import time
        assert _wait_readable(reader, time.monotonic() + 30)
        assert read_message(reader) == big
        sender.join()


def test_bool_clamp_and_sort_order_false_below_true():
    # torch-mlir compared i1 as signed (True = -1 < False): clamp_max gave the max.
    a = torch.tensor([True, True, False, False, True])
    b = torch.tensor([True, False, True, False, False])
    compare_with_eager(lambda x, y: (torch.clamp_max(x, y), torch.clamp_min(x, y),
                                     torch.clamp(x, min=y), torch.clamp_max(x.view(5, 1), y)),
                       a, b)
    compare_with_eager(lambda x: (x.sort().values, x.sort(descending=True).values,
                                  x.view(1, 5).sort(dim=1).values), a)
    assert_no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_norm_eval_returns_empty_statistics(dtype):
    # Eager CPU returns (0,)-shaped save_mean/save_invstd in eval mode; lazy
    # returned per-channel ones.
    x = torch.randn(2, 3, 4).to(dtype)
    w, b = torch.rand(3).to(dtype), torch.rand(3).to(dtype)
    rm, rv = torch.rand(3).to(dtype), torch.rand(3).to(dtype) + 0.5

    def f(x, w, b, rm, rv):
        return (torch.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5),
                torch.ops.aten._native_batch_norm_legit(x, w, b, rm, rv, False, 0.1, 1e-5))
    if dtype == torch.float32:
        compare_with_eager(f, x, w, b, rm, rv)
    else:  # the normalized values in bfloat16 differ by rounding; shapes and dtypes must not
        got = f(*(t.to(DEVICE) for t in (x, w, b, rm, rv)))
        for g, e in zip(got, f(x, w, b, rm, rv)):
            assert [(t.shape, t.dtype) for t in g] == [(t.shape, t.dtype) for t in e]
    assert_no_fallback()
