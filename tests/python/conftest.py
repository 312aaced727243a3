"""Shared fixtures and helpers for the lazy_mlir Python tests."""

from __future__ import annotations

import pytest
import torch

import lazymlir

DEVICE = "lazy_mlir"


@pytest.fixture(autouse=True)
def _reset_metrics():
    """Every test starts with zeroed counters."""
    lazymlir.metrics.reset()
    yield


def assert_no_fallback() -> None:
    """No op ran with eager fallback since the last metrics reset."""
    counters = lazymlir.metrics.counters()
    assert counters.get("FallbackOps", 0) == 0, counters
    assert lazymlir.metrics.fallback_ops() == {}, lazymlir.metrics.fallback_ops()


def tolerances(dtype: torch.dtype) -> dict:
    if dtype.is_floating_point or dtype.is_complex:
        if dtype == torch.float64:
            return {"rtol": 1e-7, "atol": 1e-7}
        return {"rtol": 1e-5, "atol": 1e-5}
    return {"rtol": 0, "atol": 0}  # ints and bools: exact


def to_lazy(x):
    if isinstance(x, torch.Tensor):
        return x.to(DEVICE)
    if isinstance(x, (list, tuple)):
        return type(x)(to_lazy(v) for v in x)
    if isinstance(x, dict):
        return {k: to_lazy(v) for k, v in x.items()}
    return x


def to_host(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_host(v) for v in x)
    if isinstance(x, dict):
        return {k: to_host(v) for k, v in x.items()}
    return x


def assert_same(actual, expected, what: str = "result") -> None:
    """Structure, shape, dtype and (dtype-aware) values of `actual` match `expected`."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what}: {type(actual)}"
        assert actual.device.type == "cpu", f"{what}: on {actual.device}"
        assert actual.dtype == expected.dtype, f"{what}: {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{what}: {actual.shape} != {expected.shape}"
        torch.testing.assert_close(actual, expected, equal_nan=True, **tolerances(expected.dtype),
                                   msg=lambda m: f"{what}: {m}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{what}: {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{what}[{i}]")
    else:
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"


def compare_with_eager(fn, *inputs, check_inputs: bool = True):
    """Run `fn` on CPU eager and on lazy_mlir (inputs moved with .to, results .cpu()).

    In-place effects on the inputs are compared too (when `check_inputs`).
    Returns the lazy results, on the CPU.
    """
    eager_inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    expected = fn(*eager_inputs)
    lazy_inputs = [to_lazy(x) for x in inputs]
    actual = to_host(fn(*lazy_inputs))
    assert_same(actual, expected)
    if check_inputs:
        for i, (lz, ea) in enumerate(zip(lazy_inputs, eager_inputs)):
            if isinstance(ea, torch.Tensor):
                assert_same(lz.cpu(), ea, f"input {i} after the call")
    return actual


def compare_factory(fn):
    """`fn(device)` on "cpu" and on lazy_mlir give the same tensors."""
    expected = fn("cpu")
    actual = to_host(fn(DEVICE))
    assert_same(actual, expected)
    return actual


@pytest.fixture
def no_fallback():
    """Use in a test to assert, at its end, that nothing fell back to eager."""
    yield
    assert_no_fallback()
