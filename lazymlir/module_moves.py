"""Shared parameters stay shared when a module moves to or from lazy_mlir.

`nn.Module._apply` (behind `.to()`, `.cpu()`, `.half()`, ...) keeps a parameter's
identity only when the old and new tensors pass `torch._has_compatible_shallow_copy_type`,
a C++ check that accepts the built-in dense backends (CPU, CUDA, ...) but not
PrivateUse1. For lazy_mlir it makes a new Parameter per module slot instead, so a weight
shared by two modules (the tied token embedding and output head of a language model)
became two independent parameters, each trained with only its own part of the gradient:
silently wrong training. PyTorch/XLA behaves the same and asks users to re-tie weights
after `.to()`; we re-tie them here instead.

`Module._apply` is wrapped: before the outermost call the parameter slots that hold the
same Parameter are grouped; afterwards, in each group whose slots now hold different
parameters after a move to or from lazy_mlir, every slot gets the first slot's new
parameter (whose `.grad`, when there was one, was moved with it). Buffers are left as
`_apply` makes them: eager does not keep shared buffers shared on any device either.
"""

from __future__ import annotations

import threading

from torch import nn

DEVICE_TYPE = "lazy_mlir"
_state = threading.local()


Slots = list[tuple[nn.Module, str]]


def _shared_slots(module: nn.Module) -> list[tuple[str, Slots]]:
    """(device type, slots) for each Parameter held by more than one (module, name) slot."""
    slots: dict[int, tuple[str, Slots]] = {}
    for sub in module.modules():
        for name, param in sub._parameters.items():
            if param is not None:
                slots.setdefault(id(param), (param.device.type, []))[1].append((sub, name))
    return [group for group in slots.values() if len(group[1]) > 1]


def _retie(groups: list[tuple[str, Slots]]) -> None:
    for old_device, ((first, first_name), *rest) in groups:
        kept = first._parameters[first_name]
        # Only moves to or from lazy_mlir: other devices keep (or lose) ties as eager does.
        if kept is None or DEVICE_TYPE not in (old_device, kept.device.type):
            continue
        for sub, name in rest:
            sub._parameters[name] = kept


def install() -> None:
    """Idempotent: wrap nn.Module._apply so lazy_mlir moves keep tied parameters tied."""
    original = nn.Module._apply
    if getattr(original, "_lazymlir", False):
        return

    def _apply(self, fn, recurse=True):
        depth = getattr(_state, "depth", 0)
        groups = _shared_slots(self) if depth == 0 and recurse else []
        _state.depth = depth + 1
        try:
            result = original(self, fn, recurse)
        finally:
            _state.depth = depth
        if groups:
            _retie(groups)
        return result

    _apply._lazymlir = True
    nn.Module._apply = _apply
