"""Records functional ATen ops on LazyTensors into the trace.

`dispatch` is the single entry from `LazyTensor.__torch_dispatch__`. What an
op needs is decided once per op and kept in `_ROUTES`:
1. ops with special meaning for a lazy device (device transfers, scalar reads,
   identities) are handled here;
2. in-place and `_foreach_` ops (decompositions below functionalization use
   them) are rewritten into functional ones;
3. ops torch-mlir wants decomposed are decomposed with torch-mlir's own
   decomposition table (the pieces re-enter `dispatch`) once per signature;
   later calls replay a template of the nodes it recorded (`_decomposer`);
4. data-dependent and random ops run eagerly (fallback.py);
5. everything else is recorded by the op's recorder: a Node is added to the trace.

Recording is the hot path (a few microseconds per op; docs/tracing-performance.md
has the measurements). Output shapes/dtypes come from PyTorch's meta kernels
once per (op, input shapes/dtypes, static arguments) and are cached in the
op's recorder; the cache key is a flat tuple built in the same loop that
builds the node's arguments, with no pytree. Routes are keyed by `id(func)`
because `OpOverload.__hash__` is a Python method. TraceTime is added to the
metrics in samples of >= 10 ms per thread (`flush_trace_time` adds the rest).
"""

from __future__ import annotations

import threading
import time
from types import MappingProxyType

import torch

from .. import session, targets
from ..lowering.front import decompositions
from . import device_rules, failures, fallback, rnn
from . import values as values_module
from .graph import SCALAR_INPUT_OPS
from .materialize import to_cpu
from .values import _DEVICE, LazyTensor, LazyValue, Node, meta_like, signature, track

aten = torch.ops.aten
_SHAPE_CACHE_LIMIT = 1 << 16
_make_wrapper = torch.Tensor._make_wrapper_subclass
_clock = time.perf_counter


class _State(threading.local):
    depth = 0           # nesting of dispatch calls (decompositions re-enter)
    unflushed = 0.0     # TraceTime seconds not yet added to the session's metrics
    capture_start = -1  # while a decomposition is captured: the node seq it began after
    impure = 0          # events a decomposition template cannot replay (see _decomposer)


_state = _State()
# TraceTime reaches the metrics in samples of at least this many seconds: a
# locked metrics update per op would cost more than a small op's recording.
TRACE_TIME_SAMPLE_S = 0.01


def depth() -> int:
    return _state.depth


def flush_trace_time() -> None:
    """Add this thread's tracing time not yet counted to TraceTime."""
    seconds, _state.unflushed = _state.unflushed, 0.0
    if seconds:
        session.current().metrics.add_time("TraceTime", seconds)


def _torch_dispatch(cls, func, types, args=(), kwargs=None):
    """`LazyTensor.__torch_dispatch__`, the single entry (hot: a few microseconds)."""
    if kwargs is None:
        kwargs = {}
    try:
        # Keyed by id: OpOverload.__hash__ is a Python method (_FUNCS keeps func alive).
        recorder = _LEAVES.get(id(func))
        if recorder is not None:
            # A recorder never re-enters dispatch, so it needs no depth bookkeeping;
            # only a top-level call is timed (a nested one is inside a timed call).
            state = _state
            if state.depth:
                return recorder(func, args, kwargs)
            began = _clock()
            out = recorder(func, args, kwargs)
            _count_trace_time(state, began)
            return out
        return _dispatch_route(func, args, kwargs)
    except Exception as error:
        # Autograd runs backward for our device on its own thread, where an
        # exception from here would be lost: the outputs carry it instead.
        if not failures.in_backward():
            raise
        return failures.failed_outputs(func, args, kwargs, error)


def _dispatch_route(func, args, kwargs):
    route = _ROUTES.get(id(func))
    if route is None:
        route = _new_route(func)
        if route is _RECORDERS.get(id(func)):
            _LEAVES[id(func)] = route
    state = _state
    outer = state.depth
    state.depth = outer + 1
    if outer:
        try:
            return route(func, args, kwargs)
        finally:
            state.depth = outer
    began = _clock()
    try:
        return route(func, args, kwargs)
    finally:
        state.depth = 0
        _count_trace_time(state, began)


def _count_trace_time(state, began: float) -> None:
    """Add a top-level op's tracing time; it reaches the metrics in samples of at
    least TRACE_TIME_SAMPLE_S (a locked update per op would cost more than the op)."""
    spent = state.unflushed + (_clock() - began)
    if spent < TRACE_TIME_SAMPLE_S:
        state.unflushed = spent
    else:
        state.unflushed = 0.0
        session.current().metrics.add_time("TraceTime", spent)


def dispatch(func, args, kwargs):
    """Trace `func(*args, **kwargs)` as if it came through `__torch_dispatch__`."""
    return _torch_dispatch(LazyTensor, func, (), args, kwargs)


LazyTensor.__torch_dispatch__ = classmethod(_torch_dispatch)


# ------------------------------------------------------------------ routes

_ROUTES: dict = {}      # id(func) -> route(func, args, kwargs)
_LEAVES: dict = {}      # id(func) -> route, for ops whose route is their recorder
_RECORDERS: dict = {}   # id(func) -> the func's recorder (routes other than record use it)
_FUNCS: dict = {}       # id(func) -> func: keeps every keyed op alive, so no id is reused


def _new_route(func):
    route = _route(func)
    _FUNCS[id(func)] = func
    _ROUTES[id(func)] = route
    return route


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
        return _decomposer(func, decomposition)
    reason = fallback.always_eager(func)
    if reason is not None:
        return lambda f, args, kwargs: _eager(f, args, kwargs, reason)
    return _recorder(func)


# ------------------------------------------------------------------ record

def record(func, args, kwargs):
    """Add `func(*args, **kwargs)` to the trace; returns LazyTensors for its outputs."""
    recorder = _RECORDERS.get(id(func))
    if recorder is None:
        recorder = _recorder(func)
    return recorder(func, args, kwargs)


_KWARGS = object()  # separates positional from keyword arguments in a shape-cache key
_NO_KWARGS = MappingProxyType({})  # shared by nodes without kwargs: one object less per op
_HOST = object()    # marks a host (CPU) tensor argument in a shape-cache key


def _recorder(func):
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
        # Fast path: one or two positional arguments, tensors or a lifted float,
        # a cached single output. Its keys equal the general loop's.
        entry = None
        if not kwargs:
            if len(args) == 1:
                a = args[0]
                if type(a) is LazyTensor:
                    value = a._lazy
                    node_args = (value,)
                    entry = shapes.get(value.sig)
            elif len(args) == 2:
                a, b = args
                if type(a) is LazyTensor:
                    value = a._lazy
                    if type(b) is LazyTensor:
                        other = b._lazy
                        node_args = (value, other)
                        entry = shapes.get((value.sig, other.sig))
                    elif type(b) is float and lift:
                        node_args = (value, b)
                        entry = shapes.get((value.sig, float))
        if entry is None:
            return record_general(func, args, kwargs)
        metas, kind, outputs = entry
        if kind is not None:
            return record_general(func, args, kwargs)
        meta, sig, shape, dtype = outputs[0]
        tensor = _make_wrapper(LazyTensor, shape, dtype=dtype, device=_DEVICE)
        tensor._lazy = LazyValue(meta, Node(op, node_args, _NO_KWARGS, metas), 0, None, sig)
        track(tensor)
        return tensor

    def record_general(func, args, kwargs):
        key = []
        node_args = []
        for a in args:
            t = type(a)
            if t is LazyTensor:
                value = a._lazy
                key.append(value.sig)
                node_args.append(value)
            elif t is float and lift:
                key.append(float)
                node_args.append(a)
            elif t is int or t is float or t is bool:
                key.append(t)
                key.append(a)
                node_args.append(a)
            else:
                node_args.append(_encode(a, lift, key, name))
        node_kwargs = {}
        if kwargs:
            key.append(_KWARGS)
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
                entry = _infer(func, args, kwargs)
            except fallback.NO_META as error:
                return _eager(func, args, kwargs, f"no meta kernel: {error}")
            if key is not None:
                if len(shapes) >= _SHAPE_CACHE_LIMIT:
                    shapes.clear()
                shapes[key] = entry
        metas, kind, outputs = entry
        node = Node(op, tuple(node_args), node_kwargs, metas)
        if kind is None:
            meta, sig, shape, dtype = outputs[0]
            tensor = _make_wrapper(LazyTensor, shape, dtype=dtype, device=_DEVICE)
            tensor._lazy = LazyValue(meta, node, 0, None, sig)
            track(tensor)
            return tensor
        return kind(_output(node, k, out) for k, out in enumerate(outputs))

    _FUNCS[id(func)] = func
    _RECORDERS[id(func)] = record_op
    return record_op


def _output(node, index, out):
    if out is None:
        return None
    meta, sig, shape, dtype = out
    tensor = _make_wrapper(LazyTensor, shape, dtype=dtype, device=_DEVICE)
    tensor._lazy = LazyValue(meta, node, index, None, sig)
    track(tensor)
    return tensor


def _encode(x, lift: bool, key: list, op_name: str | None = None):
    """Append `x`'s shape-cache key to `key`; returns `x` as a node argument."""
    t = type(x)
    if t is LazyTensor:
        value = x._lazy
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
        return constant(x)._lazy
    key.append(t)
    key.append(x)
    if isinstance(x, torch.device):
        # Graphs are device-neutral; the importer expects a real torch device.
        return torch.device("cpu")
    return x


def _infer(func, args, kwargs):
    """Run `func` on meta tensors: (output metas, output kind, per output
    (meta, signature, shape, dtype))."""
    meta_args = [_to_meta(a) for a in args]
    meta_kwargs = {k: _to_meta(v) for k, v in kwargs.items()}
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


def constant(cpu: torch.Tensor) -> LazyTensor:
    """A materialized lazy value holding a copy of `cpu`."""
    _state.impure += 1
    device_rules.check_supported(cpu.dtype, cpu.layout, "copy to lazy_mlir")
    cpu = cpu.detach().to("cpu").contiguous()
    return LazyTensor(LazyValue(meta_like(cpu.shape, cpu.dtype),
                                data=targets.active().upload(cpu)))


def adopt(data, shape, dtype: torch.dtype, what: str) -> LazyTensor:
    """A materialized lazy value over target data made outside the trace (a DLPack
    import): no copy."""
    _state.impure += 1
    device_rules.check_supported(dtype, torch.strided, what)
    return LazyTensor(LazyValue(meta_like(shape, dtype), data=data))


def _to_host(x):
    if isinstance(x, LazyTensor):
        _state.impure += 1
        return to_cpu(x)
    if isinstance(x, torch.device) and x.type == "lazy_mlir":
        return torch.device("cpu")
    return x


def _eager(func, args, kwargs, reason):
    _state.impure += 1
    return fallback.run_eagerly(func, args, kwargs, reason, _to_host, constant)


# ---------------------------------------------------------------- special ops

def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    if device is not None and not _is_lazy_device(device):
        _state.impure += 1
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
    _state.impure += 1
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
        return LazyTensor(self._lazy)
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
    statistics (as `_inplace` does), so BatchNorm in training mode updates them."""
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
    if _state.capture_start >= 0:
        _state.impure += 1  # rebinds tensors from outside a captured decomposition
    running_mean._lazy = new_mean._lazy
    running_var._lazy = new_var._lazy
    return out, mean, rstd


def _batch_norm_functional(input, weight, bias, running_mean, running_var, training,
                           momentum, eps):
    """Functionalization's form of _native_batch_norm_legit: in eval mode PyTorch's
    decomposition returns empty statistics only on the "cpu" device; eager CPU is
    the reference, so ours are empty too. Training mode is decomposed as usual."""
    func = aten._native_batch_norm_legit_functional.default
    args = (input, weight, bias, running_mean, running_var, training, momentum, eps)
    if training:
        return _decompositions()[func](*args)
    out, empty, _ = _batch_norm(*args)
    return out, empty, LazyTensor(empty._lazy), running_mean, running_var


def _layer_norm(input, normalized_shape, weight, bias, eps):
    """Eager CPU returns half/bfloat16 mean and rstd for a half input; the meta
    kernel says float32 (CUDA's choice): cast them, as eager rounds them."""
    out, mean, rstd = record(aten.native_layer_norm.default,
                             (input, normalized_shape, weight, bias, eps), {})
    return out, *_input_dtype(input, mean, rstd)


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
        table.update(decompositions.TABLE)
        _DECOMPOSITIONS = table
    return _DECOMPOSITIONS


# A decomposition runs Python reference code and re-enters dispatch for every
# piece (t_copy -> t -> transpose -> permute -> clone), 20-50 us a call. Its
# result depends only on its arguments' shapes, dtypes and static values, so
# it runs once per signature while a template of the nodes it recorded is
# captured; later calls replay the template (a Node and a LazyValue per
# piece). A call that syncs, runs an op eagerly, uploads a constant or rebinds
# a tensor from outside is not captured: it runs every time, as before.

_TEMPLATE_LIMIT = 256   # templates kept per op (a changing float in the key misses)


class _NoTemplate(Exception):
    pass


class _Ref:
    """In a template: the value at position `i` (inputs first, then node outputs)."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def _decomposer(func, decomposition):
    templates: dict = {}

    def run(f, args, kwargs):
        out = decomposition(*args, **kwargs)
        return record(f, args, kwargs) if out is NotImplemented else out

    def decompose(f, args, kwargs):
        state = _state
        if state.capture_start >= 0:  # inside another capture: that one templates us
            return run(f, args, kwargs)
        # The default dtype: a decomposition may read it (factories without a dtype).
        key, inputs = [torch.get_default_dtype()], []
        try:
            for a in args:
                _template_key(a, key, inputs)
            if kwargs:
                key.append(_KWARGS)
                for k, v in kwargs.items():
                    key.append(k)
                    _template_key(v, key, inputs)
            key = tuple(key)
            template = templates.get(key)
        except (TypeError, _NoTemplate):  # unhashable or host-tensor arguments
            return run(f, args, kwargs)
        if template is not None:
            return _replay(template, inputs)
        if len({id(v) for v in inputs}) != len(inputs):
            # One value in two argument places: a template would tie them together for
            # later calls that pass two different values. (Replaying a template made
            # with distinct values for a call that repeats one is exact.)
            return run(f, args, kwargs)
        start = next(values_module._node_ids)
        impure = state.impure
        state.capture_start = start
        try:
            out = run(f, args, kwargs)
        finally:
            state.capture_start = -1
        if state.impure == impure:
            template = _capture(start, inputs, out)
            if template is not None:
                if len(templates) >= _TEMPLATE_LIMIT:
                    templates.clear()
                templates[key] = template
        return out

    return decompose


def _template_key(x, key: list, inputs: list) -> None:
    """Like the shape-cache key, but every scalar by value (floats by their exact bits:
    -0.0 == 0.0 in Python); collects the LazyValues in order."""
    t = type(x)
    if t is LazyTensor:
        value = x._lazy
        key.append(value.sig)
        inputs.append(value)
    elif t is float:
        key.append(float)
        key.append(x.hex())
    elif t is list or t is tuple:
        key.append(t)
        key.append(len(x))
        for v in x:
            _template_key(v, key, inputs)
    elif isinstance(x, torch.Tensor):
        raise _NoTemplate  # a host tensor: its values would be baked in
    else:
        key.append(t)
        key.append(x)


def _capture(start: int, inputs: list, out):
    """The template of what a decomposition recorded after node `start`, or None."""
    position = {}  # id(value) or (seq, output) -> position in the replay's values
    for i, value in enumerate(inputs):
        position.setdefault(id(value), i)
    nodes = {}
    stack = []

    def visit(value) -> bool:
        if id(value) in position:
            return True
        node = value.node
        if node is None or node.seq <= start:
            return False  # made outside and not an input (a constant, a closure...)
        if node.seq not in nodes:
            nodes[node.seq] = node
            stack.append(node)
        return True

    def visit_out(o) -> bool:
        if type(o) is LazyTensor:
            return visit(o._lazy)
        if type(o) is list or type(o) is tuple:
            return all(visit_out(v) for v in o)
        return o is None or type(o) in (int, float, bool)

    if not visit_out(out):
        return None
    while stack:
        node = stack.pop()
        for arg in (*node.args, *node.kwargs.values()):
            for value in (arg if type(arg) is list or type(arg) is tuple else (arg,)):
                if type(value) is LazyValue and not visit(value):
                    return None
    count = len(inputs)
    for seq in sorted(nodes):
        for k in range(len(nodes[seq].out_metas)):
            position[(seq, k)] = count
            count += 1

    def spec(x):
        if type(x) is LazyValue:
            i = position.get(id(x))
            return _Ref(i if i is not None else position[(x.node.seq, x.index)])
        if type(x) is list or type(x) is tuple:
            return type(x)(spec(v) for v in x)
        return x

    steps = []
    for seq in sorted(nodes):
        node = nodes[seq]
        steps.append((node.op, tuple(spec(a) for a in node.args),
                      {k: spec(v) for k, v in node.kwargs.items()}, node.out_metas,
                      [None if m is None else signature(m.shape, m.dtype)
                       for m in node.out_metas]))

    def out_spec(o):
        if type(o) is LazyTensor:
            return spec(o._lazy)
        if type(o) is list or type(o) is tuple:
            return type(o)(out_spec(v) for v in o)
        return o

    return steps, out_spec(out)


def _resolve(x, values: list):
    t = type(x)
    if t is _Ref:
        return values[x.i]
    if t is list or t is tuple:
        return t(_resolve(v, values) for v in x)
    return x


def _rebuild(x, values: list):
    t = type(x)
    if t is _Ref:
        return LazyTensor(values[x.i])
    if t is list or t is tuple:
        return t(_rebuild(v, values) for v in x)
    return x


def _replay(template, values: list):
    steps, out = template
    for op, args, kwargs, metas, sigs in steps:
        node = Node(op, tuple(_resolve(a, values) for a in args),
                    {k: _resolve(v, values) for k, v in kwargs.items()} if kwargs else {},
                    metas)
        for k, meta in enumerate(metas):
            values.append(None if meta is None else LazyValue(meta, node, k, None, sigs[k]))
    return _rebuild(out, values)


def _inplace(func, args, kwargs):
    """An in-place op below functionalization (decompositions use some): run the
    functional form and rebind the inner tensor to the new value. Nothing here
    aliases (functionalization above us owns views), so rebinding is exact."""
    self = args[0]
    start = _state.capture_start
    if start >= 0 and (self._lazy.node is None or self._lazy.node.seq <= start):
        _state.impure += 1  # rebinds a tensor from outside a captured decomposition
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


# base op -> (its positional argument count, the keyword its scalar goes to)
_FOREACH_KEYWORD = {"addcmul": (3, "value"), "addcdiv": (3, "value")}


def _foreach(func, args, kwargs):
    """`_foreach_op(lists...)` -> one `op` per element (optimizers use these)."""
    base = func._schema.name.removeprefix("aten::_foreach_")
    packet = getattr(aten, base)
    lists = [a for a in args if isinstance(a, (list, tuple))]
    count = len(lists[0])
    results = []
    keyword = _FOREACH_KEYWORD.get(base)
    for i in range(count):
        element_args = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
        element_kwargs = kwargs
        if keyword is not None and len(element_args) > keyword[0]:
            # e.g. _foreach_addcmul_(self, t1, t2, value): addcmul takes `value`
            # by keyword only; a `.Tensor` overload passes the scalars as a tensor.
            scalar = element_args.pop()
            if isinstance(scalar, torch.Tensor):
                scalar = scalar[i].item() if scalar.dim() else scalar.item()
            element_kwargs = {**kwargs, keyword[1]: scalar}
        results.append(packet(*element_args, **element_kwargs))
    returns = func._schema.returns
    return results if returns else None
