"""Ops whose lowering gave wrong answers without an error, on both entry points: each
case names the root (a torch-mlir folder or lowering, a PyTorch decomposition) that
lowering/front/numerics.py or lowering/front/layers.py now works around. The fixes are
FX-level, before either target, so these run on the default target only (on the emulator
they passed, at 20-30 s each)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_no_fallback, assert_same

import lazymlir.dynamo  # noqa: F401  registers backend="lazymlir" in a source checkout

INT64_MIN = -2**63


def _both(fn, *inputs):
    """fn on the lazy device and through torch.compile equals eager, dtypes included."""
    expected = fn(*inputs)
    got = fn(*(x.to(DEVICE) for x in inputs))
    assert_same([t.cpu() for t in got], list(expected), "lazy device")
    torch._dynamo.reset()
    try:
        compiled = torch.compile(fn, backend="lazymlir", dynamic=False)(*inputs)
    finally:
        torch._dynamo.reset()
    assert_same(list(compiled), list(expected), "torch.compile")
    assert_no_fallback()


def test_nan_is_not_equal_to_itself():
    # torch-mlir folds eq.Tensor(x, x) to True; PyTorch's isfinite is (x == x) * (|x| != inf).
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), -0.0])
    _both(lambda x: (torch.isfinite(x), x == x, x != x, torch.isfinite(x.double())), x)


def test_threshold_backward_promotes_its_operands():
    # PyTorch's decomposition returned the gradient's dtype (int64), eager float32.
    g, x = torch.tensor([1, 2, 3]), torch.tensor([0.0, 1.0, 2.0])
    _both(lambda g, x: (torch.ops.aten.threshold_backward(g, x, 0.5),
                        torch.ops.aten.threshold_backward(x, g, 1)), g, x)


def test_integer_negation_is_exact_and_wraps():
    # torch-mlir negated integers through float32 and folded INT64_MIN // -1 to 0.
    x = torch.tensor([123456789012345678, INT64_MIN, 5, 2**62 + 1])

    def fn(x):
        made = torch.full((3,), INT64_MIN, device=x.device)
        return (-x, made // -1, torch.floor_divide(made, -1), x // -1, -(x.int()),
                torch.div(x, -1, rounding_mode="floor"))
    _both(fn, x)


def test_float16_instance_norm_statistics_accumulate_in_float32():
    # torch-mlir computed native_batch_norm's statistics in float16: 1.7 off (NaN for an
    # offset input) over 65536 elements.
    x = (torch.randn(1, 4, 65536, generator=torch.Generator().manual_seed(0)) * 10 + 50).half()
    expected = F.instance_norm(x)
    got = F.instance_norm(x.to(DEVICE)).cpu()
    assert got.dtype == torch.float16
    assert (got.float() - expected.float()).abs().max().item() <= 4e-3  # an ulp at 4
    assert_no_fallback()


def test_hardsigmoid_backward_uses_eagers_sixth():
    """Eager's kernel multiplies by the float32 1/6 in every dtype; torch-mlir's lowering
    used the exact sixth, 3e-8 off in float64 (a MobileNetV3 step drifted by it). Outside
    (-3, 3) the gradient is 0 even where it is inf or NaN."""
    x = torch.linspace(-5, 5, 41, dtype=torch.float64)
    grad = torch.randn(41, dtype=torch.float64)
    grad[1], grad[2] = float("inf"), float("nan")

    def fn(g, x):
        return torch.ops.aten.hardsigmoid_backward(g, x)

    expected = fn(grad, x)
    # Exactly: the old constant was within float64's usual tolerance (rtol 1e-7).
    torch.testing.assert_close(fn(grad.to(DEVICE), x.to(DEVICE)).cpu(), expected,
                               rtol=0, atol=0, equal_nan=True)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(fn, backend="lazymlir", dynamic=False)(grad, x)
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(compiled, expected, rtol=0, atol=0, equal_nan=True)
    assert_no_fallback()
