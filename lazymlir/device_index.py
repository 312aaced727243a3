"""What `lazy_mlir:N` names: each process has one lazy_mlir device.

A process's lazy values live on one device (the host on the cpu target, one GPU
on the cuda target), so `lazy_mlir` and `lazy_mlir:0` name it, and so does
`lazy_mlir:<LOCAL_RANK>` in a process torchrun started: scripts written for CUDA
say `torch.device(device_type, local_rank)` (DDP's `device_ids=[local_rank]`,
`set_device(local_rank)`), and on the cuda target that process's device is GPU
LOCAL_RANK (targets/cuda.py: `local_ordinal`). Its tensors report `lazy_mlir:0`
whichever name made them. Any other index is a mistake (an index meant for a
machine with one lazy device per GPU, or the wrong rank's) and raises rather than
silently being the same device.
"""

from __future__ import annotations

import os

NAME = "lazy_mlir"


def local_rank() -> int | None:
    """LOCAL_RANK as torchrun (or another launcher) sets it; None outside one."""
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None and value.strip().isdigit() else None


def valid(index: int | None) -> bool:
    return index is None or index == 0 or index == local_rank()


def check(device) -> None:
    """Raise for a `lazy_mlir:N` that does not name this process's device (`device`: a
    torch.device, or None for the default)."""
    index = getattr(device, "index", None)
    if valid(index):
        return
    rank = local_rank()
    named = (f"{NAME}, {NAME}:0 or {NAME}:{rank} (its LOCAL_RANK)" if rank
             else f"{NAME} or {NAME}:0")
    raise ValueError(
        f"{NAME}:{index} is not this process's device: a process has one {NAME} device "
        f"(on the cuda target, the GPU of its LOCAL_RANK); name it {named}. Launch one "
        f"process per GPU (torchrun --nproc-per-node=<GPUs>) to use several.")
