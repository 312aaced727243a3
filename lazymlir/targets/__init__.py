"""Targets: where lazy values live and compiled graphs run (one `Target` interface).

    cpu   dense CPU tensors; graphs are `.so` files called with memref descriptors
    cuda  device buffers from the C++ runtime's caching allocator; graphs are
          kernels (PTX/cubin) + a launch plan the runtime executes

`active()` resolves LAZYMLIR_TARGET once per session: `auto` picks cuda where a
GPU and driver are usable, else cpu; `cuda` fails loudly without one.
"""

from __future__ import annotations

from .. import session
from .base import Executable, OutputMetas, Target
from .cpu import CpuTarget
from .cuda import CudaTarget, unavailable_reason

NAMES = ("cpu", "cuda")


def resolve(requested: str) -> Target:
    if requested == "cpu":
        return CpuTarget()
    if requested in ("auto", "cuda"):
        settings = session.current().settings
        problem = unavailable_reason(settings.runtime_lib)
        if problem is None:
            return CudaTarget(runtime_lib=settings.runtime_lib, chip=settings.cuda_chip)
        if requested == "cuda":
            raise RuntimeError(
                f"LAZYMLIR_TARGET=cuda but no usable GPU: {problem}. "
                f"Use LAZYMLIR_TARGET=cpu (or auto) on machines without a CUDA driver.")
        return CpuTarget()
    raise ValueError(f"unknown target {requested!r}; use auto, cpu or cuda")


def active() -> Target:
    """The current session's target, resolved on first use."""
    current = session.current()
    if current.target is None:
        current.target = resolve(current.settings.target)
    return current.target


__all__ = ["Executable", "OutputMetas", "Target", "CpuTarget", "CudaTarget", "NAMES",
           "resolve", "active"]
