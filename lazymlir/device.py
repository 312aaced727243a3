"""Registers the `lazy_mlir` device: PrivateUse1 renamed, device module, guard, factories.

PyTorch's `Lazy` dispatch key belongs to its TorchScript LTC backend (device
`lazy`); a device of our own name can only be PrivateUse1. Factories return
`torch._to_functional_tensor(inner)`, so every later op passes through
PyTorch's functionalization before it reaches the tracer.
"""

from __future__ import annotations

import copy
import warnings

import torch

from . import autocast, device_guard, device_index, dlpack, module_moves, session, streams
from .execution import executor
from .tracing import device_rules, tracer
from .tracing.materialize import mark_step, wait
from .tracing.values import (LazyTensor, LazyValue, Node, as_lazy, inner, is_lazy, meta_like,
                              set_value, value_of)

NAME = "lazy_mlir"
_registered = False
_library = None  # the torch.library.Library holding our kernels; must stay alive
_libraries: list = []  # other torch.library.Library objects of ours, kept alive too


class _DeviceModule:
    """`torch.lazy_mlir`: what PyTorch and user code ask of a device module."""

    Stream = streams.Stream
    Event = streams.Event
    current_stream = staticmethod(streams.current_stream)
    stream = staticmethod(streams.stream)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device) -> None:
        """`set_device(local_rank)` as for CUDA: the process's one device (device_index.py)."""
        device_index.check(torch.device(NAME, device) if isinstance(device, int)
                           else torch.device(device))

    @staticmethod
    def synchronize(device=None) -> None:
        """Run everything pending (like mark_step), then wait for the device."""
        mark_step()
        wait()

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        """Seed the device's Philox generator (torch.manual_seed and torch.seed call
        this): random ops compile to Philox arithmetic (tracing/random_ops.py)."""
        session.current().rng.manual_seed(seed)

    manual_seed = manual_seed_all

    @staticmethod
    def initial_seed() -> int:
        return session.current().rng.seed

    @staticmethod
    def get_amp_supported_dtype() -> list:
        """float16 and bfloat16: `torch.autocast("lazy_mlir", dtype=...)` applies the
        policy of the target's eager backend, CPU's or CUDA's (autocast.py). PyTorch asks
        even for a disabled autocast: activation checkpointing (of CPU tensors too, lazy_mlir
        being the registered accelerator) builds one for the device."""
        return autocast.supported_dtypes()

    @staticmethod
    def get_rng_state(device=None):
        """16 bytes: the Philox seed and offset (as CUDA's generator state); what
        torch.utils.checkpoint and torch.random.fork_rng save and restore."""
        return session.current().rng.get_state()

    @staticmethod
    def set_rng_state(state, device=None) -> None:
        session.current().rng.set_state(state)


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    """PyTorch's Python-backend guard: used only where device_guard.py's C++ guard
    could not be built (its methods call Python; see there)."""

    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def _inside_functionalization() -> bool:
    """True when a factory is called below functionalization (it wraps our result itself)."""
    excluded = torch._C._dispatch_tls_local_exclude_set()
    # torch.tensor(data, device=) excludes Functionalize *and* Python: not functionalization.
    return tracer.depth() > 0 or (excluded.has(torch._C.DispatchKey.Functionalize)
                                  and not excluded.has(torch._C.DispatchKey.Python))


_first_use = True


def _wrap(inner: LazyTensor) -> torch.Tensor:
    global _first_use
    if _first_use:  # the device is in use: let the compiler start up meanwhile
        _first_use = False
        executor.prestart_worker()
    return inner if _inside_functionalization() else torch._to_functional_tensor(inner)


def _factory_node(op, args, kwargs, shape, dtype) -> LazyTensor:
    device_rules.check_supported(dtype, torch.strided, str(op))
    meta = meta_like(shape, dtype)
    return LazyTensor(LazyValue(meta, Node(op, args, kwargs, [meta]), 0))


def _empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None,
                         memory_format=None):
    device_index.check(device)
    dtype = dtype or torch.get_default_dtype()
    inner = _factory_node(torch.ops.aten.empty.memory_format, (list(size),), {"dtype": dtype},
                          size, dtype)
    return _wrap(inner)


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    device_index.check(device)
    # Lazy values are dense; strides of the result are the contiguous ones.
    return _empty_memory_format(size, dtype=dtype)


def _arange_start_step(start, end, step=1, dtype=None, layout=None, device=None,
                       pin_memory=None):
    device_index.check(device)
    meta = torch.arange(start, end, step, dtype=dtype, device="meta")
    inner = _factory_node(torch.ops.aten.arange.start_step, (start, end, step),
                          {"dtype": meta.dtype}, meta.shape, meta.dtype)
    return _wrap(inner)


def _arange(end, dtype=None, layout=None, device=None, pin_memory=None):
    return _arange_start_step(0, end, 1, dtype=dtype, device=device)


def _arange_start(start, end, dtype=None, layout=None, device=None, pin_memory=None):
    return _arange_start_step(start, end, 1, dtype=dtype, device=device)


def _arange_out(start, end, step=1, *, out):
    """arange(..., out=) under functionalization, as eager's: `out` keeps its shape when
    its element count is the result's (functionalization's own kernel gave `out` the
    result's 1-d shape)."""
    result = torch.arange(start, end, step, dtype=out.dtype, device=out.device)
    if result.numel() != out.numel():
        out.resize_(result.shape)
    out.copy_(result.view(out.shape))
    return out


# prims view ops as the ATen views they are: functionalization takes no custom op whose
# output aliases its input ("Found a custom (non-ATen) operator whose output has alias
# annotations"), and prims are such ops to it.
_PRIMS_VIEWS = {
    "squeeze": lambda a, dimensions: torch.ops.aten.squeeze.dims(a, list(dimensions)),
    "view_of": lambda a: torch.ops.aten.alias.default(a),
    "split_dim": lambda a, dim, outer_length: torch.ops.aten.view.default(
        a, [*a.shape[:dim], outer_length, a.shape[dim] // outer_length, *a.shape[dim + 1:]]),
    "collapse_view": lambda a, start, end: torch.ops.aten.view.default(
        a, [*a.shape[:start], -1, *a.shape[end + 1:]]),  # end is inclusive
    "transpose": lambda a, permutation: torch.ops.aten.permute.default(a, list(permutation)),
}


def _eye_m(n, m, dtype=None, layout=None, device=None, pin_memory=None):
    device_index.check(device)
    dtype = dtype or torch.get_default_dtype()
    inner = _factory_node(torch.ops.aten.eye.m, (n, m), {"dtype": dtype}, (n, m), dtype)
    return _wrap(inner)


def _eye(n, dtype=None, layout=None, device=None, pin_memory=None):
    return _eye_m(n, n, dtype=dtype, device=device)


def _copy_from(self, dst, non_blocking=False):
    """copy_ between devices when the Python key is excluded (torch.tensor(data, device=)
    does that): PyTorch's copy_ then calls this backend kernel directly."""
    if is_lazy(self) or is_lazy(dst):  # an inner tensor: the tracer's route, as any op's
        return tracer.dispatch(torch.ops.aten._copy_from.default,
                               (as_lazy(self), as_lazy(dst), non_blocking), {})
    src = self
    if torch._is_functional_tensor(dst):  # a fresh wrapper from our factory: fill its inner
        cpu = src.detach().to("cpu").to(dst.dtype).expand(dst.shape)
        set_value(inner(dst), value_of(tracer.constant(cpu)))
    else:
        dst.copy_(src)
    return dst


def _local_scalar_dense(self):
    """`.item()` when the Functionalize key is excluded: `torch.tensor([t[0], t[1]])`
    reads each 0-d lazy tensor that way (as it reads CUDA scalars), and without this
    kernel raised "Could not run 'aten::_local_scalar_dense' ... 'lazy_mlir' backend"."""
    if is_lazy(self):  # an inner tensor (`.item()` in a route): the tracer's scalar read
        return tracer.dispatch(torch.ops.aten._local_scalar_dense.default, (as_lazy(self),), {})
    # Every key above the backend is excluded here; the read needs functionalization
    # (to apply pending in-place updates of the base).
    keys = torch._C.DispatchKey
    excluded = torch._C._dispatch_tls_local_exclude_set()
    for key in (keys.Functionalize, keys.Python, keys.PythonTLSSnapshot):
        excluded = excluded.remove(key)
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), excluded):
        return self.item()


def _install_printing() -> None:
    """print()/repr() of a lazy_mlir tensor shows its values, like eager and PyTorch/XLA.

    PyTorch copies xla/lazy/ipu/mtia tensors to the CPU before printing
    (torch/_tensor_str.py); PrivateUse1 devices are not in that list, so a
    lazy tensor printed as `_to_functional_tensor(LazyTensor(...))`. Printing
    is a sync point, as in PyTorch/XLA.
    """
    import torch._tensor_str as tensor_str

    original = tensor_str._str_intern
    if getattr(original, "_lazymlir", False):
        return

    def _str_intern(inp, *, tensor_contents=None):
        if inp.device.type != NAME:
            return original(inp, tensor_contents=tensor_contents)
        text = original(inp.detach().to("cpu"), tensor_contents=tensor_contents)
        extra = [f"device='{inp.device}'"]
        if inp.grad_fn is not None:
            extra.append(f"grad_fn=<{type(inp.grad_fn).__name__}>")
        elif inp.requires_grad:
            extra.append("requires_grad=True")
        return f"{text[:-1]}, {', '.join(extra)})"

    _str_intern._lazymlir = True
    tensor_str._str_intern = _str_intern


def _empty_quantized(*args, **kwargs):
    """Quantized tensors (`qtensor.to("lazy_mlir")`) reach this: refuse them by name."""
    device_rules.check_supported(torch.qint8, torch.strided, "aten::empty_quantized")


def _install_host_copy() -> None:
    """`cpu_tensor.copy_(lazy_tensor)` works, as `cpu.copy_(cuda)` does in eager.

    PyTorch's functionalization kernel for copy_ asserts when its destination
    is not functional and its source is ("mutating a non-functional tensor with
    a functional tensor is not allowed"): a lazy source into a CPU destination
    is first brought to the CPU (a sync point), then copied as usual.
    """
    original = torch.Tensor.copy_
    if getattr(original, "_lazymlir", False):
        return

    def copy_(self, src, non_blocking=False):
        # is_cpu first: every copy_ in the process comes here (AOTAutograd's copies of
        # a compiled optimizer step's parameters too), and src.device costs ~1 us.
        if (type(src) is torch.Tensor and not src.is_cpu and src.device.type == NAME
                and self.device.type != NAME and not torch._is_functional_tensor(self)):
            src = src.to("cpu")
        return original(self, src, non_blocking)

    copy_._lazymlir = True
    copy_.__doc__ = original.__doc__
    torch.Tensor.copy_ = copy_


def _install_deepcopy() -> None:
    """`copy.deepcopy` of a lazy_mlir tensor is a lazy clone (no sync), as PyTorch does
    for XLA and lazy tensors; aliasing between copied views is not kept (the same there).

    A FunctionalTensorWrapper reports a storage, so PyTorch's `__deepcopy__` took the
    storage path and cloned a storage with a null data pointer: `copy.deepcopy(model)`
    with buffers on the device (an EMA model, a best-checkpoint copy) killed the process
    with SIGSEGV. Parameters and subclasses already clone, through their own paths."""
    original = torch.Tensor.__deepcopy__
    if getattr(original, "_lazymlir", False):
        return

    def __deepcopy__(self, memo):
        if type(self) is not torch.Tensor or self.device.type != NAME or not self.is_leaf:
            return original(self, memo)  # (a non-leaf raises PyTorch's own error)
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = self.clone()
        if self.requires_grad:
            new.requires_grad_()
        if self.grad is not None:
            new.grad = self.grad.__deepcopy__(memo)
        new.__dict__ = copy.deepcopy(self.__dict__, memo)
        memo[id(self)] = new
        return new

    __deepcopy__._lazymlir = True
    __deepcopy__.__doc__ = original.__doc__
    torch.Tensor.__deepcopy__ = __deepcopy__


def _install_serialization() -> None:
    """torch.save of a lazy_mlir tensor stores its values (a sync point), like XLA tensors;
    torch.load gives a lazy_mlir tensor back (or `map_location`'s device).

    PyTorch pickles tensors of storage-less PrivateUse1 devices through a CPU copy,
    but a FunctionalTensorWrapper reports a storage, so without this it takes the
    storage path and fails with "invalid python storage"."""
    original = torch.Tensor._reduce_ex_internal
    if getattr(original, "_lazymlir", False):
        return

    def _reduce_ex_internal(self, proto):
        if self.device.type != NAME:
            return original(self, proto)
        from torch.utils.hooks import warn_if_has_hooks

        warn_if_has_hooks(self)
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (self.detach().to("cpu"), self.dtype, str(self.device), self.requires_grad))

    _reduce_ex_internal._lazymlir = True
    torch.Tensor._reduce_ex_internal = _reduce_ex_internal

    # map_location="lazy_mlir": storages cannot live on a device without storage, so
    # the file is loaded to the CPU and its tensors moved to the lazy device.
    load = torch.load

    def load_to_lazy(f, map_location=None, *args, **kwargs):
        if not _is_lazy_location(map_location):
            return load(f, map_location, *args, **kwargs)
        loaded = load(f, "cpu", *args, **kwargs)
        return torch.utils._pytree.tree_map(
            lambda x: x.to(map_location) if isinstance(x, torch.Tensor) else x, loaded)

    load_to_lazy._lazymlir = True
    load_to_lazy.__doc__ = load.__doc__
    if not getattr(load, "_lazymlir", False):
        torch.load = load_to_lazy


def _is_lazy_location(location) -> bool:
    try:
        return isinstance(location, (str, torch.device)) and torch.device(location).type == NAME
    except RuntimeError:
        return False


def register() -> None:
    """Idempotent: rename PrivateUse1, install device module/hooks/guard and factory kernels."""
    global _registered, _library
    if _registered:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    if torch._C._get_privateuse1_backend_name() != NAME:
        # The C++ guard first: PyTorch's Python one (_Guard, registered below only if
        # the C++ one fails to build) can abort the process on an error inside backward.
        device_guard.install()
        _setup_privateuseone_for_python_backend(NAME, _DeviceModule(), _Hooks(), _Guard())
    _library = torch.library.Library("aten", "IMPL")
    _library.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    _library.impl("empty_strided", _empty_strided, "PrivateUse1")
    _library.impl("arange.start_step", _arange_start_step, "PrivateUse1")
    # Without these, arange(end) / arange(start, end) reach the tracer as
    # empty + arange.start_out (an out= op below functionalization).
    _library.impl("arange", _arange, "PrivateUse1")
    _library.impl("arange.start", _arange_start, "PrivateUse1")
    with warnings.catch_warnings():  # replacing PyTorch's kernel is the point
        warnings.filterwarnings("ignore", "Warning only once for all operators")
        _library.impl("arange.start_out", _arange_out, "Functionalize")
        _library.impl("arange.out", lambda end, *, out: _arange_out(0, end, out=out),
                      "Functionalize")
    # Without these, eye reaches the tracer as empty + eye.m_out (an out= op that
    # resizes its (0,)-shaped output below functionalization).
    _prims_library = torch.library.Library("prims", "IMPL")
    for name, view in _PRIMS_VIEWS.items():
        _prims_library.impl(name, view, "Functionalize")
    _libraries.append(_prims_library)
    _library.impl("eye", _eye, "PrivateUse1")
    _library.impl("eye.m", _eye_m, "PrivateUse1")
    _library.impl("_copy_from", _copy_from, "PrivateUse1")
    _library.impl("_local_scalar_dense", _local_scalar_dense, "PrivateUse1")
    _library.impl("empty_quantized", _empty_quantized, "QuantizedPrivateUse1")
    _install_printing()
    autocast.install()
    module_moves.install()
    _install_host_copy()
    _install_serialization()
    _install_deepcopy()
    dlpack.install()
    # Last: the C++ entry becomes the kernel of every op that has no PrivateUse1 kernel
    # by now (the factories and copies above keep theirs).
    tracer.install_kernels()
    _registered = True
    device_guard.check_autograd_queues(NAME)
