"""Targets: where lazy values live and compiled graphs run (one `Target` interface).

    cpu   dense CPU tensors; graphs are `.so` files called with memref descriptors
    cuda  device buffers from the C++ runtime's caching allocator; graphs are
          kernels (PTX/cubin) + a launch plan the runtime executes

`active()` resolves LAZYMLIR_TARGET once per session: `auto` picks cuda where a
GPU and driver are usable, else cpu; `cuda` fails loudly without one.
LAZYMLIR_CUDA_DRIVER picks what the cuda target runs on: `real` (libcuda.so.1),
`emulator` (kernels run on the CPU: how CI checks the cuda target without a GPU) or
`fake` (no kernel runs). The last two are always usable, so with them `auto` means cuda.
"""

from __future__ import annotations

from .. import session
from .base import CompiledCheckFailed, Executable, OutputMetas, Target
from .cpu import CpuTarget
from .cuda import CudaTarget, unavailable_reason

NAMES = ("cpu", "cuda")


def resolve(requested: str) -> Target:
    if requested == "cpu":
        return CpuTarget()
    if requested in ("auto", "cuda"):
        settings = session.current().settings
        problem = unavailable_reason(settings.runtime_lib, settings.cuda_driver)
        if problem is None:
            return CudaTarget.from_settings(settings)
        if settings.cuda_driver != "real":
            raise RuntimeError(f"LAZYMLIR_CUDA_DRIVER={settings.cuda_driver} is not usable: "
                               f"{problem}")
        if requested == "cuda":
            # The runtime's own message ends with that advice; the line below gives it whole.
            problem = problem.removesuffix("; use LAZYMLIR_TARGET=cpu")
            raise RuntimeError(
                f"LAZYMLIR_TARGET=cuda but no usable GPU: {problem}. "
                f"Use LAZYMLIR_TARGET=cpu (or auto) on machines without a CUDA driver, or "
                f"LAZYMLIR_CUDA_DRIVER=emulator to run the cuda target's kernels on the CPU.")
        return CpuTarget()
    raise ValueError(f"unknown target {requested!r}; use auto, cpu or cuda")


def active() -> Target:
    """The current session's target, resolved on first use."""
    current = session.current()
    if current.target is None:
        current.target = resolve(current.settings.target)
    return current.target


__all__ = ["CompiledCheckFailed", "Executable", "OutputMetas", "Target", "CpuTarget",
           "CudaTarget", "NAMES", "resolve", "active"]
