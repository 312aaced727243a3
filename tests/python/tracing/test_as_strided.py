"""`as_strided` addresses the storage under its input, as eager's does: on views
(transpose, permute, movedim, slices with offsets, select, narrow, diagonal, step
slices, unfold), on channels_last values, inputs and parameters; on the lazy device
and through torch.compile, all cases in one graph per entry point."""

from __future__ import annotations

import torch
from conftest import DEVICE, assert_no_fallback, assert_same
from torch import nn

import lazymlir
import lazymlir.dynamo  # noqa: F401  registers backend="lazymlir" in a source checkout


def _cases(x, image):
    """x: (6, 8) contiguous; image: (1, 2, 3, 8), channels_last in the caller's hands."""
    return [
        x.as_strided((3, 3), (2, 1), 1),
        x.t().as_strided((3, 3), (2, 1), 1),
        x.reshape(2, 3, 8).permute(2, 0, 1).as_strided((4, 4), (1, 4), 2),
        x.reshape(2, 3, 8).movedim(2, 0).as_strided((4, 2), (3, 8)),
        x.transpose(0, 1).as_strided((2, 5), (6, 1)),
        x[2:, 1:].as_strided((2, 2), (3, 1), 1),
        x[2:, 1:].as_strided((2, 2), (3, 1)),  # no offset: the view's own (17)
        x[3].as_strided((2, 2), (2, 1), 1),
        x.narrow(1, 2, 3).as_strided((2, 3), (8, 1), 0),
        x.diagonal().as_strided((3,), (1,), 0),
        x[::2, ::3].as_strided((2, 2), (5, 1), 3),
        x.reshape(-1).unfold(0, 4, 2).as_strided((3, 2), (1, 3), 0),
        x.reshape(1, 2, 3, 8).contiguous(memory_format=torch.channels_last)
         .as_strided((2, 3), (1, 2), 0),
        image.as_strided((2, 3), (1, 2), 1),
        (image * 2).as_strided((4,), (1,)),  # a computed value is contiguous again
    ]


def _inputs():
    x = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    image = torch.arange(48, dtype=torch.float32).reshape(1, 2, 3, 8) \
        .contiguous(memory_format=torch.channels_last)
    return x, image


def test_as_strided_on_views_and_channels_last_lazy():
    x, image = _inputs()
    expected = _cases(x, image)
    actual = _cases(x.to(DEVICE), image.to(DEVICE))
    assert_same([a.cpu() for a in actual], expected)
    assert_no_fallback()


def test_as_strided_on_views_and_channels_last_compiled():
    x, image = _inputs()
    torch._dynamo.reset()
    try:
        actual = torch.compile(_cases, backend="lazymlir", dynamic=False)(x, image)
    finally:
        torch._dynamo.reset()
    assert_same(actual, _cases(x, image))
    assert_no_fallback()


def test_as_strided_on_a_channels_last_parameter():
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 3, 2).to(memory_format=torch.channels_last)
    expected = conv.weight.detach().as_strided((3, 4), (1, 3), 2)
    lazy = conv.to(DEVICE)
    actual = lazy.weight.detach().as_strided((3, 4), (1, 3), 2)
    assert_same(actual.cpu(), expected)
    assert_no_fallback()
