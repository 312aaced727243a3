"""Eager layouts of lazy values that eager would not lay out contiguously.

Lazy values are dense and contiguous; only `as_strided` (tracing/storage.py) can
tell a layout from another, since it addresses storage. A value uploaded from a
channels_last CPU tensor, or cloned into a memory format, records the strides
eager gives it here (held weakly: the entry goes with the value).
"""

from __future__ import annotations

import weakref

import torch
# Dense: a permutation of a contiguous layout (no gaps, no overlap), as PyTorch decides it.
from torch._prims_common import (
    is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense,
)

from .values import LazyValue

# Root value -> its eager strides, for roots whose eager layout is not contiguous.
_layouts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def set_layout(value: LazyValue, strides) -> None:
    """Record that eager lays `value` out with `strides` (a dense permutation)."""
    strides = tuple(strides)
    if strides != contiguous_strides(tuple(value.meta.shape)):
        _layouts[value] = strides


def dense_strides(tensor: torch.Tensor) -> tuple[int, ...] | None:
    """`tensor`'s strides when it is dense (a permutation of a contiguous layout, no
    gaps, no overlap) but not contiguous; else None."""
    if tensor.is_contiguous() or not is_non_overlapping_and_dense(tensor):
        return None
    return tuple(tensor.stride())


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def layout_of(value: LazyValue) -> tuple[int, ...] | None:
    """The eager strides recorded for `value`, None when contiguous."""
    return _layouts.get(value)


def any_layout() -> bool:
    """Whether any live value has a recorded layout (else every value is contiguous)."""
    return len(_layouts) > 0
