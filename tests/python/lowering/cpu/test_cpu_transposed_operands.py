"""Transposed contraction operands on the cpu target (lowering/cpu/transposed_operands.py,
the schedule's A^T kernel in schedule_contraction.py): which matmuls are rewritten, and
their values against eager for odd and tiled sizes, in every float dtype, batched."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, assert_no_fallback
from mlir import ir

from lazymlir.lowering.cpu import transposed_operands
from lazymlir.lowering.mlir_runner import UPSTREAM, walk


def _module(body: str, args: str, result: str) -> str:
    return (f"func.func @main({args}) -> {result} {{\n"
            f"  %zero = arith.constant 0.000000e+00 : f32\n{body}\n}}\n")


def _mm(a: str, b: str, m: int, n: int, k: int, transpose: str) -> str:
    """A matmul of m x k by k x n whose A or B operand is made by a transpose."""
    shape_a, shape_b = (f"{k}x{m}", f"{k}x{n}") if transpose == "a" else (f"{m}x{k}", f"{n}x{k}")
    t_in, t_out = (shape_a, f"{m}x{k}") if transpose == "a" else (shape_b, f"{k}x{n}")
    operands = ("%t, %b", f"tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>") if transpose == "a" \
        else ("%a, %t", f"tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>")
    source = "%a" if transpose == "a" else "%b"
    body = (f"  %e = tensor.empty() : tensor<{t_out}xf32>\n"
            f"  %t = linalg.transpose ins({source} : tensor<{t_in}xf32>) "
            f"outs(%e : tensor<{t_out}xf32>) permutation = [1, 0]\n"
            f"  %o = tensor.empty() : tensor<{m}x{n}xf32>\n"
            f"  %f = linalg.fill ins(%zero : f32) outs(%o : tensor<{m}x{n}xf32>) "
            f"-> tensor<{m}x{n}xf32>\n"
            f"  %r = linalg.matmul ins({operands[0]} : {operands[1]}) "
            f"outs(%f : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>\n"
            f"  return %r : tensor<{m}x{n}xf32>")
    return _module(body, f"%a: tensor<{shape_a}xf32>, %b: tensor<{shape_b}xf32>",
                   f"tensor<{m}x{n}xf32>")


def _folded(text: str) -> tuple[int, list[str]]:
    with UPSTREAM.context():
        module = ir.Module.parse(text)
        changed = transposed_operands.fold_transposes(module)
        module.operation.verify()
        linalg = [op.name for op in walk(module.operation,
                                         skip=lambda op: op.name.startswith("linalg."))]
        return changed, [name for name in linalg if name.startswith("linalg.")]


def test_a_transposed_operand_is_read_in_place():
    changed, ops = _folded(_mm("a", "b", 512, 256, 64, transpose="a"))
    assert changed == 1
    assert ops == ["linalg.fill", "linalg.matmul"]  # the copy of A is gone


def test_a_small_batch_times_a_transposed_weight_transposes_the_small_matrices():
    # x (64 x 256) @ W.t() (W: 512 x 256): x and the result are copied, not W
    changed, ops = _folded(_mm("a", "b", 64, 512, 256, transpose="b"))
    assert changed == 1
    assert ops == ["linalg.transpose", "linalg.fill", "linalg.matmul", "linalg.transpose"]


@pytest.mark.parametrize("m,n,k", [(512, 128, 128),  # many rows: W is the smaller copy
                                   (64, 5, 256)])    # N has no register tile when swapped
def test_other_transposed_weights_keep_their_copy(m, n, k):
    changed, ops = _folded(_mm("a", "b", m, n, k, transpose="b"))
    assert changed == 0
    assert ops == ["linalg.transpose", "linalg.fill", "linalg.matmul"]


def test_an_a_transpose_the_schedule_would_not_tile_keeps_its_copy():
    changed, _ = _folded(_mm("a", "b", 7, 13, 5, transpose="a"))  # no register tile
    assert changed == 0


CASES = [
    # (name, fn, shapes): A^T, B^T, both; batched; odd sizes and the schedule's tiles
    ("a_t", lambda a, b: a.t() @ b, [(64, 512), (64, 256)]),
    ("a_t_odd", lambda a, b: a.t() @ b, [(13, 7), (13, 9)]),
    ("b_t_small_batch", lambda a, b: a @ b.t(), [(64, 256), (512, 256)]),
    ("b_t_odd", lambda a, b: a @ b.t(), [(5, 11), (9, 11)]),
    ("b_t_many_rows", lambda a, b: a @ b.t(), [(256, 64), (32, 64)]),
    ("a_t_b_t", lambda a, b: a.t() @ b.t(), [(64, 32), (96, 64)]),
    ("bmm_a_t", lambda a, b: a.mT @ b, [(3, 16, 32), (3, 16, 64)]),
    ("bmm_a_t_odd", lambda a, b: a.mT @ b, [(2, 7, 5), (2, 7, 3)]),
    ("bmm_b_t", lambda a, b: a @ b.mT, [(3, 16, 32), (3, 64, 32)]),
]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fn,shapes", [pytest.param(f, s, id=n) for n, f, s in CASES])
def test_transposed_matmuls_match_eager(fn, shapes, dtype):
    g = torch.Generator().manual_seed(len(shapes) + sum(sum(s) for s in shapes))
    inputs = [torch.randn(*s, generator=g).to(dtype) for s in shapes]
    expected = fn(*inputs)
    actual = fn(*[x.to(DEVICE) for x in inputs]).cpu()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    # Sums of up to 512 products: eager's blocking orders them differently.
    tolerance = {torch.float32: 1e-4, torch.float64: 1e-10}.get(dtype)
    if tolerance is None:
        torch.testing.assert_close(actual, expected)  # the half types' defaults
    else:
        torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance)
    assert_no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_linear_with_a_small_batch_matches_eager(dtype):
    """`F.linear` on 64 rows (the swapped matmul, then the bias). Half types: the bias
    is added to the product rounded to the dtype, where eager rounds once (as before
    these rewrites: docs/known-issues.md)."""
    g = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(*s, generator=g).to(dtype) for s in [(64, 256), (512, 256), (512,)])
    actual = torch.nn.functional.linear(x.to(DEVICE), w.to(DEVICE), b.to(DEVICE)).cpu()
    torch.testing.assert_close(actual, torch.nn.functional.linear(x, w, b), rtol=1e-4, atol=1e-4)
    assert_no_fallback()


def test_mlp_training_step_matches_eager():
    """The step whose weights and gradients these rewrites are for: 64 x 256 -> 512
    -> ReLU -> 256, MSE, SGD; three steps, weights compared after each."""
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256))
    lazy = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 256))
    lazy.load_state_dict(eager.state_dict())
    lazy.to(DEVICE)
    opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (eager, lazy)]
    x, y = torch.randn(64, 256), torch.randn(64, 256)
    for _ in range(3):
        for model, opt, device in ((eager, opts[0], "cpu"), (lazy, opts[1], DEVICE)):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
        for (name, p), q in zip(eager.named_parameters(), lazy.parameters()):
            torch.testing.assert_close(q.cpu(), p, rtol=1e-5, atol=1e-5, msg=name)
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert_no_fallback()
