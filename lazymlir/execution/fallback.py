"""Counted eager fallback: run one ATen op with PyTorch on CPU tensors.

Every fallback is counted as `aten::<op>` (and `FallbackOps`) in the metrics
and warned about once per op and session (LAZYMLIR_FALLBACK=warn), so a
missing lowering is never silent. LAZYMLIR_FALLBACK=error forbids fallbacks
for ops that could have been compiled: the compile error surfaces instead.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

from .. import lowering, session
from . import diagnostics

# Frames inside these packages are not the user's: a warning points past them
# (lowering/ sits beside lazymlir/ in a source checkout).
_INTERNAL = tuple(os.path.dirname(m.__file__) + os.sep
                  for m in (sys.modules[__name__.rsplit(".", 2)[0]], lowering, torch))


def _user_stacklevel() -> int:
    """The `stacklevel` that makes a warning name the user's line, not ours or torch's."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level


_is_copy_on_write = getattr(torch._C, "_is_cow_tensor", lambda tensor: False)


def kernel_input(value):
    """`value`, made safe to hand to a PyTorch CPU kernel: a host copy of a lazy
    value shares its storage copy-on-write (targets/cpu.py), and some kernels take a
    mutable accessor of an input inside at::parallel_for (ctc_loss's backward),
    where PyTorch refuses to materialize a copy-on-write storage (an internal
    assert). So the tensor gets its own storage first (one copy, on this slow path)."""
    if isinstance(value, torch.Tensor) and _is_copy_on_write(value):
        value.data_ptr()  # a mutable access: materializes the copy
    return value


def allowed() -> bool:
    return session.current().settings.fallback != "error"


def count(name: str, reason: str | None = None) -> None:
    """Record one eager run of op `name` ('aten::nonzero'), warning once per op."""
    current = session.current()
    current.metrics.inc(name)
    current.metrics.inc("FallbackOps")
    diagnostics.on_fallback(current, name, reason)
    if name not in current.warned and current.settings.fallback == "warn":
        current.warned.add(name)
        why = f": {reason.splitlines()[0]}" if reason else ""
        warnings.warn(f"lazymlir: {name} has no lowering here and runs eagerly on CPU "
                      f"(counted as metrics '{name}'){why}", stacklevel=_user_stacklevel())
