"""The random route: random ops recorded as Philox arithmetic with seed and offset inputs.

Each random op draws its counters from the session's generator state
(support/rng_state.py) while it is traced, and uploads `[seed, offset]` as a small
int64 tensor: a materialized value, so a graph input, not a constant. The op itself
becomes the integer and float ops of lowering/front/philox.py, recorded as any other
ops, so a step with dropout is still one graph, compiled once, whose numbers change
from step to step. `torch.manual_seed` rewinds the state (device.py), which makes runs
reproducible; the stream differs from CPU's Mersenne Twister.

dropout's mask is an output of `native_dropout` that autograd saves for the
backward, so forward and backward use the same mask. An op given an explicit
`generator=` (a CPU torch.Generator) keeps running eagerly on it, counted as a
fallback, as do randperm and multinomial.
"""

from __future__ import annotations

import math

import torch

from .. import session
from ..lowering.front import philox
from . import fallback
from .host_data import constant

aten = torch.ops.aten


def _seed_offset(counters: int):
    seed, offset = session.current().rng.reserve(counters)
    return constant(torch.tensor([seed, offset], dtype=torch.int64))


def _draw(shape) -> object:
    return _seed_offset(philox.counters(math.prod(shape)))


def _eager_if_generator(func):
    """Wrap a route: with an explicit `generator=` the op runs eagerly on that generator."""
    def route(f, args, kwargs):
        if kwargs.get("generator") is not None:
            return fallback.run_eagerly(f, args, kwargs, "an explicit torch.Generator")
        kwargs = {k: v for k, v in kwargs.items() if k != "generator"}
        return func(*args, **kwargs)
    return route


def _uniform(self, low=0.0, high=1.0):
    return philox.uniform(_draw(self.shape), list(self.shape), self.dtype, float(low),
                          float(high))


def _normal(self, mean=0.0, std=1.0):
    return philox.normal(_draw(self.shape), list(self.shape), self.dtype, float(mean),
                         float(std))


def _normal_tensor_float(mean, std=1.0):
    return philox.normal_tensor(_draw(mean.shape), mean, float(std), list(mean.shape),
                                mean.dtype)


def _normal_float_tensor(mean, std):
    return philox.normal_tensor(_draw(std.shape), float(mean), std, list(std.shape),
                                std.dtype)


def _normal_tensor_tensor(mean, std):
    shape = list(torch.broadcast_shapes(mean.shape, std.shape))
    return philox.normal_tensor(_draw(shape), mean, std, shape,
                                torch.promote_types(mean.dtype, std.dtype))


def _bernoulli(self):
    return philox.bernoulli(_draw(self.shape), self, list(self.shape), self.dtype)


def _bernoulli_p(self, p=0.5):
    return philox.bernoulli(_draw(self.shape), float(p), list(self.shape), self.dtype)


def _bernoulli_tensor(self, p):
    return philox.bernoulli(_draw(self.shape), p, list(self.shape), self.dtype)


def _native_dropout(input, p, train):
    if train is False:
        return (aten.clone.default(input),
                aten.ones_like.default(input, dtype=torch.bool))
    return philox.dropout(_draw(input.shape), input, float(p))


def _bounds(dtype: torch.dtype) -> tuple[int, int]:
    """random_()'s default range: [0, 2**mantissa] for floats, [0, max] for integers."""
    if dtype == torch.bool:
        return 0, 2
    if dtype.is_floating_point:
        return 0, (1 << (torch.finfo(dtype).nmant + 1)) + 1
    return 0, torch.iinfo(dtype).max + 1


def _randint_into(self, low: int, high: int):
    shape = list(self.shape)
    counters = philox.randint_counters(low, high, math.prod(shape))
    return philox.randint(_seed_offset(counters), low, high, shape, self.dtype)


def _random_from(self, low, high=None):
    return _randint_into(self, int(low), _bounds(self.dtype)[1] if high is None else int(high))


def _random_to(self, high):
    return _randint_into(self, 0, int(high))


def _random(self):
    return _randint_into(self, *_bounds(self.dtype))


def _exponential(self, lambd=1.0):
    return philox.exponential(_draw(self.shape), list(self.shape), self.dtype, float(lambd))


def _like(make):
    """A `*_like` factory: `make(template)` on an empty tensor of the asked dtype."""
    def route(self, *args, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):
        template = aten.empty.memory_format(list(self.shape), dtype=dtype or self.dtype,
                                            device=self.device)
        return make(template, *args)
    return route


def _randint_like(self, high, **kwargs):
    return _like(_random_to)(self, high, **kwargs)


def _randint_like_low(self, low, high, **kwargs):
    return _like(_random_from)(self, low, high, **kwargs)


ROUTES = {op: _eager_if_generator(fn) for op, fn in {
    aten.uniform.default: _uniform,
    aten.normal_functional.default: _normal,
    aten.normal.Tensor_float: _normal_tensor_float,
    aten.normal.float_Tensor: _normal_float_tensor,
    aten.normal.Tensor_Tensor: _normal_tensor_tensor,
    aten.bernoulli.default: _bernoulli,
    aten.bernoulli.p: _bernoulli_p,
    aten.bernoulli.Tensor: _bernoulli_tensor,
    aten.native_dropout.default: _native_dropout,
    getattr(aten.random, "from"): _random_from,  # "from" is a keyword
    aten.random.to: _random_to,
    aten.random.default: _random,
    aten.exponential.default: _exponential,
    aten.rand_like.default: _like(_uniform),
    aten.randn_like.default: _like(_normal),
    aten.randint_like.default: _randint_like,
    aten.randint_like.low_dtype: _randint_like_low,
}.items()}
