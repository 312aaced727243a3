"""torch.distributed on lazy_mlir tensors (c10d collectives, DDP) and in compiled graphs.

- collectives.py: c10d's in-place collectives on lazy_mlir tensors run with the
  process group's CPU backend on host copies, results written back through
  functionalization;
- host_copy.py: `cpu.copy_(lazy)` from C++ (DDP's reducer);
- process_group.py: `init_process_group()` without a backend picks gloo.

`install()` runs when lazymlir is imported (a no-op where PyTorch was built without
distributed support).
"""

from __future__ import annotations

import torch

from . import collectives, host_copy, process_group


def install() -> None:
    if not torch.distributed.is_available():
        return
    collectives.install()
    host_copy.install()
    process_group.install()
