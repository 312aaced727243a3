"""Errors raised while the autograd engine runs backward become failed values.

PyTorch runs backward for a non-CPU device on a worker thread of the
autograd engine. With PyTorch's Python-backend device guard, an exception raised
by `__torch_dispatch__` there does not survive the trip back to the caller
(`SystemError: run_backward ... returned NULL without setting an exception`, or
an abort); device_guard.py's C++ guard prevents the aborts (CTC loss's
backward), and the policy holds under either guard: inside backward the tracer does not raise where
it can make the op's outputs (a meta kernel names them). They become values that
carry the error (LazyValue.failed), backward completes, and the first read of a
gradient (`.cpu()`, `.item()`, `mark_step()`, an optimizer step that syncs)
raises the original error on the user's thread, as the failure policy does for
any failed graph. An op without a meta kernel raises, at `backward()`.
"""

from __future__ import annotations

import torch

from .values import LazyTensor, LazyValue, meta_like, to_meta


def in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


def failed_outputs(func, args, kwargs, error: BaseException):
    """`func`'s outputs as failed lazy values; raises `error` if they cannot be made."""
    try:
        out = func(*to_meta(tuple(args)), **{k: to_meta(v) for k, v in kwargs.items()})
    except Exception:  # noqa: BLE001  no meta kernel either: nothing to stand in for
        raise error from None

    def fail(o):
        if isinstance(o, torch.Tensor):
            value = LazyValue(meta_like(o.shape, o.dtype))
            value.failed(error)
            return LazyTensor(value)
        if isinstance(o, (list, tuple)):
            return type(o)(fail(v) for v in o)
        if o is None:
            return None
        raise error  # a non-tensor result (a Python number) cannot carry the error
    return fail(out)
