"""The random route: random ops recorded as Philox arithmetic with seed and offset inputs.

Each random op draws its counters from the session's generator state
(support/rng_state.py) while it is traced, and uploads `[seed, offset]` as a small
int64 tensor: a materialized value, so a graph input, not a constant. The op itself
becomes the integer and float ops of lowering/front/philox.py (its `RANDOM_OPS`
table), recorded as any other ops, so a step with dropout is still one graph, compiled
once, whose numbers change from step to step. `torch.manual_seed` rewinds the state
(device.py), which makes runs reproducible; the stream differs from CPU's Mersenne
Twister.

dropout's mask is an output of `native_dropout` that autograd saves for the
backward, so forward and backward use the same mask. An op given an explicit
`generator=` (a CPU torch.Generator) keeps running eagerly on it, counted as a
fallback. randperm arrives in its out= form and rebinds `out`.
"""

from __future__ import annotations

import torch

from .. import session
from ..lowering.front import philox
from . import fallback
from .host_data import constant
from .values import set_value, value_of


def _route(counters, compute):
    def route(func, args, kwargs):
        if kwargs.get("generator") is not None:
            return fallback.run_eagerly(func, args, kwargs, "an explicit torch.Generator")
        kwargs = {k: v for k, v in kwargs.items() if k != "generator"}
        seed, offset = session.current().rng.reserve(counters(*args, **kwargs))
        seed_offset = constant(torch.tensor([seed, offset], dtype=torch.int64))
        return compute(seed_offset, *args, **kwargs)
    return route


def _randperm_out(func, args, kwargs):
    """randperm(n, device=lazy_mlir) reaches the tracer as its out= form: compute the
    permutation and rebind `out` to it (an eager run with a generator too: its result
    was lost)."""
    out = kwargs["out"]
    if kwargs.get("generator") is not None:
        result = fallback.run_eagerly(func, args, kwargs, "an explicit torch.Generator")
    else:
        n = int(args[0])
        seed, offset = session.current().rng.reserve(philox.counters(2 * n))
        seed_offset = constant(torch.tensor([seed, offset], dtype=torch.int64))
        result = philox.randperm(seed_offset, n, out.dtype)
    set_value(out, value_of(result))
    return out


ROUTES = {op: _route(*entry) for op, entry in philox.RANDOM_OPS.items()}
ROUTES[torch.ops.aten.randperm.generator_out] = _randperm_out
ROUTES[torch.ops.aten.randperm.out] = _randperm_out
