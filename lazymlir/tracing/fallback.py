"""Trace-time eager fallback: ops that cannot be recorded at all.

An op runs eagerly, right when it is called (on CPU copies of its inputs,
with PyTorch), when
- its output shape depends on data (nonzero, unique, masked_select...), which
  a static-shape graph cannot express, or it has no meta kernel to infer its
  output shape from;
- it is a random op random_ops.py does not compile (cauchy_, log_normal_...), or one
  given an explicit CPU `generator=`.
Ops that record fine but do not *lower* are handled at the sync point
instead (execution/partition.py: the graph is split around them), so tracing
never waits for the compiler. Every eager run is counted as `aten::<op>` and
warned about once (execution/fallback.py).
"""

from __future__ import annotations

import torch

from ..execution import fallback
from .host_data import constant, to_host
from .trace_state import state

DATA_DEPENDENT = frozenset({
    "aten::nonzero", "aten::unique", "aten::_unique2", "aten::unique_consecutive",
    "aten::unique_dim", "aten::masked_select", "aten::argwhere", "aten::nonzero_static",
    "aten::repeat_interleave", "aten::equal", "aten::is_nonzero", "aten::allclose",
})
RANDOM = frozenset({
    "aten::normal", "aten::uniform", "aten::bernoulli", "aten::exponential", "aten::random",
    "aten::randperm", "aten::multinomial", "aten::native_dropout", "aten::rand_like",
    "aten::randn_like", "aten::randint_like", "aten::cauchy", "aten::log_normal",
    "aten::geometric",
})

# What meta-kernel shape inference raises for "cannot be known without data".
NO_META = (NotImplementedError, torch._subclasses.fake_tensor.DynamicOutputShapeException,
           torch._subclasses.fake_tensor.DataDependentOutputException)


def _custom_op_without_fake(name: str) -> bool:
    """A `torch.library.custom_op` given no fake implementation: its meta kernel raises
    (PyTorch's "There was no fake impl registered") instead of naming its outputs."""
    if name.startswith(("aten::", "prims::")):
        return False
    try:
        opdef = torch._library.custom_ops._maybe_get_opdef(name)
    except Exception:  # noqa: BLE001  a PyTorch without this registry: meta inference decides
        return False
    return opdef is not None and getattr(opdef, "_abstract_fn", True) is None


def always_eager(func) -> str | None:
    """Why `func` must run eagerly whatever its arguments, or None."""
    name = func._schema.name
    if name in DATA_DEPENDENT:
        return "its output shape depends on the data"
    if _custom_op_without_fake(name):
        return ("a custom op without a fake implementation cannot be traced (give it one "
                "with @op.register_fake to compile it)")
    # Functionalization turns normal_ into normal_functional (others keep their names).
    if name.removesuffix("_functional") in RANDOM:
        return "random ops use the CPU generator (torch.manual_seed)"
    return None


def run_eagerly(func, args, kwargs, reason: str | None):
    """Run `func` with PyTorch on host copies of its inputs; outputs become lazy data."""
    state.impure += 1
    fallback.count(func._schema.name, reason)
    def host(value):
        return fallback.kernel_input(to_host(value))

    flat_args = [_map(host, a) for a in args]
    flat_kwargs = {k: _map(host, v) for k, v in kwargs.items()}
    out = func(*flat_args, **flat_kwargs)
    return _map(lambda o: constant(o) if isinstance(o, torch.Tensor) else o, out)


def _map(fn, value):
    if isinstance(value, (list, tuple)):
        return type(value)(_map(fn, v) for v in value)
    return fn(value)
