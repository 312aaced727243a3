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

A parameter moved to lazy_mlir also becomes its own base. `Parameter(t)` detaches `t`,
and under functionalization a detach is a view, so the new parameter was a view of the
moved tensor (a temporary nobody else holds). A view is regenerated from its base at its
first use after every mutation of their storage, so every optimizer step cost a
`detach_copy` dispatch per parameter, and every view of a parameter (a Linear's `w.t()`)
one more per step: ~75 of a small GPT step's 400 dispatches. The parameter's wrapper is
given a fresh storage holding its current value (`param.data = ...` keeps the Parameter
object, its autograd state and its `.grad`).
"""

from __future__ import annotations

import threading

import torch
from torch import nn
from torch._C import _functionalization

DEVICE_TYPE = "lazy_mlir"
REBASE = True  # False: moved parameters stay views of a detached base (benchmarks compare)
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


def _off_device_slots(module: nn.Module) -> list[tuple[nn.Module, str, nn.Parameter]]:
    """(module, name, parameter) for each parameter slot not on lazy_mlir."""
    return [(sub, name, p) for sub in module.modules() for name, p in sub._parameters.items()
            if p is not None and p.device.type != DEVICE_TYPE]


def _rebase(moved: list[nn.Parameter]) -> None:
    """Make each parameter moved to lazy_mlir from another device its own base (see the
    module docstring); the only other holder of its storage, `_apply`'s temporary, is
    gone. Anything else (a view of a view, a parameter made over a user's tensor) is left
    as it is."""
    for param in moved:
        if param.device.type != DEVICE_TYPE or not torch._is_functional_tensor(param):
            continue
        views = _functionalization.get_view_meta_sequence(param)
        if len(views) != 1 or type(views[0]) is not _functionalization.detach_ViewMeta:
            continue
        torch._sync(param)
        value = torch._from_functional_tensor(param)
        with torch.no_grad():
            param.data = torch._to_functional_tensor(value)
            # One update of the new storage (same value): a view of a tensor whose
            # storage was never updated is current at birth, one of an updated tensor is
            # regenerated at first use, so without it the first step's graph would lack
            # the regenerated views of every later step's and compile once more.
            torch._functionalize_replace(param, value)
            torch._functionalize_commit_update(param)
            torch._sync(param)


def install() -> None:
    """Idempotent: wrap nn.Module._apply so lazy_mlir moves keep tied parameters tied."""
    original = nn.Module._apply
    if getattr(original, "_lazymlir", False):
        return

    def _apply(self, fn, recurse=True):
        depth = getattr(_state, "depth", 0)
        outer = depth == 0 and recurse
        groups = _shared_slots(self) if outer else []
        off_device = _off_device_slots(self) if outer and REBASE else []
        _state.depth = depth + 1
        try:
            result = original(self, fn, recurse)
        finally:
            _state.depth = depth
        if groups:
            _retie(groups)
        if off_device:
            moved = {id(p): p for p in (sub._parameters.get(name) for sub, name, _ in off_device)
                     if p is not None}
            _rebase(list(moved.values()))
        return result

    _apply._lazymlir = True
    nn.Module._apply = _apply
