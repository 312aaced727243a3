"""`as_strided` against the storage eager would have, not the lazy value's layout.

Lazy values are dense and contiguous, and functionalization hands the tracer
`as_strided_copy(v, size, stride, offset)` where `v` is the value of a view
(`x.t()`, a slice, a select...). Eager reads `size`/`stride`/`offset` in the
storage under the view: the view's root tensor, laid out as eager laid it out
(channels_last included), at absolute offsets. So the storage is found here:
from `v` back through the recorded view ops to the root value (the first value
not made by a view op), whose eager layout is contiguous unless a channels_last
(or other dense, permuted) layout was recorded for it (`set_layout`: an upload of
such a CPU tensor, a clone or copy into such a memory format). The result is
`as_strided` of the root's elements in storage order (the root itself, or a
permute of it), with the root's storage offset taken off.

Values already materialized have no recorded view ops (the trace dropped them):
there the value itself is the root, as before.
"""

from __future__ import annotations

import torch

# Dense: a permutation of a contiguous layout (no gaps, no overlap), as PyTorch decides it.
from torch._prims_common import (
    is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense,
)

from .layouts import any_layout, contiguous_strides, layout_of, set_layout
from .recording import record
from .values import LazyTensor, LazyValue, value_of

aten = torch.ops.aten

# Non-view ops whose eager layout is recomputed (meta kernels propagate channels_last as
# eager does) per as_strided call, at most: past it a value counts as contiguous.
_LAYOUT_SEARCH_LIMIT = 200


def _contiguous_meta(value: LazyValue) -> torch.Tensor:
    shape = tuple(value.meta.shape)
    strides = layout_of(value) or contiguous_strides(shape)
    return torch.empty_strided(shape, strides, dtype=value.meta.dtype, device="meta")


def _meta_args(args, memo: dict):
    out = []
    for a in args:
        if isinstance(a, LazyValue):
            out.append(_storage_view(a, memo)[1])
        elif isinstance(a, (list, tuple)):
            out.append(type(a)(_meta_args(a, memo)))
        else:
            out.append(a)
    return out


def _storage_view(value: LazyValue, memo: dict) -> tuple[LazyValue, torch.Tensor]:
    """(root value, a meta tensor laid out as eager lays `value` out, a view of the
    root's storage where `value` was made by view ops)."""
    known = memo.get(id(value))
    if known is not None:
        return known
    node = value.node if layout_of(value) is None else None  # a recorded layout is eager's
    found = None
    is_view = node is not None and getattr(node.op, "is_view", False) and \
        bool(node.args) and isinstance(node.args[0], LazyValue)
    # A non-view op's result is laid out by its inputs' layouts: worth recomputing only
    # when some value has a recorded layout, and within the search's budget.
    if is_view or (node is not None and any_layout() and
                   memo.setdefault("searched", [0])[0] < _LAYOUT_SEARCH_LIMIT):
        if not is_view:
            memo["searched"][0] += 1
        try:
            out = node.op(*_meta_args(node.args, memo), **dict(zip(
                node.kwargs, _meta_args(list(node.kwargs.values()), memo))))
        except (RuntimeError, TypeError, ValueError, NotImplementedError):
            out = None  # not expressible on meta tensors: taken as contiguous
        if isinstance(out, (list, tuple)):
            out = out[value.index]
        if isinstance(out, torch.Tensor) and out.shape == value.meta.shape:
            if is_view:
                found = (_storage_view(node.args[0], memo)[0], out)
            elif out.storage_offset() == 0 and is_non_overlapping_and_dense(out):
                found = (value, out)
    if found is None:
        found = (value, _contiguous_meta(value))
    memo[id(value)] = found
    return found


def as_strided(self, size, stride, storage_offset=None):
    """`self.as_strided(size, stride, storage_offset)` with eager's meaning: addresses
    in the storage of `self`'s root, at absolute offsets."""
    memo: dict = {}
    root, view = _storage_view(value_of(self), memo)
    base = memo[id(root)][1]
    strides = None if base.is_contiguous() else tuple(base.stride())
    if root is value_of(self) and strides is None:
        return record(aten.as_strided_copy.default, (self, size, stride, storage_offset), {})
    offset = view.storage_offset() if storage_offset is None else storage_offset
    source = LazyTensor(root)
    if strides is not None:
        # The root's elements in storage order: a dense value as_strided can address.
        order = sorted(range(len(strides)), key=lambda d: -strides[d])
        source = record(aten.permute_copy.default, (source, order), {})
    return record(aten.as_strided_copy.default, (source, list(size), list(stride), offset), {})


def with_memory_format(self: LazyTensor, memory_format) -> LazyTensor:
    """`self` laid out in `memory_format` (clone, `.to(memory_format=)`): the same
    values in a new lazy value whose eager layout is recorded, for as_strided."""
    if memory_format in (None, torch.preserve_format, torch.contiguous_format) or \
            self.dim() not in (4, 5):
        return LazyTensor(value_of(self))
    out = record(aten.clone.default, (self,), {})  # a new value: not a view of self
    meta = torch.empty(tuple(self.shape), dtype=self.dtype, device="meta")
    set_layout(value_of(out), meta.contiguous(memory_format=memory_format).stride())
    return out
