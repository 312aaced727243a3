"""Records functional ATen ops on LazyTensors into the trace.

`dispatch` is the single entry from `LazyTensor.__torch_dispatch__`. What an
op needs is decided once per op and kept in `_ROUTES`:
1. ops with special meaning for a lazy device (device transfers, scalar reads,
   identities) are handled here;
2. in-place and `_foreach_` ops (decompositions below functionalization use
   them) are rewritten into functional ones;
3. ops torch-mlir wants decomposed are decomposed with torch-mlir's own
   decomposition table (the pieces re-enter `dispatch`);
4. data-dependent and random ops run eagerly (fallback.py);
5. everything else is recorded: a Node is added to the trace.

Recording is the hot path (a few microseconds per op). Output shapes/dtypes
come from PyTorch's meta kernels once per (op, input shapes/dtypes, static
arguments) and are cached (`_SHAPES`); the cache key is built with plain
loops instead of pytree.
"""

from __future__ import annotations

import threading
import time

import torch

from .. import session, targets
from . import failures, fallback
from .graph import SCALAR_INPUT_OPS
from .materialize import to_cpu
from .values import LazyTensor, LazyValue, Node, meta_like

aten = torch.ops.aten
_state = threading.local()
_SHAPE_CACHE_LIMIT = 1 << 16


def depth() -> int:
    return getattr(_state, "depth", 0)


def dispatch(func, args, kwargs):
    route = _ROUTES.get(func)
    if route is None:
        route = _ROUTES[func] = _route(func)
    outer = getattr(_state, "depth", 0)
    _state.depth = outer + 1
    if outer:
        try:
            return route(func, args, kwargs)
        finally:
            _state.depth = outer
    began = time.perf_counter()
    try:
        return route(func, args, kwargs)
    finally:
        _state.depth = 0
        session.current().metrics.add_time("TraceTime", time.perf_counter() - began)


def _torch_dispatch(cls, func, types, args=(), kwargs=None):
    try:
        return dispatch(func, args, kwargs or {})
    except Exception as error:
        if not failures.in_backward():
            raise
        return failures.failed_outputs(func, args, kwargs or {}, error)


LazyTensor.__torch_dispatch__ = classmethod(_torch_dispatch)


# ------------------------------------------------------------------ routes

_ROUTES: dict = {}


def _route(func):
    """How `func` is handled (decided once per op overload)."""
    special = _SPECIAL.get(func)
    if special is not None:
        return lambda f, args, kwargs: special(*args, **kwargs)
    name = func._schema.name
    if name.startswith("aten::_foreach_"):
        return _foreach
    if func._schema.is_mutable and name.endswith("_"):
        return _inplace
    decomposition = _decompositions().get(func)
    if decomposition is not None:
        def decompose(f, args, kwargs):
            out = decomposition(*args, **kwargs)
            return record(f, args, kwargs) if out is NotImplemented else out
        return decompose
    reason = fallback.always_eager(func)
    if reason is not None:
        return lambda f, args, kwargs: _eager(f, args, kwargs, reason)
    return record


# ------------------------------------------------------------------ record

_SHAPES: dict = {}
_NODE_OP: dict = {}       # func -> the op recorded in the node (view for *_copy)
_LIFTS: dict = {}         # func -> whether its floats are scalar inputs


def _arg_key(x, lift: bool):
    t = type(x)
    if t is LazyTensor:
        meta = x._lazy.meta
        return (meta.shape, meta.dtype)
    if t is float and lift:
        return float  # the value is a graph input: it cannot change shapes or dtypes
    if t is list or t is tuple:
        return tuple(_arg_key(v, lift) for v in x)
    if isinstance(x, torch.Tensor):
        return ("host", x.shape, x.dtype)
    return (t, x)


def _shape_key(func, args, kwargs):
    lift = _LIFTS.get(func)
    if lift is None:
        lift = _LIFTS[func] = func._schema.name in SCALAR_INPUT_OPS
    key = [func]
    for a in args:
        key.append(_arg_key(a, lift))
    for k, v in kwargs.items():
        key.append(k)
        key.append(_arg_key(v, lift))
    return tuple(key)


def _infer(func, args, kwargs):
    """Run `func` on meta tensors: (output metas, output kind)."""
    meta_args = [_to_meta(a) for a in args]
    meta_kwargs = {k: _to_meta(v) for k, v in kwargs.items()}
    out = func(*meta_args, **meta_kwargs)
    if isinstance(out, torch.Tensor):
        return [meta_like(out.shape, out.dtype)], None
    if isinstance(out, (list, tuple)) and all(isinstance(o, torch.Tensor) for o in out):
        return [meta_like(o.shape, o.dtype) for o in out], type(out)
    raise NotImplementedError(f"{func} returns {type(out).__name__}, not tensors")


def record(func, args, kwargs):
    """Add `func(*args, **kwargs)` to the trace; returns LazyTensors for its outputs."""
    try:
        key = _shape_key(func, args, kwargs)
        cached = _SHAPES.get(key)
    except TypeError:  # an unhashable argument: infer every time
        key, cached = None, None
    if cached is None:
        try:
            cached = _infer(func, args, kwargs)
        except fallback.NO_META as error:
            return _eager(func, args, kwargs, f"no meta kernel: {error}")
        if key is not None:
            if len(_SHAPES) >= _SHAPE_CACHE_LIMIT:
                _SHAPES.clear()
            _SHAPES[key] = cached
    metas, kind = cached
    op = _NODE_OP.get(func)
    if op is None:
        op = _NODE_OP[func] = _view_for_copy(func)
    node = Node(op, tuple(_to_node_arg(a) for a in args),
                {k: _to_node_arg(v) for k, v in kwargs.items()} if kwargs else {}, metas)
    if kind is None:
        return LazyTensor(LazyValue(metas[0], node, 0))
    return kind(LazyTensor(LazyValue(m, node, k)) for k, m in enumerate(metas))


def _view_for_copy(func):
    """`view_copy`, `t_copy`, ... -> `view`, `t`, ...: torch-mlir lowers the view forms.

    In a value-semantics graph a view and its copy variant compute the same
    value, and torch-mlir's linalg path (like its FX importer's usual input,
    torch.export graphs) handles the view ops, not all of the `*_copy` ones.
    """
    packet_name = func._schema.name.removeprefix("aten::")
    if packet_name.endswith("_copy") and packet_name not in ("_to_copy", "copy"):
        packet = getattr(aten, packet_name.removesuffix("_copy"), None)
        if packet is not None and func._overloadname in packet.overloads():
            return getattr(packet, func._overloadname)
    return func


def _is_lazy_device(device) -> bool:
    return device is not None and torch.device(device).type == "lazy_mlir"


def _to_meta(x):
    t = type(x)
    if t is LazyTensor:
        return x._lazy.meta
    if t is list or t is tuple:
        return t(_to_meta(v) for v in x)
    if isinstance(x, torch.Tensor):
        return meta_like(x.shape, x.dtype)
    if isinstance(x, torch.device) and _is_lazy_device(x):
        return torch.device("meta")
    return x


def _to_node_arg(x):
    t = type(x)
    if t is LazyTensor:
        return x._lazy
    if t is list or t is tuple:
        return t(_to_node_arg(v) for v in x)
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
    return LazyTensor(LazyValue(meta_like(cpu.shape, cpu.dtype),
                                data=targets.active().upload(cpu)))


def _to_host(x):
    if isinstance(x, LazyTensor):
        return to_cpu(x)
    if isinstance(x, torch.device) and x.type == "lazy_mlir":
        return torch.device("cpu")
    return x


def _eager(func, args, kwargs, reason):
    return fallback.run_eagerly(func, args, kwargs, reason, _to_host, constant)


# ---------------------------------------------------------------- special ops

def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    if device is not None and not _is_lazy_device(device):
        out = to_cpu(self)
        out = out.to(dtype=dtype or out.dtype)
        return out.to(device) if torch.device(device).type != "cpu" else out
    if dtype is None or dtype == self.dtype:
        out = LazyTensor(self._lazy)  # values are immutable: sharing is a copy
    else:
        out = record(aten._to_copy.default, (self,), {"dtype": dtype})
    # Functionalization wraps `_to_copy` results only for devices it knows as
    # lazy (XLA, Lazy), not PrivateUse1: called straight from it, wrap ourselves,
    # or `.float()` would hand the user a bare inner tensor.
    return torch._to_functional_tensor(out) if depth() == 1 else out


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
