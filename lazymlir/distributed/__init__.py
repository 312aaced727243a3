"""torch.distributed on lazy_mlir tensors (c10d collectives, DDP) and in compiled graphs.

- collectives.py: c10d's in-place collectives on lazy_mlir tensors run with the
  process group's CPU backend on host copies, results written back through
  functionalization;
- host_copy.py: `cpu.copy_(lazy)` from C++ (DDP's reducer), installed with the
  first process group;
- process_group.py: `init_process_group()` without a backend picks gloo;
- compiled.py: `_c10d_functional` collectives in torch.compile graphs;
- fsdp.py: `init_device_mesh` for lazy_mlir; FSDP2 on it raises a clear error.

`install()` runs when lazymlir is imported (PyTorch's CPU and CUDA wheels have
torch.distributed; without it, nothing is installed).
"""

from __future__ import annotations

import torch

from . import collectives, process_group
from .fsdp import init_device_mesh


def install() -> None:
    if not torch.distributed.is_available():
        return
    collectives.install()
    process_group.install()


__all__ = ["install", "init_device_mesh"]
