"""The record route: a functional op becomes a Node of the trace.

Most ops end here (tracer.py routes the rest elsewhere). Recording is the hot
path (a few microseconds per op; docs/tracing-performance.md has the
measurements). Output shapes/dtypes come from PyTorch's meta kernels once per
(op, input shapes/dtypes, static arguments) and are cached in the op's
recorder; the cache key is a flat tuple built in the same loop that builds the
node's arguments, with no pytree. A float argument of an op in
`SCALAR_INPUT_OPS` is lifted to a scalar graph input: its value changes no
shape or dtype, so it stays out of the key and one graph serves every value.
An op without a meta kernel runs eagerly instead (fallback.py).
"""

from __future__ import annotations

from types import MappingProxyType

import torch

from . import device_rules, fallback
from .graph import SCALAR_INPUT_OPS
from .host_data import constant
from .values import (
    LazyTensor,
    LazyValue,
    Node,
    is_lazy,
    meta_like,
    native,
    signature,
    static_token,
    to_meta,
    value_of,
)

aten = torch.ops.aten
_SHAPE_CACHE_LIMIT = 1 << 16
_make = native.load().make  # an inner tensor holding a value (made and tracked in C++)

_RECORDERS: dict = {}   # id(func) -> the func's recorder (routes other than record use it)
_FUNCS: dict = {}       # id(func) -> func: keeps every keyed op alive, so no id is reused


def keep_alive(func) -> None:
    """Keep `func` alive for as long as the process: tables keyed by `id(func)` (keyed
    by id because `OpOverload.__hash__` is a Python method) must never see an id reused."""
    _FUNCS[id(func)] = func


def recorder_of(func):
    """`func`'s recorder if one was made, else None."""
    return _RECORDERS.get(id(func))


def record(func, args, kwargs):
    """Add `func(*args, **kwargs)` to the trace; returns LazyTensors for its outputs."""
    recorder = _RECORDERS.get(id(func))
    if recorder is None:
        recorder = make_recorder(func)
    return recorder(func, args, kwargs)


KWARGS_SEPARATOR = object()  # separates positional from keyword arguments in a shape-cache key
NO_KWARGS = MappingProxyType({})  # shared by nodes without kwargs: one object less per op
_HOST = object()    # marks a host (CPU) tensor argument in a shape-cache key


def make_recorder(func):
    """The function that records `func`, with its own shape cache.

    The shape-cache key is a flat tuple: a LazyValue's signature (an int) for a
    tensor, `float` alone for a float that becomes a scalar graph input (its
    value changes no shape or dtype), the type and then the value for any other
    scalar (so 1, 1.0 and True differ), a type and a length before the items of
    a list. Types are never ints, so the flat form is unambiguous. The same loop
    builds the node's arguments.
    """
    op = _view_for_copy(func)
    name = func._schema.name
    lift = name in SCALAR_INPUT_OPS
    shapes: dict = {}

    def record_op(func, args, kwargs):
        # Fast path: one or two positional arguments, tensors, a lifted float or a
        # list of ints, a cached single output. Its keys equal the general loop's.
        entry = None
        if not kwargs:
            if len(args) == 1:
                a = args[0]
                if is_lazy(a):
                    value = value_of(a)
                    node_args = (value,)
                    entry = shapes.get(value.sig)
            elif len(args) == 2:
                a, b = args
                if is_lazy(a):
                    value = value_of(a)
                    if is_lazy(b):
                        other = value_of(b)
                        node_args = (value, other)
                        entry = shapes.get((value.sig, other.sig))
                    elif type(b) is float and lift:
                        node_args = (value, b)
                        entry = shapes.get((value.sig, float))
                    elif type(b) is list:
                        # A list of ints: the sizes or dims of a view (view, permute,
                        # expand: the view copies functionalization emits).
                        key = [value.sig, list, len(b)]
                        for v in b:
                            if type(v) is not int:
                                break
                            key += (int, v)
                        else:
                            node_args = (value, list(b))
                            entry = shapes.get(tuple(key))
        if entry is None:
            return record_general(func, args, kwargs)
        metas, kind, outputs, token = entry
        if kind is not None:
            return record_general(func, args, kwargs)
        meta, sig, shape, dtype = outputs[0]
        return _make(LazyValue(meta, Node(op, node_args, NO_KWARGS, metas, token), 0, None, sig))

    def record_general(func, args, kwargs):
        key = []
        node_args = []
        for a in args:
            t = type(a)
            if t is LazyTensor or is_lazy(a):
                value = value_of(a)
                key.append(value.sig)
                node_args.append(value)
            elif t is float and lift:
                key.append(float)
                node_args.append(a)
            elif t is int or t is float or t is bool:
                key.append(t)
                key.append(a if a or t is not float else repr(a))  # 0.0 != -0.0 here
                node_args.append(a)
            else:
                node_args.append(_encode(a, lift, key, name))
        node_kwargs = {}
        if kwargs:
            key.append(KWARGS_SEPARATOR)
            for k, a in kwargs.items():
                key.append(k)
                node_kwargs[k] = _encode(a, lift, key, name)
        try:
            # One element: a single tensor's signature (or `float`), as the fast path.
            key = key[0] if len(key) == 1 else tuple(key)
            entry = shapes.get(key)
        except TypeError:  # an unhashable argument: infer every time
            key, entry = None, None
        if entry is None:
            try:
                metas, kind, outputs = _infer(func, args, kwargs)
            except fallback.NO_META as error:
                return fallback.run_eagerly(func, args, kwargs, f"no meta kernel: {error}")
            # The entry's token stands for everything its key fixes: the node's
            # op, its non-tensor arguments and its outputs (Node.static).
            entry = metas, kind, outputs, None if key is None else static_token()
            if key is not None:
                if len(shapes) >= _SHAPE_CACHE_LIMIT:
                    shapes.clear()
                shapes[key] = entry
        metas, kind, outputs, token = entry
        node = Node(op, tuple(node_args), node_kwargs, metas, token)
        if kind is None:
            meta, sig, shape, dtype = outputs[0]
            return _make(LazyValue(meta, node, 0, None, sig))
        return kind(_output(node, k, out) for k, out in enumerate(outputs))

    keep_alive(func)
    _RECORDERS[id(func)] = record_op
    return record_op


def _output(node, index, out):
    if out is None:
        return None
    meta, sig, shape, dtype = out
    return _make(LazyValue(meta, node, index, None, sig))


def native_shape_entry(func, args, kwargs):
    """A shape-cache entry for the C++ entry's recorder (native_entry.cpp): (output
    metas, static token, ((meta, signature), ...)) of `func` called with `args` and
    `kwargs` as its Node holds them (LazyValues where tensors are), or None where the
    Python recorder must take the call (no meta kernel, an output that is not a
    tensor, an unsupported dtype: it then runs, falls back or raises as it does)."""
    try:
        metas, kind, outputs = _infer(func, args, kwargs)
    except Exception:  # noqa: BLE001 (the Python recorder meets the same error and says it)
        return None
    if any(out is None for out in outputs):
        return None
    return metas, static_token(), tuple((meta, sig) for meta, sig, _, _ in outputs)


def node_op(func):
    """The op a Node of `func` records (view_copy -> view...)."""
    return _view_for_copy(func)


def _encode(x, lift: bool, key: list, op_name: str | None = None):
    """Append `x`'s shape-cache key to `key`; returns `x` as a node argument."""
    t = type(x)
    if t is LazyTensor or is_lazy(x):
        value = value_of(x)
        key.append(value.sig)
        return value
    if t is float and lift:
        key.append(float)
        return x
    if t is list or t is tuple:
        key.append(t)
        key.append(len(x))
        return t([_encode(v, lift, key, op_name) for v in x])
    if isinstance(x, torch.Tensor):
        # A CPU tensor mixed into a lazy op (a 0-d scalar tensor, CPU indices) becomes a
        # graph input; any other raises eager's same-device error.
        device_rules.check_host_tensor(x, op_name)
        key.append(_HOST)
        key.append(signature(x.shape, x.dtype))
        return value_of(constant(x))
    key.append(t)
    key.append(x if x or t is not float else repr(x))  # 0.0 and -0.0 are equal keys otherwise
    if isinstance(x, torch.device):
        # Graphs are device-neutral; the importer expects a real torch device.
        return torch.device("cpu")
    return x


def _infer(func, args, kwargs):
    """Run `func` on meta tensors: (output metas, output kind, per output
    (meta, signature, shape, dtype))."""
    meta_args = [to_meta(a) for a in args]
    meta_kwargs = {k: to_meta(v) for k, v in kwargs.items()}
    out = func(*meta_args, **meta_kwargs)
    if isinstance(out, torch.Tensor):
        outs, kind = [out], None
    elif isinstance(out, (list, tuple)) and all(o is None or isinstance(o, torch.Tensor)
                                                for o in out):
        # None: an output nobody asked for (an output_mask entry is false, e.g. the
        # bias gradient of a conv without bias); lowering asks for it anyway.
        outs, kind = out, type(out)
    else:
        raise NotImplementedError(f"{func} returns {type(out).__name__}, not tensors")
    for o in outs:
        if o is not None:
            device_rules.check_supported(o.dtype, o.layout, str(func))
    metas = [None if o is None else meta_like(o.shape, o.dtype) for o in outs]
    return metas, kind, tuple(None if m is None else
                              (m, signature(m.shape, m.dtype), tuple(m.shape), m.dtype)
                              for m in metas)


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
