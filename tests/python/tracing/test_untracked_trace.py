"""Nodes and LazyValues are not tracked by Python's garbage collector (native_entry.cpp's
`new_object` says why). So they must be in no reference cycle of their own: a collection
could never free one. A step's trace must be freed once its graph has run and nothing
reads it (by reference counting, or by a collection where PyTorch's optimizer code
leaves a cycle of its own objects holding the old parameters' tensors)."""

from __future__ import annotations

import gc
import weakref

import torch
import torch.nn as nn
from conftest import DEVICE, assert_no_fallback

import lazymlir
from lazymlir.tracing import values


def _trace_values() -> list:
    """The LazyValues of the pending trace (the live pending values and what their
    nodes read), each once."""
    seen: dict = {}
    stack = list(values.live_pending_values())
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen[id(value)] = value
        if value.node is not None:
            for arg in (*value.node.args, *value.node.kwargs.values()):
                for item in arg if isinstance(arg, (list, tuple)) else (arg,):
                    if type(item) is values.LazyValue:
                        stack.append(item)
    return list(seen.values())


def test_a_steps_trace_is_freed_by_reference_counting():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3)).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 6).to(DEVICE), torch.randint(0, 3, (4,)).to(DEVICE)
    inputs = {id(values.value_of(values.inner(t))) for t in (x, y)}

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    step()
    lazymlir.mark_step()
    lazymlir.wait()
    gc.collect()
    gc.disable()
    try:
        loss = step()
        traced = [v for v in _trace_values() if id(v) not in inputs]
        assert len(traced) > 50  # forward, backward and AdamW (its backward ops recorded whole)
        assert not any(gc.is_tracked(v) or gc.is_tracked(v.node) for v in traced if v.node)
        refs = [weakref.ref(v) for v in traced]
        del traced
        lazymlir.mark_step()
        assert loss.item() > 0
        del loss
        for _ in range(3):
            step()
            lazymlir.mark_step()
        lazymlir.wait()
    finally:
        gc.enable()
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    assert alive == [], f"{len(alive)} of {len(refs)} values outlived their step"
    assert_no_fallback()
