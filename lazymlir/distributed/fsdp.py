"""Device meshes over lazy_mlir, and FSDP2's refusal on them.

PyTorch's `init_device_mesh` refuses the device name (its check takes the
underscore for a device index); `init_device_mesh` here builds the same
`DeviceMesh` directly.

FSDP2 (`fully_shard`) keeps its sharded parameters as DTensors, whose ops run their
local ops below functionalization (they fail on lazy tensors), frees each
parameter's storage after use and allocates it again before the next
(`untyped_storage().resize_`), and compares storage data pointers: lazy values have
no storage to free or compare (docs/distributed.md: FSDP2). On a lazy_mlir mesh
its first forward raises an error saying what to use instead (DDP on lazy_mlir, or
FSDP2 on CPU tensors compiled with torch.compile(backend="lazymlir")) rather than
fail somewhere inside.
"""

from __future__ import annotations

import importlib

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from ..support.errors import UnsupportedOperationError

NAME = "lazy_mlir"
FSDP2_ERROR = (
    "FSDP2 (fully_shard) is not supported on lazy_mlir: its sharded parameters are "
    "DTensors, whose ops do not run on lazy tensors yet, and it frees and re-allocates "
    "parameter storage, which lazy tensors do not have (docs/distributed.md). Use "
    "DistributedDataParallel on the lazy_mlir model, or fully_shard the model on CPU "
    "tensors and compile it with torch.compile(backend='lazymlir').")


def init_device_mesh(mesh_shape: tuple[int, ...], *,
                     mesh_dim_names: tuple[str, ...] | None = None) -> DeviceMesh:
    """`torch.distributed.device_mesh.init_device_mesh("lazy_mlir", mesh_shape, ...)`
    for the lazy device (the default process group must be initialized)."""
    mesh = torch.arange(dist.get_world_size()).view(*mesh_shape)
    return DeviceMesh(NAME, mesh, mesh_dim_names=mesh_dim_names)


def install() -> None:
    """Make FSDP2's first use of a lazy_mlir device raise FSDP2_ERROR (idempotent).

    Called when a process group is made (process_group.py), not at `import lazymlir`:
    importing FSDP takes seconds, and FSDP needs a process group."""
    module = importlib.import_module("torch.distributed.fsdp._fully_shard._fsdp_param_group")
    context = module.FSDPCommContext
    original = context.lazy_init
    if getattr(original, "_lazymlir", False):
        return

    def lazy_init(self, device: torch.device):
        if device.type == NAME:
            raise UnsupportedOperationError(FSDP2_ERROR)
        return original(self, device)

    lazy_init._lazymlir = True
    context.lazy_init = lazy_init
