"""DLPack in and out of the `lazy_mlir` device: `to_dlpack`, `from_dlpack`, `__dlpack__`.

    y = lazymlir.from_dlpack(torch_cuda_tensor)     # no copy on the cuda target
    t = torch.from_dlpack(lazy_tensor)             # a torch.cuda tensor, no copy

On the cuda target a value is exported as a kDLCUDA tensor over the runtime's own
device buffer (device id = the runtime's device); the capsule holds a reference to
the buffer, so the memory stays valid after the lazy tensor is gone, until the
consumer calls the deleter. Imports of kDLCUDA memory are used in place. On the cpu
target both directions are kDLCPU and share memory with the value's CPU tensor.

PyTorch's own `torch.utils.dlpack.to_dlpack` is a C function that refuses
PrivateUse1 tensors; `Tensor.__dlpack__`/`__dlpack_device__` are Python methods,
which `install()` extends for lazy_mlir tensors, so `torch.from_dlpack(lazy)` and
other libraries' `from_dlpack` work.

Streams (DLPack's `stream` argument: the stream the consumer will read on): when the
consumer names one, it is made to wait for the runtime's pending work with an event,
and when it releases the tensor the runtime's stream waits for the consumer's work
before the block can be reused; when it names none (-1), the runtime synchronizes its
stream before handing out the pointer and waits for the whole device context at the
release. On import the runtime passes its own stream to the producer's `__dlpack__`,
so the producer orders its pending writes before it.

Lazy values are immutable and may be shared by several tensors (clone, detach), so
an exported value is for reading: versioned capsules carry DLPack's read-only flag.
Writes into imported memory by its producer show in the lazy values using it (they
alias it); in-place ops on the lazy side make new values, as everywhere on the
device, and never write the producer's memory.
"""

from __future__ import annotations

import torch

from . import targets
from .tracing import tracer
from .tracing.materialize import materialize
from .tracing.values import value_of, inner

NAME = "lazy_mlir"


def _inner(tensor: torch.Tensor):
    if torch._is_functional_tensor(tensor):
        torch._sync(tensor)  # apply pending mutations made through views of its base
        return inner(tensor)
    return tensor


def to_dlpack(tensor: torch.Tensor, *, versioned: bool = False, stream: int | None = -1):
    """A DLPack capsule of a lazy_mlir tensor, without a copy.

    Runs what the tensor's value still needs (a sync point for that value only), then
    exports its buffer: kDLCUDA on the cuda target (the runtime's device buffer),
    kDLCPU on the cpu target. `versioned`: a DLPack 1.0 "dltensor_versioned" capsule
    with the read-only flag; else a "dltensor" capsule. `stream`: the CUDA stream the
    consumer reads on (DLPack's convention: None or 1 the legacy default stream, 2 the
    per-thread one, a handle; -1: unknown, then the runtime's stream is synchronized).
    The capsule can be consumed once; the memory lives until its consumer releases it.
    """
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != NAME:
        raise TypeError(f"lazymlir.to_dlpack takes a lazy_mlir tensor, got "
                        f"{getattr(tensor, 'device', type(tensor).__name__)}")
    if tensor.requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    value = value_of(_inner(tensor))
    materialize([value])
    return targets.active().export_dlpack(value.data, value.meta, versioned=versioned,
                                          stream=stream)


def from_dlpack(source) -> torch.Tensor:
    """A lazy_mlir tensor over a DLPack tensor (an object with `__dlpack__` and
    `__dlpack_device__`, e.g. a torch.cuda tensor, or a capsule, consumed here).

    cuda target: kDLCUDA memory of the runtime's device is used in place, without a
    copy (the producer's deleter runs when the last lazy value using it is dropped);
    kDLCPU tensors are copied to the device (an upload). cpu target: kDLCPU memory is
    used in place. Non-contiguous kDLCUDA tensors, other devices, a device id other
    than the runtime's, and element types the device does not support raise errors.
    """
    data, shape, dtype = targets.active().import_dlpack(source)
    inner = tracer.adopt(data, shape, dtype, "lazymlir.from_dlpack")
    return torch._to_functional_tensor(inner)


def install() -> None:
    """Extend `Tensor.__dlpack__`/`__dlpack_device__` to lazy_mlir tensors (idempotent)."""
    dlpack, device = torch.Tensor.__dlpack__, torch.Tensor.__dlpack_device__
    if getattr(dlpack, "_lazymlir", False):
        return

    def __dlpack__(self, *, stream=-1, max_version=None, dl_device=None, copy=None):
        if self.device.type != NAME:
            return dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device,
                          copy=copy)
        if copy:
            raise BufferError("lazy_mlir tensors are exported without a copy (copy=True)")
        if dl_device is not None and tuple(dl_device) != targets.active().dlpack_device():
            raise BufferError(f"lazy_mlir tensors are exported on "
                              f"{targets.active().dlpack_device()}, not {tuple(dl_device)}")
        return to_dlpack(self, versioned=max_version is not None and max_version[0] >= 1,
                         stream=stream)

    def __dlpack_device__(self):
        if self.device.type != NAME:
            return device(self)
        return targets.active().dlpack_device()

    __dlpack__._lazymlir = True
    __dlpack__.__doc__ = dlpack.__doc__
    __dlpack_device__.__doc__ = device.__doc__
    torch.Tensor.__dlpack__ = __dlpack__
    torch.Tensor.__dlpack_device__ = __dlpack_device__
