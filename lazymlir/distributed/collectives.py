"""c10d's collectives on lazy_mlir tensors: run by the group's own backend on host buffers.

c10d's ops (`c10d::allreduce_`, `broadcast_`, ...) declare no argument as written
(PyTorch's Ops.cpp returns the inputs "to make inplace allreduce look like a
functional API"), so functionalization would hand them to the tracer as if they
were pure, the eager fallback would run them on host copies, and the result would
be dropped: `dist.all_reduce(t)` would leave `t` unchanged. Kernels at the
Functionalize key take them first:

1. every lazy tensor argument is brought to the host (pending ones computed as one
   graph);
2. the same c10d op runs on the host tensors, i.e. through the process group's
   real CPU backend (gloo), and is waited for;
3. each tensor the op writes gets the result through functionalization
   (replace + commit), so views and the tensors they alias see it, as after an
   in-place op.

Each call counts as `Collective` in lazymlir.metrics. The returned `Work` is
already complete (its future holds the lazy tensors), so `wait()` returns at once;
communication does not overlap the backward pass. A c10d op with no kernel here
raises an error naming it rather than run eagerly.
"""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives  # noqa: F401  registers _wrap_tensor_autograd
from torch.utils._pytree import tree_map_only

from .. import session
from ..support.errors import UnsupportedOperationError
from ..tracing import special_ops
from ..tracing.host_data import constant, to_host as lazy_to_host
from ..tracing.materialize import materialize, to_cpu
from ..tracing.values import LazyTensor, inner, value_of

NAME = "lazy_mlir"

# c10d op -> the positions of its arguments the op writes (a Tensor, Tensor[] or
# Tensor[][]). Results come back only into these; the others are read.
WRITTEN = {
    "allreduce_": (0,),
    "allreduce_coalesced_": (0,),
    "broadcast_": (0,),
    "allgather_": (0,),
    "_allgather_base_": (0,),
    "allgather_coalesced_": (0,),
    "allgather_into_tensor_coalesced_": (0,),
    "reduce_scatter_": (0,),
    "_reduce_scatter_base_": (0,),
    "reduce_scatter_tensor_coalesced_": (0,),
    "alltoall_": (0,),
    "alltoall_base_": (0,),
    "reduce_": (0,),
    "gather_": (0,),
    "scatter_": (0,),
    "send": (),
    "recv_": (0,),
    "recv_any_source_": (0,),
    "barrier": (),
    "monitored_barrier_": (),
}

_library = None  # the torch.library.Library holding the kernels; must stay alive


def is_lazy(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == NAME


def _tensors(value):
    """The tensors in an argument: a Tensor, a list of them, or a list of lists."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _inner(tensor: torch.Tensor) -> LazyTensor:
    """The lazy value a lazy_mlir tensor holds now (its pending view updates applied)."""
    torch._sync(tensor)
    return inner(tensor)


def to_host(tensors: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    """id(lazy tensor) -> a CPU tensor of its values that the caller may write. Pending
    values are computed together, as one graph."""
    inners = {id(t): _inner(t) for t in tensors if is_lazy(t)}
    materialize([value_of(inner) for inner in inners.values()])
    # A copy the backend may write in place: the values stay immutable.
    return {key: to_cpu(inner).clone() for key, inner in inners.items()}


def write_back(tensor: torch.Tensor, host: torch.Tensor) -> None:
    """`tensor` (a lazy_mlir tensor, maybe a view) now holds `host`'s values, as after an
    in-place op: functionalization propagates them to its base and the other views."""
    torch._functionalize_replace(tensor, constant(host.to(tensor.dtype)))
    torch._functionalize_commit_update(tensor)
    torch._sync(tensor)


def completed_work(value):
    """A c10d Work whose wait() returns at once and whose future holds `value`, boxed
    as the dispatcher returns it (a TorchScript object)."""
    future = torch.futures.Future()
    future.set_result(value)
    return torch._C._distributed_c10d._create_work_from_future(future).boxed()


def _normalized(schema, args, kwargs) -> list:
    """All arguments by position (the Python kernel gets those left at their default
    neither positionally nor by name)."""
    full = list(args)
    for argument in schema.arguments[len(args):]:
        if argument.name in kwargs:
            full.append(kwargs[argument.name])
        elif argument.has_default_value():
            full.append(argument.default_value)
        else:
            raise TypeError(f"{schema.name}: missing argument '{argument.name}'")
    return full


NO_CPU_BACKEND = (
    "{op}: the process group has no CPU backend (NCCL only?). Collectives on lazy_mlir "
    "tensors run on host copies through the group's CPU backend; NCCL on device buffers "
    "is not supported yet. Make the group with init_process_group() or backend='gloo', "
    "or backend='cpu:gloo,cuda:nccl' to keep NCCL for CUDA tensors.")


def run_on_host(op, *args, **kwargs):
    """`op` on host tensors; a group without a CPU backend (an NCCL group) raises an
    error saying what to use instead of c10d's "No backend type associated with device
    type cpu"."""
    try:
        return op(*args, **kwargs)
    except RuntimeError as error:
        if "No backend type associated with device type cpu" in str(error):
            raise UnsupportedOperationError(
                NO_CPU_BACKEND.format(op=op._schema.name)) from error
        raise


def _wait(result) -> None:
    """Wait for the Work an op returned (boxed, as a TorchScript object)."""
    for item in result if isinstance(result, tuple) else (result,):
        if isinstance(item, torch.ScriptObject):
            torch._C._distributed_c10d.Work.unbox(item).wait()


def _kernel(op, written: tuple[int, ...]):
    name = op._schema.name

    def collective(*args, **kwargs):
        args = _normalized(op._schema, args, kwargs)
        tensors = [t for a in args for t in _tensors(a)]
        for tensor in tensors:
            if torch._is_functional_tensor(tensor) and not is_lazy(tensor):
                # Another device's functionalization (AOTAutograd traces c10d's
                # functional ops instead): nothing to run here.
                raise UnsupportedOperationError(
                    f"{name} on a functionalized {tensor.device.type} tensor")
        host = to_host(tensors)
        session.current().metrics.inc("Collective")
        host_args = [tree_map_only(torch.Tensor, lambda t: host.get(id(t), t), a) for a in args]
        result = run_on_host(op, *host_args)
        _wait(result)
        with torch.no_grad():
            for position in written:
                for tensor, out in zip(_tensors(args[position]), _tensors(host_args[position])):
                    if id(tensor) in host:
                        write_back(tensor, out)
        # The results are the caller's own tensors (c10d returns its inputs).
        returned = args[written[0]] if written else list(tensors)
        work = completed_work(returned if isinstance(returned, list) else [returned])
        if isinstance(result, tuple):
            return (returned, work) if len(result) == 2 else ()
        return work if result is not None else None

    collective.__name__ = name.split("::")[-1]
    return collective


def _unsupported(name: str):
    def refuse(*args, **kwargs):
        raise UnsupportedOperationError(
            f"{name} is not supported on lazy_mlir tensors; move its tensors to the CPU "
            f"(.cpu()) for it")
    return refuse


# ------------------------------------------------------ functional collectives, eagerly

def _functional_route(op):
    """How the tracer runs `_c10d_functional` op `op` on lazy values (funcol called
    outside torch.compile): on host copies through PyTorch, waited for at once (its
    output is read only after the wait: wait_tensor finds the work by storage), the
    result a computed lazy value. A mutating form raises: it has no route."""
    name = op._schema.name
    if name.endswith("::wait_tensor"):
        return lambda tensor: LazyTensor(value_of(tensor))  # done when it was made
    if op._schema.is_mutable:
        return _unsupported(name)

    def run(*args, **kwargs):
        session.current().metrics.inc("Collective")
        host_args = [tree_map_only(torch.Tensor, lazy_to_host, a) for a in args]
        host_kwargs = {k: tree_map_only(torch.Tensor, lazy_to_host, v) for k, v in kwargs.items()}
        result = run_on_host(op, *host_args, **host_kwargs)
        return tree_map_only(
            torch.Tensor, lambda t: constant(torch.ops._c10d_functional.wait_tensor(t)), result)
    return run


def _install_functional_routes() -> None:
    for schema in torch._C._jit_get_all_schemas():
        namespace, short = schema.name.split("::")
        if namespace not in ("_c10d_functional", "_c10d_functional_autograd"):
            continue
        op = getattr(getattr(getattr(torch.ops, namespace), short),
                     schema.overload_name or "default")
        special_ops.SPECIAL.setdefault(op, _functional_route(op))
    # funcol's wrapper of a result into an AsyncCollectiveTensor (waited on first use):
    # a lazy result is complete already.
    wrap = torch.ops._c10d_functional._wrap_tensor_autograd.default
    special_ops.SPECIAL.setdefault(wrap, lambda tensor: LazyTensor(value_of(tensor)))


def install() -> None:
    """Register the Functionalize-key kernels of every c10d op, and the tracer's routes
    of the functional collectives (idempotent)."""
    global _library
    if _library is not None or not torch.distributed.is_available():
        return
    library = torch.library.Library("c10d", "IMPL")
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("c10d::"):
            continue
        short = schema.name.split("::")[1]
        overload = schema.overload_name or "default"
        op = getattr(getattr(torch.ops.c10d, short), overload)
        key = short if not schema.overload_name else f"{short}.{schema.overload_name}"
        if short in WRITTEN:
            library.impl(key, _kernel(op, WRITTEN[short]), "Functionalize")
        elif any(a.type.isSubtypeOf(torch._C.ListType.ofTensors()) or
                 str(a.type).startswith("Tensor") for a in schema.arguments):
            library.impl(key, _unsupported(schema.name), "Functionalize")
    _library = library
    _install_functional_routes()
