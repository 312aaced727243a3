"""Decompositions of the layer ops real CNNs use that torch-mlir lowers wrongly or not at all.

Part of lowering.front.decompositions' table, so both entry points apply them. Each is
written with ops torch-mlir lowers on both targets (convolutions, matmuls, slices,
elementwise ops, gathers) and, where the op's windows are irregular, with 0/1
"window membership" matrices built from `arange` in the graph: shape-only values, so
the lazy device's decomposition templates still capture them.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _spatial(values, n: int) -> list[int]:
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    return values * n if len(values) == 1 else values


def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                         transposed, output_padding, groups, output_mask):
    """The gradients of a grouped (or depthwise) convolution. torch-mlir's own
    decomposition builds the weight gradient as one `conv_ngchw_gfchw` whose operand
    shapes disagree when groups > 1; here each gradient is an ordinary grouped
    convolution (which lowers): the input gradient a transposed one written as a forward
    convolution (torch-mlir's grouped transposed convolution fails too), the weight
    gradient one whose batch is the input channels of a group and whose channels are
    (group, batch) pairs. Ungrouped and transposed convolutions keep torch-mlir's
    lowering (NotImplemented)."""
    if groups == 1 or transposed:
        return NotImplemented
    n = input.dim() - 2
    stride, padding, dilation = (_spatial(v, n) for v in (stride, padding, dilation))
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_input = _transposed_convolution(grad_output, weight, input.shape[2:], stride,
                                             padding, dilation, groups)
    if output_mask[1]:
        batch, channels = input.shape[:2]
        per_group, out_channels = channels // groups, grad_output.shape[1]
        spatial, out_spatial = list(input.shape[2:]), list(grad_output.shape[2:])
        # [N, G*Cg, *S] -> [Cg, G*N, *S]: batch = a group's input channels.
        x = input.reshape([batch, groups, per_group] + spatial).transpose(0, 2)
        x = x.reshape([per_group, groups * batch] + spatial)
        # [N, G*Og, *So] -> [G*Og, N, *So]: per group, Og filters over that group's N images.
        g = grad_output.transpose(0, 1)
        # Stride and dilation trade places: a filter tap k reads input k*d + o*s.
        w = aten.convolution(x, g, None, dilation, padding, stride, False, [0] * n, groups)
        for i, k in enumerate(weight.shape[2:]):  # rows past the kernel: the floor division
            w = w.narrow(2 + i, 0, k)
        grad_weight = w.transpose(0, 1).reshape(out_channels, per_group, *weight.shape[2:])
    if output_mask[2]:
        grad_bias = grad_output.sum([0] + list(range(2, grad_output.dim())))
    return grad_input, grad_weight, grad_bias


def _transposed_convolution(x, weight, size, stride, padding, dilation, groups):
    """The transposed convolution of `x` by `weight` (a forward convolution's filters,
    [G*O, C, *K]) that gives spatial `size`, as a forward convolution: zeros between
    x's elements (stride), borders of d*(k-1)-p (plus the rows the forward's floor
    division dropped at the end), filters flipped and their channels swapped."""
    n = x.dim() - 2
    kernel = list(weight.shape[2:])
    if any(s > 1 for s in stride):
        batch, channels, rows = x.shape[0], x.shape[1], list(x.shape[2:])
        spread = x.reshape([batch, channels] + [v for r in rows for v in (r, 1)])
        pads = []
        for s in reversed(stride):
            pads += [0, s - 1, 0, 0]
        spread = aten.constant_pad_nd(spread, pads, 0.0)
        x = spread.reshape([batch, channels] + [r * s for r, s in zip(rows, stride)])
        for i, (r, s) in enumerate(zip(rows, stride)):
            x = x.narrow(2 + i, 0, (r - 1) * s + 1)
    pads = []
    for i in reversed(range(n)):
        border = dilation[i] * (kernel[i] - 1) - padding[i]
        end = size[i] - (x.shape[2 + i] + 2 * border - dilation[i] * (kernel[i] - 1))
        pads += [border, border + end]
    x = pad(x, pads)
    out_channels, per_group = weight.shape[0] // groups, weight.shape[1]
    flipped = weight.reshape([groups, out_channels, per_group] + kernel).transpose(1, 2)
    flipped = flipped.reshape([groups * per_group, out_channels] + kernel)
    flipped = aten.flip(flipped, list(range(2, 2 + n)))
    return aten.convolution(x, flipped, None, [1] * n, [0] * n, dilation, False, [0] * n, groups)


def pad(x, pads):
    """constant_pad_nd(x, pads) with any negative pads done as slices first (torch-mlir
    lowers a negative pad to a slice that starts before the tensor)."""
    n = len(pads) // 2
    for i in range(n):
        dim = x.dim() - 1 - i
        low, high = pads[2 * i], pads[2 * i + 1]
        start, stop = max(-low, 0), x.shape[dim] - max(-high, 0)
        if start or stop != x.shape[dim]:
            x = x.narrow(dim, start, max(stop - start, 0))
    positive = [max(p, 0) for p in pads]
    return aten.constant_pad_nd(x, positive, 0.0) if any(positive) else x


TABLE = {
    aten.convolution_backward.default: convolution_backward,
}
