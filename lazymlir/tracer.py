"""Records functional ATen ops on LazyTensors into the trace.

`dispatch` is the single entry from `LazyTensor.__torch_dispatch__`. In order:
1. ops with special meaning for a lazy device (device transfers, scalar reads,
   identities) are handled here;
2. ops torch-mlir wants decomposed are decomposed with torch-mlir's own
   decomposition table (the pieces re-enter `dispatch`);
3. ops the compiler cannot lower run eagerly on CPU (fallback.py);
4. everything else is recorded: output shapes/dtypes come from running the op
   on meta tensors, and a Node is added to the trace.
"""

from __future__ import annotations

import threading
import time

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from . import backend, fallback, metrics
from .lazy_tensor import LazyTensor, LazyValue, Node, meta_like

aten = torch.ops.aten
_state = threading.local()


def depth() -> int:
    return getattr(_state, "depth", 0)


def dispatch(func, args, kwargs):
    outermost = depth() == 0
    _state.depth = depth() + 1
    began = time.perf_counter() if outermost else 0.0
    try:
        return _dispatch(func, args, kwargs)
    finally:
        _state.depth -= 1
        if outermost:
            metrics.add_time("TraceTime", time.perf_counter() - began)


def _dispatch(func, args, kwargs):
    special = _SPECIAL.get(func)
    if special is not None:
        return special(*args, **kwargs)
    if func.name().startswith("aten::_foreach_"):
        return _foreach(func, args, kwargs)
    if func._schema.is_mutable and func.name().endswith("_"):
        return _inplace(func, args, kwargs)
    decomposition = _decompositions().get(func)
    if decomposition is not None:
        out = decomposition(*args, **kwargs)
        if out is not NotImplemented:
            return out
    if fallback.must_run_eagerly(func, args, kwargs):
        return fallback.run_eagerly(func, args, kwargs)
    return record(func, args, kwargs)


def record(func, args, kwargs):
    """Add `func(*args, **kwargs)` to the trace; returns LazyTensors for its tensor outputs."""
    meta_args, meta_kwargs = tree_map(_to_meta, (args, kwargs))
    out = func(*meta_args, **meta_kwargs)
    flat_out, spec = tree_flatten(out)
    tensor_outs = [o for o in flat_out if isinstance(o, torch.Tensor)]
    metas = [meta_like(o.shape, o.dtype) for o in tensor_outs]
    node_args, node_kwargs = tree_map(_to_node_arg, (args, kwargs))
    node = Node(_view_for_copy(func), node_args, node_kwargs, metas)
    results, k = [], 0
    for o in flat_out:
        if isinstance(o, torch.Tensor):
            results.append(LazyTensor(LazyValue(metas[k], node, k)))
            k += 1
        else:
            results.append(o)
    return tree_unflatten(results, spec)


_VIEW_FOR_COPY: dict = {}


def _view_for_copy(func):
    """`view_copy`, `t_copy`, ... -> `view`, `t`, ...: torch-mlir lowers the view forms.

    In a value-semantics graph a view and its copy variant compute the same
    value, and torch-mlir's linalg path (like its FX importer's usual input,
    torch.export graphs) handles the view ops, not all of the `*_copy` ones.
    """
    view = _VIEW_FOR_COPY.get(func)
    if view is None:
        view = func
        packet_name = func._schema.name.removeprefix("aten::")
        if packet_name.endswith("_copy") and packet_name not in ("_to_copy", "copy"):
            packet = getattr(aten, packet_name.removesuffix("_copy"), None)
            if packet is not None and func._overloadname in packet.overloads():
                view = getattr(packet, func._overloadname)
        _VIEW_FOR_COPY[func] = view
    return view


def _is_lazy_device(device) -> bool:
    return device is not None and torch.device(device).type == "lazy_mlir"


def _to_meta(x):
    if isinstance(x, LazyTensor):
        return x._lazy.meta
    if isinstance(x, torch.Tensor):
        return meta_like(x.shape, x.dtype)
    if isinstance(x, torch.device) and _is_lazy_device(x):
        return torch.device("meta")
    return x


def _to_node_arg(x):
    if isinstance(x, LazyTensor):
        return x._lazy
    if isinstance(x, torch.Tensor):
        # A CPU tensor mixed into a lazy op (e.g. a 0-d scalar tensor) becomes a graph input.
        return constant(x)._lazy
    if isinstance(x, torch.device):
        # Graphs are device-neutral; the importer expects a real torch device.
        return torch.device("cpu")
    return x


def constant(cpu: torch.Tensor) -> LazyTensor:
    """A materialized lazy value holding a copy of `cpu`."""
    cpu = cpu.detach().to("cpu").contiguous()
    return LazyTensor(LazyValue(meta_like(cpu.shape, cpu.dtype), data=backend.active().upload(cpu)))


# ---------------------------------------------------------------- special ops

def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    if device is not None and not _is_lazy_device(device):
        from .sync import to_cpu

        out = to_cpu(self)
        out = out.to(dtype=dtype or out.dtype)
        return out.to(device) if torch.device(device).type != "cpu" else out
    if dtype is None or dtype == self.dtype:
        return LazyTensor(self._lazy)  # values are immutable: sharing is a copy
    return record(aten._to_copy.default, (self,), {"dtype": dtype})


def _copy(self, src, non_blocking=False):
    """Functional copy: the result has self's shape/dtype and src's values."""
    if not isinstance(src, LazyTensor):
        cpu = src.detach().to("cpu").to(self.dtype).expand(self.shape)
        return constant(cpu)
    value = src
    if src.dtype != self.dtype:
        value = record(aten._to_copy.default, (value,), {"dtype": self.dtype})
    if tuple(src.shape) != tuple(self.shape):
        value = record(aten.expand_copy.default, (value, list(self.shape)), {})
    return LazyTensor(value._lazy)


def _identity(self, *args, **kwargs):
    return LazyTensor(self._lazy)


def _clone(self, memory_format=None):
    return LazyTensor(self._lazy)


def _local_scalar_dense(self):
    from .sync import to_cpu

    return to_cpu(self).item()


def _unbind(self, dim=0):
    """unbind_copy -> one select per index: torch-mlir does not lower a list-returning unbind."""
    return [record(aten.select_copy.int, (self, dim, i), {}) for i in range(self.shape[dim])]


def _unsupported_mutation(name):
    def fail(*args, **kwargs):
        raise RuntimeError(
            f"aten::{name} is not supported on lazy_mlir tensors: lazy values have no "
            f"storage to resize or rebind. Move the tensor to CPU (.cpu()) for this.")
    return fail


_SPECIAL = {
    aten._to_copy.default: _to_copy,
    aten.copy.default: _copy,
    aten.detach.default: _identity,
    aten.detach_copy.default: _identity,
    aten.alias_copy.default: _identity,
    aten.lift_fresh_copy.default: _identity,
    aten.lift_fresh.default: _identity,
    aten.clone.default: _clone,
    aten.unbind_copy.int: _unbind,
    aten._local_scalar_dense.default: _local_scalar_dense,
    aten.set_.source_Tensor: _unsupported_mutation("set_"),
    aten.resize_.default: _unsupported_mutation("resize_"),
}


# ------------------------------------------------------------ decompositions

_DECOMPOSITIONS = None

# Ops torch-mlir lowers directly: decomposing them would only make graphs
# larger (torch-mlir decomposes internally where it must).
_KEEP = {
    aten._to_copy.default, aten.addmm.default, aten._log_softmax.default,
    aten._softmax.default, aten.native_layer_norm.default, aten.gelu.default,
    aten.arange.start_step, aten.full.default, aten.empty.memory_format,
}


def _decompositions():
    """torch-mlir's decomposition table (what its FX path applies before import)."""
    global _DECOMPOSITIONS
    if _DECOMPOSITIONS is None:
        from torch_mlir.extras.fx_decomp_util import get_decomposition_table

        table = dict(get_decomposition_table())
        for op in _KEEP:
            table.pop(op, None)
        _DECOMPOSITIONS = table
    return _DECOMPOSITIONS


def _inplace(func, args, kwargs):
    """An in-place op below functionalization (decompositions use some): run the
    functional form and rebind the inner tensor to the new value. Nothing here
    aliases (functionalization above us owns views), so rebinding is exact."""
    self = args[0]
    name = func._schema.name.removeprefix("aten::")
    if name == "copy_":
        result = _copy(self, args[1])
    else:
        functional = getattr(getattr(aten, name.removesuffix("_")), func._overloadname)
        result = functional(*args, **kwargs)
        if result.dtype != self.dtype:
            result = record(aten._to_copy.default, (result,), {"dtype": self.dtype})
    self._lazy = result._lazy
    return self


def _foreach(func, args, kwargs):
    """`_foreach_op(lists...)` -> one `op` per element (optimizers use these)."""
    base = func._schema.name.removeprefix("aten::_foreach_")
    packet = getattr(aten, base)
    lists = [a for a in args if isinstance(a, (list, tuple))]
    count = len(lists[0])
    results = []
    for i in range(count):
        element_args = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
        results.append(packet(*element_args, **kwargs))
    returns = func._schema.returns
    return results if returns else None
