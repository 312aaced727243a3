"""`cpu_tensor.copy_(lazy_tensor)` from C++ callers (DDP's reducer), at the Functionalize key.

PyTorch's functionalization kernel for copy_ asserts when its destination is not a
functional tensor and its source is ("mutating a non-functional tensor with a
functional tensor is not allowed"), unless the source is an XLA tensor. Python
callers are covered by device.py's `Tensor.copy_` wrapper; C++ callers go straight
to the dispatcher: DDP's reducer copies its broadcast bucket indices from the
device to the host (`sync_bucket_indices`) when it rebuilds buckets.

A Python kernel cannot hand a call on to the kernel it replaces, so this one does
all of copy_'s functionalization: a host destination gets the source's values
(a sync point); otherwise it does what the generated kernel does (sync the
arguments, run the functional `copy` below functionalization, replace and commit
the destination's value). A destination that is not functional, from a source
that is not either, is copied below functionalization, as the generated kernel's
"no-op and redispatch" case does.
"""

from __future__ import annotations

import warnings

import torch

from ..tracing.values import inner

_SKIP_FUNCTIONALIZE = torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)
_library = None


def _unwrap(tensor):
    if isinstance(tensor, torch.Tensor) and torch._is_functional_tensor(tensor):
        torch._sync(tensor)
        return inner(tensor)
    return tensor


def copy_(self, src, non_blocking=False):
    if not torch._is_functional_tensor(self):
        if torch._is_functional_tensor(src):
            # A host destination (or any other non-functional one): the source's values
            # come to the CPU first (for a lazy source, a sync point).
            src = src.to("cpu")
        with torch._C._ExcludeDispatchKeyGuard(_SKIP_FUNCTIONALIZE):
            return torch.ops.aten.copy_.default(self, src, non_blocking)
    inner_self, inner_src = _unwrap(self), _unwrap(src)
    with torch._C._ExcludeDispatchKeyGuard(_SKIP_FUNCTIONALIZE):
        updated = torch.ops.aten.copy.default(inner_self, inner_src, non_blocking)
    torch._functionalize_replace(self, updated)
    torch._functionalize_commit_update(self)
    torch._sync(self)
    return self


def install() -> None:
    """Register the kernel (idempotent). Done when a process group is made: every
    copy_ of a lazy tensor then takes this Python kernel (measured under load: 310 us
    against 160 per copy_), which programs without torch.distributed need not pay."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": meant
        warnings.simplefilter("ignore")
        _library.impl("copy_", copy_, "Functionalize")
