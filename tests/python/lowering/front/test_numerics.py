"""Edge-case numerics match eager PyTorch on the CPU (lowering/front/numerics.py).

Each case notes the value torch-mlir's plain lowering gives, and is compared with eager.
"""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, assert_no_fallback, assert_same, to_host

NAN = float("nan")


def lazy(fn, *inputs):
    return to_host(fn(*[x.to(DEVICE) for x in inputs]))


def check(fn, *inputs):
    assert_same(lazy(fn, *inputs), fn(*inputs))
    assert_no_fallback()


# float16 sum of 5000 ones gave 2048, bfloat16 256: eager accumulates in float32.
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["sum", "mean", "sum_dim", "cumsum", "norm"])
def test_half_reductions_accumulate_in_float32(dtype, op):
    fns = {"sum": lambda x: x.sum(), "mean": lambda x: x.mean(),
           "sum_dim": lambda x: x.reshape(2, 2500).sum(1), "cumsum": lambda x: x.cumsum(0)[-1:],
           "norm": lambda x: x.norm()}
    check(fns[op], torch.ones(5000, dtype=dtype))


# uint8 [200, 201, 200].sum() gave -167 (sign-extended); remainder, true
# division and prod were also computed on signed bytes.
@pytest.mark.parametrize("fn", [
    lambda a, b: a.sum(),
    lambda a, b: a.sum(dtype=torch.int64),
    lambda a, b: a.prod(),
    lambda a, b: a % b,
    lambda a, b: a / b,
    lambda a, b: a // b,
    lambda a, b: a % 7,
], ids=["sum", "sum_int64", "prod", "remainder", "div", "floor_divide", "remainder_scalar"])
def test_uint8_is_unsigned(fn):
    check(fn, torch.tensor([200, 201, 200], dtype=torch.uint8),
          torch.tensor([7, 3, 9], dtype=torch.uint8))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32])
def test_integer_sums_promote_to_int64(dtype):
    check(lambda x: x.sum(), torch.full((300,), torch.iinfo(dtype).max, dtype=dtype))


# 2^24 + 3 random floats: sequential accumulation was ~2e-5 off, blocked
# sums are within eager's rounding. The tolerance is tighter than conftest's.
@pytest.mark.parametrize("op", ["sum", "mean", "sum_dim0", "sum_keepdim"])
def test_long_float_sums_are_blocked(op):
    x = torch.rand((1 << 24) + 3, generator=torch.Generator().manual_seed(0))
    fns = {"sum": lambda t: t.sum(), "mean": lambda t: t.mean(),
           "sum_dim0": lambda t: t.sum(0), "sum_keepdim": lambda t: t.sum(0, keepdim=True)}
    actual, expected = lazy(fns[op], x), fns[op](x)
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=0)
    assert_no_fallback()


# Long float32 cumsum was 6e-5 off: eager accumulates it in double.
def test_long_cumsum():
    x = torch.rand(2, (1 << 23) + 1, generator=torch.Generator().manual_seed(4))
    actual, expected = lazy(lambda t: t.cumsum(1)[:, -2:], x), x.cumsum(1)[:, -2:]
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=0)
    assert_no_fallback()


def test_long_float_sum_2d():
    x = torch.rand(2, (1 << 23) + 5, generator=torch.Generator().manual_seed(1))
    actual, expected = lazy(lambda t: t.sum(), x), x.sum()
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=0)
    actual, expected = lazy(lambda t: t.sum(1), x), x.sum(1)
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=0)
    assert_no_fallback()


# layer_norm over 2^24 elements was 9e-5 off (eager 4e-7): its statistics are
# blocked sums too; the mean/rstd results keep their shapes.
def test_long_layer_norm():
    x = torch.rand(1 << 24, generator=torch.Generator().manual_seed(2)) + 1
    actual = lazy(lambda t: torch.nn.functional.layer_norm(t, t.shape), x)
    torch.testing.assert_close(actual, torch.nn.functional.layer_norm(x, x.shape),
                               rtol=0, atol=2e-6)
    x = torch.rand(3, 5, 1 << 13, generator=torch.Generator().manual_seed(3))
    w, b = torch.rand(5, 1 << 13), torch.rand(5, 1 << 13)
    check(lambda t, w, b: torch.ops.aten.native_layer_norm(t, [5, 1 << 13], w, b, 1e-5), x, w, b)


A = torch.tensor([1.0, NAN, 3.0, NAN, -1.0])
B = torch.tensor([NAN, 2.0, 1.0, NAN, 0.0])


# maximum/minimum/clamp returned the non-NaN operand; eager propagates NaN.
@pytest.mark.parametrize("fn", [
    lambda a, b: torch.maximum(a, b),
    lambda a, b: torch.minimum(a, b),
    lambda a, b: a.clamp(0.0, 2.0),
    lambda a, b: a.clamp(min=0.0),
    lambda a, b: a.clamp(max=0.0),
    lambda a, b: a.clamp(b - 1, b + 1),
    lambda a, b: a.relu(),
    lambda a, b: torch.nn.functional.hardtanh(a),
    lambda a, b: torch.nn.functional.relu6(a),
], ids=["maximum", "minimum", "clamp", "clamp_min", "clamp_max", "clamp_tensor", "relu",
        "hardtanh", "relu6"])
def test_nan_propagates(fn):
    check(fn, A, B)


# argmax/argmin/max(dim) ignored NaNs; eager returns the first NaN's index.
@pytest.mark.parametrize("fn", [
    lambda x: x.argmax(),
    lambda x: x.argmin(),
    lambda x: x.argmax(1),
    lambda x: x.argmin(0, keepdim=True),
    lambda x: tuple(x.max(1)),
    lambda x: tuple(x.min(0, keepdim=True)),
    lambda x: x.amax(1),
    lambda x: x.max(),
], ids=["argmax", "argmin", "argmax_dim", "argmin_keepdim", "max_dim", "min_dim", "amax",
        "max"])
def test_first_nan_wins(fn):
    check(fn, torch.tensor([[0.5, NAN, 3.0, NAN], [1.0, 2.0, -1.0, 0.0], [NAN, 7.0, 1.0, 2.0]]))


# Integer division and remainder: floor semantics, sign of the divisor, and
# INT64_MIN // -1 (eager wraps to INT64_MIN). int8 floor division and scalar
# forms fell back to eager (torch-mlir cannot lower them on bytes).
@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("fn", [
    lambda a, b: a // b,
    lambda a, b: a % b,
    lambda a, b: torch.fmod(a, b),
    lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    lambda a, b: a // -3,
    lambda a, b: a % 3,
    lambda a, b: a >> 1,
    lambda a, b: a << 2,
], ids=["floor_divide", "remainder", "fmod", "trunc_div", "floordiv_scalar", "rem_scalar",
        "shr", "shl"])
def test_integer_division(dtype, fn):
    check(fn, torch.tensor([-7, 7, -7, 7, 0, -8], dtype=dtype),
          torch.tensor([2, -2, -2, 2, 3, -3], dtype=dtype))


@pytest.mark.parametrize("fn", [lambda a: a // -1, lambda a: a % -1, lambda a: a * -1],
                         ids=["floordiv", "remainder", "mul"])
def test_int64_min(fn):
    check(fn, torch.full((3,), torch.iinfo(torch.int64).min))


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8])
@pytest.mark.parametrize("fn", [lambda a: a * 3, lambda a: a + 100, lambda a: 3 - a,
                                lambda a: a * a], ids=["mul", "add", "rsub", "square"])
def test_byte_arithmetic_wraps(dtype, fn):
    check(fn, torch.tensor([-7, 7, 100, -100], dtype=torch.int16).to(dtype))


def test_float_to_bfloat16_rounds_to_nearest_even_bit_for_bit():
    """The cpu target rounds in integer instructions (lowering/cpu/bf16_rounding.py):
    LLVM's `vcvtneps2bf16` (CPUs with AVX512-BF16) flushed 1e-40 to 0 (eager 9.18e-41),
    and elsewhere its `__truncsfbf2` call failed to load on GCC 12 systems. Ties, the
    largest finite values (-> inf), subnormals, signed zeros: eager's bits; NaN stays NaN."""
    ties = torch.tensor([1.00390625, 1.01171875, -1.00390625, 3.0078125], dtype=torch.float32)
    specials = torch.tensor([float("inf"), -float("inf"), 3.4e38, -3.4e38, 3.3895e38, -0.0,
                             0.0, 1e-40, -1e-40, 1.17549435e-38], dtype=torch.float32)
    random = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 1e3
    x = torch.cat([ties, specials, random])
    out = lazy(lambda t: (t * 1.0).bfloat16(), x)
    assert torch.equal(out.view(torch.int16), x.bfloat16().view(torch.int16))
    nan = lazy(lambda t: (t * 1.0).bfloat16(), torch.tensor([NAN, -NAN]))
    assert nan.isnan().all()
    assert_no_fallback()


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int16)


def test_bfloat16_arithmetic_keeps_subnormal_results():
    """bfloat16 products and sums are float ones rounded as eager rounds: LLVM's own
    rounding after each `bfloat` op (AVX512-BF16's `vcvtneps2bf16`) flushed subnormal
    results to zero."""
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(4096, generator=g) * 1e-20).bfloat16()
    b = (torch.randn(4096, generator=g) * 1e-19).bfloat16()
    assert (a * b).float().abs().lt(1.17549435e-38).sum() > 1000  # (subnormal products)
    for fn in (lambda s, t: s * t, lambda s, t: (s * t - t * s * 0.5) / (t * t + 1).sqrt()):
        assert torch.equal(_bits(lazy(fn, a, b)), _bits(fn(a, b)))
    assert_no_fallback()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_double_to_half_rounds_through_float(dtype):
    """Eager converts a double to float16 through float (`c10::Half` is built from a
    float); LLVM's `fptrunc double to half` rounds once: 2.5 float16 subnormal steps and
    a bit (1.4901161194e-07) gave 1.79e-07, eager 1.19e-07 (the float tie, to even)."""
    g = torch.Generator().manual_seed(0)
    ties = (torch.arange(1, 200, dtype=torch.float64) + 0.5) * 2.0**-24 * (1 + 1e-12)
    spread = torch.exp(torch.empty(4096, dtype=torch.float64).uniform_(-25, 12, generator=g))
    x = torch.cat([ties, -ties, spread, torch.tensor([65519.99, 65520.0, 1e-300])])
    out = lazy(lambda t: (t * 1.0).to(dtype), x)
    assert torch.equal(_bits(out), _bits(x.to(dtype)))
    assert_no_fallback()
