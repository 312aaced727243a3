"""graph.py's `graph_key`: the lazy device's cache key, computed without the document.

It must be equal for two traces exactly when their documents (`build_graph`) are:
anything that changes the compiled code changes the key. Tracing only, no compiles.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn as nn
from conftest import DEVICE

from lazymlir.lowering.front import fx_graph
from lazymlir.tracing.graph import build_graph, graph_key
from lazymlir.tracing import values


def _inner(*tensors):
    return [values.value_of(values.inner(t)) for t in tensors]


def _both(tensors, static_scalar_ops=frozenset()):
    """(graph_key's key, build_graph's document hash) of a trace, after checking that
    both give the same inputs and scalars."""
    values = _inner(*tensors)
    key, inputs, scalars, count = graph_key(values, "cpu", static_scalar_ops)
    graph, graph_inputs, graph_scalars = build_graph(values, static_scalar_ops)
    assert [id(v) for v in inputs] == [id(v) for v in graph_inputs]
    assert scalars == graph_scalars and count == len(graph["nodes"])
    return key, fx_graph.structural_hash(graph, "cpu")


def _programs():
    """Small traces, some structurally equal, some not (each call traces afresh)."""
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    return {
        "mul 0.5": lambda: [a.to(DEVICE) * 0.5],
        "mul 2.0 (lifted: same)": lambda: [a.to(DEVICE) * 2.0],
        "pow 0.0": lambda: [torch.pow(a.to(DEVICE), 0.0)],
        "pow -0.0": lambda: [torch.pow(a.to(DEVICE), -0.0)],
        "pow 2": lambda: [torch.pow(a.to(DEVICE), 2)],
        "pow 2.0": lambda: [torch.pow(a.to(DEVICE), 2.0)],
        "x+y": lambda: [a.to(DEVICE) + b.to(DEVICE)],
        "x+x": lambda: [(lambda x: x + x)(a.to(DEVICE))],
        "y+x": lambda: [(lambda x, y: y + x)(a.to(DEVICE), b.to(DEVICE)[:, :4])],
        "sum0": lambda: [a.to(DEVICE).sum(0)],
        "sum1": lambda: [a.to(DEVICE).sum(1)],
        "sum1 keepdim": lambda: [a.to(DEVICE).sum(1, keepdim=True)],
        "double": lambda: [a.double().to(DEVICE) * 0.5],
        "two outputs": lambda: (lambda x: [x * 0.5, x.sum(0)])(a.to(DEVICE)),
        "outputs swapped": lambda: (lambda x: [x.sum(0), x * 0.5])(a.to(DEVICE)),
        "mse (decomposed)": lambda: [nn.functional.mse_loss(a.to(DEVICE), b.to(DEVICE))],
        "l1 (decomposed)": lambda: [nn.functional.l1_loss(a.to(DEVICE), b.to(DEVICE))],
        "cat": lambda: [torch.cat([a.to(DEVICE), b.to(DEVICE)], 1)],
        "cat swapped": lambda: [(lambda x, y: torch.cat([y, x], 1))(a.to(DEVICE),
                                                                    b.to(DEVICE))],
    }


def test_key_equal_exactly_when_documents_are():
    results = {}
    for name, program in _programs().items():
        for _ in range(2):  # the second call hits the caches (shape entries, templates)
            key, document = _both(program())
            results.setdefault(name, set()).add((key, document))
    for name, pairs in results.items():
        assert len(pairs) == 1, name  # the same program, the same key both times
    for (n1, p1), (n2, p2) in itertools.combinations(results.items(), 2):
        (k1, d1), (k2, d2) = next(iter(p1)), next(iter(p2))
        assert (k1 == k2) == (d1 == d2), (n1, n2)
    assert results["mul 0.5"] == results["mul 2.0 (lifted: same)"]
    assert results["pow 0.0"] != results["pow -0.0"]


def test_static_scalar_ops_put_float_values_in_the_key():
    a = torch.randn(3).to(DEVICE)
    lifted = {_both([a * s])[0] for s in (0.5, 0.25)}
    constant = {_both([a * s], frozenset({"aten::mul"})) for s in (0.5, 0.25)}
    assert len(lifted) == 1
    assert len({key for key, _ in constant}) == 2 == len({doc for _, doc in constant})
