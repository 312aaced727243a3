"""Tracing-side cases that gave wrong answers or raised where eager works: `out=` of
arange into a view, linspace/logspace with tensor ends, complex128 casts, tensor_split
with a tensor of indices, and a CPU backward run before lazymlir was imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch
from conftest import DEVICE, assert_same, compare_with_eager


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
    # Values only: their decomposition's float `sub` still falls back (torch-mlir import).
    def fn(device):
        start = torch.tensor(0.5, device=device)
        end = torch.tensor(2.0, device=device)
        return [torch.logspace(start, end, 5), torch.logspace(start, 3.0, 4, base=2.0),
                torch.linspace(1.0, end, 6), torch.linspace(start, end, 3)]

    expected = fn("cpu")
    assert_same([t.cpu() for t in fn(DEVICE)], expected)


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
