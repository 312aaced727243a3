"""Ops with a special meaning on a lazy device, each handled by its own function.

Device transfers (`_to_copy` to another device, `copy` from a host tensor),
scalar reads (`_local_scalar_dense` syncs), identities (detach, clone, alias:
values are immutable, so sharing one is a copy), ops torch-mlir cannot take in
the form they arrive in (`unbind`, `real`, `conj_physical`), normalizations
whose eager CPU results differ from their meta kernels' (batch norm updates its
running statistics in place; half inputs get half statistics), RNN cells, and
mutations a lazy value cannot express. `SPECIAL` maps each op to its function.
"""

from __future__ import annotations

import functools

import torch

from ..support.errors import UnsupportedOperationError
from . import decompose, device_rules, rnn, storage
from .host_data import constant
from .materialize import to_cpu
from .recording import record
from .trace_state import depth, state
from .values import TORCH_DEVICE, LazyTensor, is_lazy, set_value, value_of

aten = torch.ops.aten


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    if device is not None and not device_rules.is_lazy_device(device):
        state.impure += 1
        out = to_cpu(self)
        out = out.to(dtype=dtype or out.dtype)
        return out.to(device) if torch.device(device).type != "cpu" else out
    if dtype is None or dtype == self.dtype:
        # Values are immutable: sharing is a copy (a new memory format is recorded).
        out = storage.with_memory_format(self, memory_format)
    else:
        out = record(aten._to_copy.default, (self,), {"dtype": dtype})
    # Functionalization wraps `_to_copy` results only for devices it knows as
    # lazy (XLA, Lazy), not PrivateUse1: called straight from it, wrap ourselves,
    # or `.float()` would hand the user a bare inner tensor.
    return torch._to_functional_tensor(out) if depth() == 1 else out


def copy(self, src, non_blocking=False):
    """Functional copy: the result has self's shape/dtype and src's values."""
    if not is_lazy(src):
        cpu = src.detach().to("cpu").to(self.dtype).expand(self.shape)
        return constant(cpu)
    value = src
    if src.dtype != self.dtype:
        value = record(aten._to_copy.default, (value,), {"dtype": self.dtype})
    if tuple(src.shape) != tuple(self.shape):
        value = record(aten.expand_copy.default, (value, list(self.shape)), {})
    return LazyTensor(value_of(value))


def _identity(self, *args, **kwargs):
    return LazyTensor(value_of(self))


def _clone(self, memory_format=None):
    return storage.with_memory_format(self, memory_format)


def _space(op):
    """linspace/logspace with tensor ends: eager reads the 0-d ends as numbers (a sync
    here); the result is made on the lazy device (decomposing the tensor overload
    made its steps on the CPU)."""
    def route(start, end, steps, *args, **kwargs):
        start, end = (v.item() if isinstance(v, torch.Tensor) else v for v in (start, end))
        return op(start, end, steps, *args, **{**kwargs, "device": TORCH_DEVICE})
    return route


def _local_scalar_dense(self):
    state.impure += 1
    return to_cpu(self).item()


def _unbind(self, dim=0):
    """unbind_copy -> one select per index: torch-mlir does not lower a list-returning unbind."""
    return [record(aten.select_copy.int, (self, dim, i), {}) for i in range(self.shape[dim])]


def _itself_if_real(op):
    """A route for `op`, which of a real tensor is the tensor itself: recorded only
    for a complex one. `real` (torch-mlir crashes lowering it) and `conj_physical`
    (its CompositeImplicit kernel runs above us; here it arrives from decompositions
    such as tanh_backward's and sigmoid_backward's, and torch-mlir has no lowering)."""
    def route(self):
        if self.dtype.is_complex:
            return record(op, (self,), {})
        return LazyTensor(value_of(self))
    return route


def _input_dtype(input, *stats):
    """Eager CPU returns half/bfloat16 statistics for a half input; the meta kernels
    say float32 (CUDA's choice): cast them, as eager rounds them."""
    return tuple(s if s.dtype == input.dtype else
                 record(aten._to_copy.default, (s,), {"dtype": input.dtype}) for s in stats)


def _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """native_batch_norm / _native_batch_norm_legit update running_mean/var in place,
    although functionalization hands them to us as if the op were functional:
    compute the functional form and rebind the buffers' inner values to the new
    statistics (as the in-place route does), so BatchNorm in training mode updates them."""
    if not training:
        # Eager CPU returns empty save_mean/save_invstd in eval mode (the meta
        # kernel and torch-mlir give per-channel ones).
        out = record(aten.native_batch_norm.default, (input, weight, bias, running_mean,
                                                       running_var, training, momentum, eps),
                     {})[0]
        empty = torch.empty(0, dtype=input.dtype)
        return out, constant(empty), constant(empty)
    if running_mean is None or running_var is None:
        return record(aten.native_batch_norm.default, (input, weight, bias, running_mean,
                                                        running_var, training, momentum, eps), {})
    out, mean, rstd, new_mean, new_var = aten._native_batch_norm_legit_functional.default(
        input, weight, bias, running_mean, running_var, training, momentum, eps)
    mean, rstd = _input_dtype(input, mean, rstd)
    if state.capture_start >= 0:
        state.impure += 1  # rebinds tensors from outside a captured decomposition
    set_value(running_mean, value_of(new_mean))
    set_value(running_var, value_of(new_var))
    return out, mean, rstd


@functools.cache
def _batch_norm_training():
    func = aten._native_batch_norm_legit_functional.default
    return decompose.decomposer(func, decompose.table()[func])


def _batch_norm_functional(input, weight, bias, running_mean, running_var, training,
                           momentum, eps):
    """Functionalization's form of _native_batch_norm_legit: in eval mode PyTorch's
    decomposition returns empty statistics only on the "cpu" device; eager CPU is
    the reference, so ours are empty too. Training mode is decomposed as usual."""
    func = aten._native_batch_norm_legit_functional.default
    args = (input, weight, bias, running_mean, running_var, training, momentum, eps)
    if training:  # through the templates: DenseNet calls it at ~100 channel counts a step
        return _batch_norm_training()(func, args, {})
    out, empty, _ = _batch_norm(*args)
    return out, empty, LazyTensor(value_of(empty)), running_mean, running_var


def _layer_norm(input, normalized_shape, weight, bias, eps):
    """Eager CPU returns half/bfloat16 mean and rstd for a half input; the meta
    kernel says float32 (CUDA's choice): cast them, as eager rounds them."""
    out, mean, rstd = record(aten.native_layer_norm.default,
                             (input, normalized_shape, weight, bias, eps), {})
    return out, *_input_dtype(input, mean, rstd)


def _unsupported_mutation(name):
    def fail(*args, **kwargs):
        raise UnsupportedOperationError(
            f"aten::{name} is not supported on lazy_mlir tensors: lazy values have no "
            f"storage to resize or rebind. Move the tensor to CPU (.cpu()) for this.")
    return fail


SPECIAL = {
    aten._to_copy.default: _to_copy,
    aten.copy.default: copy,
    aten.detach.default: _identity,
    aten.detach_copy.default: _identity,
    aten.alias_copy.default: _identity,
    aten.lift_fresh_copy.default: _identity,
    aten.lift_fresh.default: _identity,
    aten.clone.default: _clone,
    aten.unbind_copy.int: _unbind,
    aten.as_strided_copy.default: storage.as_strided,
    **{getattr(getattr(aten, name), overload): _space(getattr(aten, name).default)
       for name in ("linspace", "logspace")
       for overload in ("Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor")},
    aten._local_scalar_dense.default: _local_scalar_dense,
    aten.real.default: _itself_if_real(aten.real.default),
    aten.conj_physical.default: _itself_if_real(aten.conj_physical.default),
    aten.native_batch_norm.default: _batch_norm,
    aten._native_batch_norm_legit.default: _batch_norm,
    aten.native_layer_norm.default: _layer_norm,
    aten._native_batch_norm_legit_functional.default: _batch_norm_functional,
    **{op: cell for op, cell in rnn.CELLS.items()},
    aten.set_.source_Tensor: _unsupported_mutation("set_"),
    aten.resize_.default: _unsupported_mutation("resize_"),
}
