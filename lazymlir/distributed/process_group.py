"""Which c10d backend serves lazy_mlir tensors: gloo, on host buffers.

With lazymlir imported, `lazy_mlir` is PyTorch's accelerator, and
`init_process_group()` without a backend looks the accelerator up in
`Backend.default_device_backend_map`; with no entry it raises ("don't know which
communication backend to use"), which breaks CPU-only programs that merely import
lazymlir. The collectives on lazy_mlir tensors run on host copies
(collectives.py), so the backend they need is the CPU one: a default process group
gets gloo for the cpu device, as it would without lazymlir.

Making a process group is also when the rest of the distributed support that costs
something is installed: the host copy_ kernel (host_copy.py) and FSDP2's check
(fsdp.py).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from . import fsdp, host_copy

NAME = "lazy_mlir"
DEFAULT = "cpu:gloo"  # what init_process_group() uses when lazy_mlir is the accelerator


class BackendConfig(distributed_c10d.BackendConfig):
    """PyTorch's BackendConfig, with the lazy device's default: an undefined backend
    on a process whose accelerator is lazy_mlir means gloo for the CPU (whose c10d
    kernels the lazy collectives call), not a backend for lazy_mlir only."""

    def __init__(self, backend):
        # A process group is being made: DDP (whose reducer copies from the device to
        # the host) and FSDP2 may follow.
        host_copy.install()
        fsdp.install()
        if str(backend) == dist.Backend.UNDEFINED and \
                torch._C._get_accelerator().type == NAME:
            backend = DEFAULT
        super().__init__(backend)


def install() -> None:
    """Make gloo the lazy device's default backend (idempotent)."""
    dist.Backend.default_device_backend_map.setdefault(NAME, dist.Backend.GLOO)
    if not issubclass(distributed_c10d.BackendConfig, BackendConfig):
        distributed_c10d.BackendConfig = BackendConfig
