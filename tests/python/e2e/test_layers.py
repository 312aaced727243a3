"""The layers real CNNs use, forward and backward, on the lazy device and through
torch.compile(backend="lazymlir"), against eager, with no eager fallback: grouped and
depthwise convolution, average and adaptive pools, negative padding, upsampling,
embedding bags, and as_strided_scatter (lowering/front/layers.py).

Each test runs several configurations in one function, so each entry point compiles
one forward and one backward graph per test. Only the cheapest carry the `emulator` mark:
on the emulator's one-thread kernels a convolution test takes minutes (docs/known-issues.md
says what running them there by hand gave)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_no_fallback

import lazymlir
import lazymlir.dynamo  # noqa: F401  registers backend="lazymlir" in a source checkout

def _inputs(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


def _grads(fn, inputs, device, compiled, backward=True):
    leaves = [x.detach().clone().to(device).requires_grad_(backward) for x in inputs]
    run = torch.compile(fn, backend="lazymlir", dynamic=False) if compiled else fn
    outs = run(*leaves)
    outs = outs if isinstance(outs, (list, tuple)) else (outs,)
    if not backward:
        return [o.detach().cpu() for o in outs], []
    # Weights per element, so that every gradient position is told apart.
    loss = sum((o * torch.linspace(-1, 2, o.numel(), device=o.device).reshape(o.shape)).sum()
               for o in outs)
    loss.backward()
    return [o.detach().cpu() for o in outs], [x.grad.cpu() for x in leaves]


def check_both_entry_points(fn, inputs, rtol=1e-5, atol=1e-5, backward=True):
    """fn's outputs and (with `backward`) the gradients of its inputs match eager, on the
    lazy device and through torch.compile, and nothing fell back."""
    expected = _grads(fn, inputs, "cpu", compiled=False, backward=backward)
    for compiled in (False, True):
        lazymlir.metrics.reset()
        torch._dynamo.reset()
        got = _grads(fn, inputs, "cpu" if compiled else DEVICE, compiled, backward)
        where = "torch.compile" if compiled else "lazy device"
        for kind, g, e in zip(("output", "gradient"), got, expected):
            for i, (a, b) in enumerate(zip(g, e)):
                torch.testing.assert_close(a, b, rtol=rtol, atol=atol,
                                           msg=lambda m, w=where, k=kind, i=i: f"{w}, {k} {i}: {m}")
        assert_no_fallback()


def test_grouped_and_depthwise_convolutions():
    def fn(x, w_grouped, w_depthwise, w_multiplier, b, x1, w1):
        return (F.conv2d(x, w_grouped, groups=2, padding=1),
                F.conv2d(x, w_depthwise, b, groups=4, padding=1, stride=2),
                F.conv2d(x, w_multiplier, groups=4, stride=2, dilation=2, padding=2),
                F.conv1d(x1, w1, groups=3, stride=2))
    check_both_entry_points(fn, _inputs((2, 4, 7, 6), (6, 2, 3, 3), (4, 1, 3, 3),
                                        (8, 1, 3, 3), (4,), (2, 6, 9), (3, 2, 3)))


def test_average_and_adaptive_pools():
    def fn(x, x3):
        return (F.avg_pool2d(x, 2),
                F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                F.avg_pool2d(x, (3, 2), (1, 2), (1, 0), ceil_mode=True),
                F.avg_pool2d(x, 3, 2, 1, divisor_override=4),
                F.avg_pool2d(x3, 2, 1),
                F.adaptive_avg_pool2d(x, (3, 4)),
                F.adaptive_avg_pool2d(x, 1),
                F.adaptive_max_pool2d(x, (3, 4)),
                F.adaptive_max_pool2d(x3, 1))
    check_both_entry_points(fn, _inputs((2, 3, 7, 6), (3, 5, 4)))


@pytest.mark.emulator
def test_negative_padding():
    def fn(x):
        return (F.pad(x, (0, -1, 1, -2)), F.pad(x, (-2, -1), value=3.0),
                F.pad(x, (2, -3, -1, 0, 0, 1)))
    check_both_entry_points(fn, _inputs((2, 3, 5, 6)))


def test_as_strided_scatter():
    # AOTAutograd writes the gradient of a global pool over a permuted layer_norm
    # (ConvNeXt's head) with as_strided_scatter.
    def head(x, w):
        return F.adaptive_avg_pool2d(F.layer_norm(x.permute(0, 2, 3, 1), (4,), w)
                                     .permute(0, 3, 1, 2), 1)

    def views(x, src, src2):
        return (torch.as_strided_scatter(x, src, (2, 3), (1, 4), 1),   # transposed, offset
                torch.as_strided_scatter(x, src2, (2, 2, 2), (8, 1, 4), 2))
    check_both_entry_points(head, _inputs((2, 4, 3, 3), (4,)))
    check_both_entry_points(views, _inputs((4, 4), (2, 3), (2, 2, 2)))


def test_upsampling():
    def fn(x):
        return (F.interpolate(x, scale_factor=2, mode="bilinear"),
                F.interpolate(x, size=(7, 4), mode="bilinear", align_corners=True),
                F.interpolate(x, scale_factor=1.5, mode="bilinear"),
                F.interpolate(x, scale_factor=2, mode="nearest"),
                F.interpolate(x, size=(7, 4), mode="nearest"))
    check_both_entry_points(fn, _inputs((2, 3, 5, 3)))


def test_embedding_bags():
    # Every bag reads the same index tensor, and indices repeat within and across bags:
    # the weight gradient must add every share of a row (a scatter that overwrote would
    # keep one). Empty bags, padding, sample weights and a last offset included.
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0]), torch.tensor([0, 4, 4, 7])

    def fn(weight, sample_weights):
        i, o = indices.to(weight.device), offsets.to(weight.device)
        return (F.embedding_bag(i, weight, o, mode="sum", per_sample_weights=sample_weights),
                F.embedding_bag(i, weight, o, mode="mean", padding_idx=2),
                F.embedding_bag(i.reshape(2, 5), weight, mode="max"),
                F.embedding_bag(i, weight, o, mode="max", padding_idx=0),
                F.embedding_bag(i, weight, torch.tensor([0, 3, 10], device=i.device), mode="sum",
                                include_last_offset=True),
                F.embedding_bag(i, weight, o, mode="sum"))
    check_both_entry_points(fn, _inputs((10, 3), (10,)))


def test_embedding_bags_scaled_by_frequency():
    # scale_grad_by_freq: eager's CPU kernel divides a row's gradient by the count of
    # another index (lowering/front/embedding_bag.py's _eager_frequency); these indices
    # repeat unevenly (row 4 three times, 9 once), so that divisor differs from the
    # row's own count. Empty bags, padding, sample weights, a last offset, a 2-d input
    # (F.embedding_bag refuses the flag in max mode).
    indices, offsets = torch.tensor([4, 0, 9, 1, 4, 0, 1, 4, 7, 2]), torch.tensor([0, 3, 3, 6])

    def fn(weight, sample_weights):
        i, o = indices.to(weight.device), offsets.to(weight.device)
        return (F.embedding_bag(i, weight, o, mode="sum", scale_grad_by_freq=True),
                F.embedding_bag(i, weight, o, mode="mean", scale_grad_by_freq=True),
                F.embedding_bag(i, weight, o, mode="sum", scale_grad_by_freq=True,
                                per_sample_weights=sample_weights),
                F.embedding_bag(i, weight, o, mode="mean", scale_grad_by_freq=True,
                                padding_idx=4),
                F.embedding_bag(i, weight, o, mode="sum", scale_grad_by_freq=True,
                                padding_idx=0, per_sample_weights=sample_weights),
                F.embedding_bag(i, weight, torch.tensor([0, 2, 2, 10], device=i.device),
                                mode="mean", scale_grad_by_freq=True, include_last_offset=True),
                F.embedding_bag(i.reshape(2, 5), weight, mode="sum", scale_grad_by_freq=True))
    check_both_entry_points(fn, _inputs((10, 3), (10,)))
