"""Host data entering and leaving the trace outside a graph.

`constant` uploads a CPU tensor as a materialized lazy value (a CPU tensor mixed
into a lazy op, a copy to the device), `adopt` wraps target data made elsewhere
(a DLPack import) without a copy, and `to_host` gives an eager kernel the CPU
form of a lazy argument (syncing it). Each of these is an event a decomposition
template cannot replay, so each counts in `state.impure`.
"""

from __future__ import annotations

import torch

from .. import targets
from . import device_rules, layouts
from .materialize import to_cpu
from .trace_state import state
from .values import LazyTensor, LazyValue, is_lazy, meta_like


def constant(cpu: torch.Tensor) -> LazyTensor:
    """A materialized lazy value holding a copy of `cpu`."""
    state.impure += 1
    device_rules.check_supported(cpu.dtype, cpu.layout, "copy to lazy_mlir")
    cpu = cpu.detach().to("cpu")
    strides = layouts.dense_strides(cpu)  # a channels_last tensor stays one for as_strided
    cpu = cpu.contiguous()
    value = LazyValue(meta_like(cpu.shape, cpu.dtype), data=targets.active().upload(cpu))
    if strides is not None:
        layouts.set_layout(value, strides)
    return LazyTensor(value)


def adopt(data, shape, dtype: torch.dtype, what: str) -> LazyTensor:
    """A materialized lazy value over target data made outside the trace (a DLPack
    import): no copy."""
    state.impure += 1
    device_rules.check_supported(dtype, torch.strided, what)
    return LazyTensor(LazyValue(meta_like(shape, dtype), data=data))


def to_host(x):
    """`x` as an eager CPU kernel takes it: a lazy tensor synced to a CPU tensor, the
    lazy device as the CPU device, anything else unchanged."""
    if is_lazy(x):
        state.impure += 1
        return to_cpu(x)
    if isinstance(x, torch.device) and x.type == "lazy_mlir":
        return torch.device("cpu")
    return x
