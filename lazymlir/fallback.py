"""Eager fallback for ops the compiler cannot lower, and the check that decides it.

An op runs eagerly (on CPU copies of its inputs, with PyTorch) when
- its output shape depends on data (nonzero, unique, masked_select...), which a
  static-shape graph cannot express, or its meta kernel is missing;
- it is a random op (the CPU generator keeps torch.manual_seed reproducible);
- or a probe finds that a one-op graph of it does not lower through the
  target's pipeline. Probes run once per (op, dtypes, ranks, scalar args).
Each fallback is counted as `aten::<op>` in the metrics and warned about once
per op, so a missing lowering is never silent. With LAZYMLIR_FALLBACK=error
nothing falls back: the compile error (with its reproducer) surfaces instead.
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import config, metrics

log = logging.getLogger("lazymlir.fallback")

_DATA_DEPENDENT = {
    "aten::nonzero", "aten::unique", "aten::_unique2", "aten::unique_consecutive",
    "aten::unique_dim", "aten::masked_select", "aten::argwhere", "aten::nonzero_static",
    "aten::repeat_interleave", "aten::equal", "aten::is_nonzero", "aten::allclose",
}
_RANDOM = {
    "aten::normal", "aten::uniform", "aten::bernoulli", "aten::exponential", "aten::random",
    "aten::randperm", "aten::multinomial", "aten::native_dropout", "aten::rand_like",
    "aten::randn_like", "aten::randint_like", "aten::cauchy", "aten::log_normal",
    "aten::geometric",
}

_probe_verdicts: dict[tuple, str | None] = {}
_warned: set[str] = set()


def op_name(func) -> str:
    return func._schema.name  # 'aten::add', without the overload


def must_run_eagerly(func, args, kwargs) -> bool:
    name = op_name(func)
    if name in _DATA_DEPENDENT or name in _RANDOM:
        return True
    if config.settings().fallback == "error":
        return False
    return probe(func, args, kwargs) is not None


def _signature(func, args, kwargs) -> tuple:
    from .lazy_tensor import LazyTensor

    def describe(x):
        if isinstance(x, torch.Tensor):
            return ("T", x.dim(), str(x.dtype))
        if isinstance(x, LazyTensor):
            return ("T", x.dim(), str(x.dtype))
        return repr(x)

    flat, _ = tree_flatten((args, kwargs))
    return (str(func), tuple(describe(x) for x in flat))


def probe(func, args, kwargs) -> str | None:
    """None when a one-op graph of `func` lowers for the active target, else the reason."""
    key = _signature(func, args, kwargs)
    if key in _probe_verdicts:
        return _probe_verdicts[key]
    from . import compiler
    from .sync import single_op_graph

    try:
        graph = single_op_graph(func, args, kwargs)
        verdict = compiler.check_lowerable(graph)
    except (NotImplementedError, RuntimeError, TypeError, ValueError) as error:
        # Meta kernels missing or raising (data-dependent shapes) land here too.
        verdict = f"{type(error).__name__}: {error}"
    _probe_verdicts[key] = verdict
    if verdict is not None:
        log.info("op %s falls back: %s", func, verdict.splitlines()[0] if verdict else "")
    return verdict


def run_eagerly(func, args, kwargs):
    """Run `func` with PyTorch on CPU copies of its lazy inputs; outputs become lazy data."""
    from .lazy_tensor import LazyTensor
    from .sync import to_cpu
    from .tracer import constant

    name = op_name(func)
    metrics.inc(name)
    metrics.inc("FallbackOps")
    if name not in _warned and config.settings().fallback == "warn":
        _warned.add(name)
        reason = _probe_verdicts.get(_signature(func, args, kwargs))
        why = f": {reason.splitlines()[0]}" if reason else ""
        warnings.warn(f"lazymlir: {name} has no lowering here and runs eagerly on CPU "
                      f"(counted as metrics '{name}'){why}", stacklevel=4)

    def to_host(x):
        if isinstance(x, LazyTensor):
            return to_cpu(x)
        if isinstance(x, torch.device) and x.type == "lazy_mlir":
            return torch.device("cpu")
        return x

    out = func(*tree_map(to_host, args), **tree_map(to_host, kwargs))
    return tree_map(lambda o: constant(o) if isinstance(o, torch.Tensor) else o, out)
