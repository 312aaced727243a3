"""Random short programs on lazy_mlir against eager CPU.

Hypothesis builds a program: a few input tensors (shapes that broadcast or not,
float32/int64/bool) and a list of steps drawn from elementwise ops, reductions,
views, in-place ops on views (which write through to their base), dtype
conversions and indexing. The program runs eagerly on CPU first; steps eager
rejects (a shape mismatch, an in-place op on an expanded view...) are dropped,
and exactly the remaining steps run on lazy_mlir. Every tensor of the final pool
(inputs included: in-place ops on views mutate them) must match eager in shape,
dtype and values.

CI runs a fixed, derandomized budget (`FUZZ_EXAMPLES`, each a new graph to
compile: ~1-2 s apiece); `LAZYMLIR_FUZZ_EXAMPLES=500` runs more, with fresh
random programs unless `LAZYMLIR_FUZZ_SEED` is set.
"""

from __future__ import annotations

import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lazymlir
from conftest import DEVICE, assert_same

FUZZ_EXAMPLES = 20
_ON_DEMAND = os.environ.get("LAZYMLIR_FUZZ_EXAMPLES")

SHAPES = [(3, 4), (1, 4), (3, 1), (4,), (2, 3, 4), ()]
DTYPES = [torch.float32, torch.int64, torch.bool]
OPS = ["add", "sub", "mul", "div", "maximum", "where", "neg", "abs", "exp", "relu", "tanh",
       "sum_dim", "mean_dim", "amax_dim", "sum_all", "cumsum", "transpose", "reshape",
       "narrow", "expand", "select", "to_float", "to_long", "gt", "inplace_add_view",
       "inplace_mul_narrow", "inplace_fill_select", "index", "index_select", "clamp"]

step_strategy = st.tuples(st.sampled_from(OPS), st.integers(0, 7), st.integers(0, 7),
                          st.integers(-2, 3))
program_strategy = st.tuples(
    st.lists(st.tuples(st.sampled_from(SHAPES), st.sampled_from(DTYPES)), min_size=1,
             max_size=3),
    st.lists(step_strategy, min_size=1, max_size=8),
    st.integers(0, 2**16))


def make_inputs(specs, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tensors = []
    for shape, dtype in specs:
        if dtype == torch.float32:
            tensors.append(torch.randn(shape, generator=g) * 2)
        elif dtype == torch.int64:
            tensors.append(torch.randint(-5, 6, shape, generator=g))
        else:
            tensors.append(torch.randint(0, 2, shape, generator=g).bool())
    return tensors


def _dim(x: torch.Tensor, p: int) -> int:
    return p % x.dim() if x.dim() else 0


def apply(step, pool: list[torch.Tensor]):
    """One step on the pool; returns a new tensor, or None for an in-place step."""
    op, a, b, p = step
    x, y = pool[a % len(pool)], pool[b % len(pool)]
    index = torch.tensor([p % 2, 0, -1]).to(x.device)  # in range for any dim of size >= 2
    binary = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
              "maximum": torch.maximum, "gt": torch.gt}
    unary = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "relu": torch.relu,
             "tanh": torch.tanh}
    if op in binary:
        return binary[op](x, y)
    if op in unary:
        return unary[op](x)
    if op == "where":
        return torch.where(x > 0, x, y)
    if op == "clamp":
        return x.clamp(min=p - 1, max=p + 1)
    if op == "sum_dim":
        return x.sum(_dim(x, p), keepdim=p > 0)
    if op == "mean_dim":
        return x.mean(_dim(x, p))
    if op == "amax_dim":
        return x.amax(_dim(x, p))
    if op == "sum_all":
        return x.sum()
    if op == "cumsum":
        return x.cumsum(_dim(x, p))
    if op == "transpose":
        return x.transpose(0, -1)
    if op == "reshape":
        return x.reshape(-1)
    if op == "narrow":
        return x.narrow(_dim(x, p), 1, x.shape[_dim(x, p)] - 1)
    if op == "expand":
        return x.unsqueeze(0).expand(2, *x.shape)
    if op == "select":
        return x.select(_dim(x, p), -1)
    if op == "to_float":
        return x.float()
    if op == "to_long":
        return x.long()
    if op == "inplace_add_view":  # writes through a transposed view into x
        x.transpose(0, -1).add_(y if p > 0 else 1)
        return None
    if op == "inplace_mul_narrow":  # a narrowed view of x, then x itself is read later
        x.narrow(_dim(x, p), 0, 1).mul_(p)
        return None
    if op == "inplace_fill_select":
        x.select(_dim(x, p), 0).fill_(p)
        return None
    if op == "index":
        return x[index]
    if op == "index_select":
        return x.index_select(_dim(x, p), index)
    raise AssertionError(op)


def run(program, pool: list[torch.Tensor], applied: list[int] | None) -> list[int]:
    """Apply the program's steps to `pool` (in place). Eager (`applied` None): skip the
    steps eager rejects and return the ones it ran; lazy: run exactly `applied`."""
    ran = []
    for i, step in enumerate(program):
        if applied is not None and i not in applied:
            continue
        try:
            out = apply(step, pool)
        except (RuntimeError, TypeError, ValueError, IndexError):
            if applied is not None:
                raise
            continue
        ran.append(i)
        if out is not None:
            pool.append(out)
    return ran


def check_program(specs, program, seed: int) -> None:
    inputs = make_inputs(specs, seed)
    eager_pool = [x.clone() for x in inputs]
    applied = run(program, eager_pool, None)
    lazy_pool = [x.to(DEVICE) for x in inputs]
    run(program, lazy_pool, applied)
    lazymlir.mark_step()  # the whole program as one graph
    assert len(lazy_pool) == len(eager_pool)
    for i, (lazy, eager) in enumerate(zip(lazy_pool, eager_pool)):
        assert_same(lazy.cpu(), eager, f"pool[{i}] of {[program[k] for k in applied]}")


_SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), database=None,
                 print_blob=True)
if _ON_DEMAND:
    _SETTINGS.update(max_examples=int(_ON_DEMAND),
                     derandomize="LAZYMLIR_FUZZ_SEED" not in os.environ)
else:
    _SETTINGS.update(max_examples=FUZZ_EXAMPLES, derandomize=True)


@settings(**_SETTINGS)
@given(program_strategy)
def test_random_programs_match_eager(case):
    specs, program, seed = case
    check_program(specs, program, seed)
