"""Where materialized lazy values live: host memory (cpu target) or device memory (cuda).

A backend moves data in and out and runs compiled executables. The cpu
backend keeps dense CPU torch tensors; the cuda backend (runtime/cuda_backend)
keeps DeviceBuffers from the C++ runtime's caching allocator.
"""

from __future__ import annotations

import torch

from . import config

_active = None


class CpuBackend:
    target = "cpu"

    def upload(self, cpu: torch.Tensor):
        return cpu.contiguous().clone()

    def download(self, data, meta: torch.Tensor) -> torch.Tensor:
        return data.clone()

    def empty(self, meta: torch.Tensor):
        return torch.empty(meta.shape, dtype=meta.dtype)


def resolve_target(requested: str) -> str:
    """'auto' -> cuda where a GPU and driver are usable, else cpu. 'cuda' fails loudly."""
    if requested == "cpu":
        return "cpu"
    if requested in ("auto", "cuda"):
        from .runtime import cuda_backend

        problem = cuda_backend.unavailable_reason()
        if problem is None:
            return "cuda"
        if requested == "cuda":
            raise RuntimeError(
                f"LAZYMLIR_TARGET=cuda but no usable GPU: {problem}. "
                f"Use LAZYMLIR_TARGET=cpu (or auto) on machines without a CUDA driver.")
        return "cpu"
    raise ValueError(f"unknown target {requested!r}; use auto, cpu or cuda")


def active():
    """The backend for the configured target, created on first use."""
    global _active
    if _active is None:
        target = resolve_target(config.settings().target)
        if target == "cuda":
            from .runtime.cuda_backend import CudaBackend

            _active = CudaBackend()
        else:
            _active = CpuBackend()
    return _active


def target() -> str:
    return active().target
