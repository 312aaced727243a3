"""Tracing-side cases that gave wrong answers or raised where eager works: `out=` of
arange into a view, linspace/logspace with tensor ends, complex128 casts, tensor_split
with a tensor of indices, a CPU backward run before lazymlir was imported, prims view
ops, and one_hot's range check under torch.compile."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import DEVICE, assert_no_fallback, assert_same, compare_with_eager

import lazymlir.dynamo  # noqa: F401  registers backend="lazymlir" in a source checkout


def test_arange_out_keeps_the_shape_of_out(no_fallback):
    def fn(device):
        out = torch.empty(3, 4, device=device)
        result = torch.arange(12.0, out=out)
        ints = torch.empty(12, dtype=torch.int64, device=device).view(3, 4)
        torch.arange(0, 12, 1, out=ints)
        return result, out, ints

    expected = fn("cpu")
    actual = fn(DEVICE)
    assert_same([t.cpu() for t in actual], list(expected))


def test_linspace_and_logspace_with_tensor_ends():
    # Their decomposition's `sub(end, ...)` with a float `end` did not import and ran
    # with eager fallback (lowering/front/number_operands.py).
    def fn(device):
        start = torch.tensor(0.5, device=device)
        end = torch.tensor(2.0, device=device)
        return [torch.logspace(start, end, 5), torch.logspace(start, 3.0, 4, base=2.0),
                torch.linspace(1.0, end, 6), torch.linspace(start, end, 3)]

    expected = fn("cpu")
    assert_same([t.cpu() for t in fn(DEVICE)], expected)
    assert_no_fallback()


def test_complex128_casts():
    x = torch.tensor([1.0 + 1e-12, -2.5, 3.0], dtype=torch.float64)
    compare_with_eager(lambda t: t.to(torch.complex128), x)
    # Values only: complex128 arithmetic falls back where torch-mlir's lowering crashes.


def test_tensor_split_with_a_tensor_of_indices(no_fallback):
    x = torch.arange(10.0)
    indices = torch.tensor([2, 5])  # a host tensor, as eager requires on any device
    expected = torch.tensor_split(x, indices)
    actual = torch.tensor_split(x.to(DEVICE), indices)
    assert_same([t.cpu() for t in actual], list(expected))


BACKWARD_BEFORE_IMPORT = textwrap.dedent("""
    import torch
    w = torch.randn(3, requires_grad=True)
    (w * 2).sum().backward()          # starts the autograd engine: no lazy_mlir yet
    import lazymlir
    x = torch.randn(3)
    xl = x.to("lazy_mlir").requires_grad_()
    (xl * xl).sum().backward()
    assert xl.grad.shape == (3,)  # backward ran (its values: any lazy test's business)
    print("OK")
""")


def test_backward_after_a_cpu_backward_before_import(tmp_path):
    script = tmp_path / "backward_first.py"
    script.write_text(BACKWARD_BEFORE_IMPORT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stderr[-3000:]


def _prims_views(x):
    p = torch.ops.prims
    return [p.squeeze(x, [1]) * 2, p.view_of(x) + 1, p.split_dim(x, 0, 2) - 1,
            p.collapse_view(x, 0, 2) * 3]


def test_prims_view_ops_lazy_and_compiled(no_fallback):
    x = torch.randn(4, 1, 3)
    expected = _prims_views(x)
    assert_same([t.cpu() for t in _prims_views(x.to(DEVICE))], expected)
    torch._dynamo.reset()
    try:
        assert_same(torch.compile(_prims_views, backend="lazymlir", dynamic=False)(x), expected)
    finally:
        torch._dynamo.reset()


def test_one_hot_compiled_checks_its_range(no_fallback):
    torch._dynamo.reset()
    try:
        one_hot = torch.compile(lambda x: torch.nn.functional.one_hot(x, 5),
                                backend="lazymlir", dynamic=False)
        x = torch.tensor([0, 3, 1, 4])
        assert_same(one_hot(x), torch.nn.functional.one_hot(x, 5))
        with pytest.raises(RuntimeError, match="smaller than num_classes"):
            one_hot(torch.tensor([0, 7, 1, 2]))
    finally:
        torch._dynamo.reset()
