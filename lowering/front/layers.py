"""Decompositions of the layer ops real CNNs use that torch-mlir lowers wrongly or not at all.

Part of lowering.front.decompositions' table, so both entry points apply them. Each is
written with ops torch-mlir lowers on both targets (convolutions, matmuls, slices,
elementwise ops, gathers) and, where the op's windows are irregular, with 0/1
"window membership" matrices built from `arange` in the graph: shape-only values, so
the lazy device's decomposition templates still capture them.
"""

from __future__ import annotations

import math

import torch
import torch._decomp.decompositions as _decomp

from . import embedding_bag

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
        spatial = list(input.shape[2:])
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
    x = aten.constant_pad_nd(x, pads, 0.0)
    out_channels, per_group = weight.shape[0] // groups, weight.shape[1]
    flipped = weight.reshape([groups, out_channels, per_group] + kernel).transpose(1, 2)
    flipped = flipped.reshape([groups * per_group, out_channels] + kernel)
    flipped = aten.flip(flipped, list(range(2, 2 + n)))
    return aten.convolution(x, flipped, None, [1] * n, [0] * n, dilation, False, [0] * n, groups)


def avg_pool2d_backward(grad_output, input, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override):
    """Each output's gradient divided by its window's divisor, then spread over its
    window: a transposed convolution by a kernel of ones, one image per channel.
    (torch-mlir's lowering of the op fails in every configuration.)"""
    kernel = _spatial(kernel_size, 2)
    stride = _spatial(stride, 2) if stride else kernel
    padding = _spatial(padding, 2)
    size, out_size = list(input.shape[-2:]), list(grad_output.shape[-2:])
    if divisor_override:
        divisor = divisor_override
    else:
        extents = []
        for o, n, k, s, p in zip(out_size, size, kernel, stride, padding):
            start = torch.arange(o, device=grad_output.device) * s - p
            end = torch.clamp(start + k, max=n + p)
            if not count_include_pad:  # only the elements inside the input count
                start, end = torch.clamp(start, min=0), torch.clamp(end, max=n)
            extents.append(end - start)
        divisor = (extents[0].unsqueeze(1) * extents[1]).to(grad_output.dtype)
    scaled = (grad_output / divisor).reshape([-1, 1] + out_size)
    ones = torch.ones([1, 1] + kernel, dtype=grad_output.dtype, device=grad_output.device)
    spread = _transposed_convolution(scaled, ones, size, stride, padding, [1, 1], 1)
    return spread.reshape(input.shape)


def _windows(out_size: int, size: int, device):
    """The 0/1 [out_size, size] matrix of adaptive pooling's windows (output o reads
    rows floor(o*size/out) to ceil((o+1)*size/out)) and the windows' lengths."""
    o = torch.arange(out_size, device=device)
    start = torch.div(o * size, out_size, rounding_mode="floor")
    end = torch.div((o + 1) * size + out_size - 1, out_size, rounding_mode="floor")
    rows = torch.arange(size, device=device)
    inside = (rows >= start.unsqueeze(1)) & (rows < end.unsqueeze(1))
    return inside, end - start


def adaptive_avg_pool2d_backward(grad_output, input):
    """Through the window matrices: grad_in = Mh^T (grad / area) Mw (the windows
    overlap where the sizes do not divide)."""
    (rows, row_len), (cols, col_len) = (
        _windows(o, n, grad_output.device)
        for o, n in zip(grad_output.shape[-2:], input.shape[-2:]))
    dtype = grad_output.dtype
    area = (row_len.unsqueeze(1) * col_len).to(dtype)
    spread = (grad_output / area) @ cols.to(dtype)                      # [..., Ho, W]
    return (spread.transpose(-1, -2) @ rows.to(dtype)).transpose(-1, -2).contiguous()


def avg_pool2d(input, kernel_size, stride=(), padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """An unbatched [C, H, W] input as a batch of one (torch-mlir's pooling op wants 4-d)."""
    if input.dim() != 3:
        return NotImplemented
    return aten.avg_pool2d(input.unsqueeze(0), kernel_size, stride, padding, ceil_mode,
                           count_include_pad, divisor_override).squeeze(0)


def adaptive_max_pool2d(input, output_size):
    """PyTorch's decomposition, plus the case it leaves out (sizes that do not divide;
    torch-mlir's lowering gives a shape error there; every case where PyTorch has no
    decomposition of its own, before 2.12): every window gathered at the
    longest window's length (shorter ones repeat their last element, which leaves the
    max and its first index alone), then max over the window."""
    height, width = input.shape[-2:]
    out_h, out_w = output_size
    reference = getattr(_decomp, "adaptive_max_pool2d", None)  # PyTorch 2.12 and later
    if reference is not None and (out_h * out_w == 1 or 0 in output_size
                                  or (height % out_h == 0 and width % out_w == 0)):
        return reference(input, output_size)
    if 0 in output_size:
        return NotImplemented
    device = input.device
    gathers, starts = [], []
    for out, size in ((out_h, height), (out_w, width)):
        longest = max(-((-(o + 1) * size) // out) - (o * size) // out for o in range(out))
        _, length = _windows(out, size, device)
        start = torch.div(torch.arange(out, device=device) * size, out, rounding_mode="floor")
        step = torch.minimum(torch.arange(longest, device=device), (length - 1).unsqueeze(1))
        gathers.append((start.unsqueeze(1) + step, longest))   # [out, longest]
        starts.append(start)
    (rows, kh), (cols, kw) = gathers
    windows = input[..., rows.reshape(out_h, kh, 1, 1), cols.reshape(1, 1, out_w, kw)]
    windows = windows.transpose(-3, -2).reshape(list(input.shape[:-2]) + [out_h, out_w, -1])
    values, where = windows.max(-1)
    # The first max is at its true place in the window (repeats come after it).
    row = starts[0].unsqueeze(1) + torch.div(where, kw, rounding_mode="floor")
    col = starts[1] + torch.remainder(where, kw)
    return values, row * width + col


def adaptive_max_pool2d_backward(grad_output, input, indices):
    """Each output's gradient goes to the element its index names (a flat row*W+col in
    the input's plane): one-hot rows and columns and a batched matmul, instead of a
    scatter (which the cuda target runs on the host)."""
    height, width = input.shape[-2:]
    batch = list(grad_output.shape[:-2])
    dtype = grad_output.dtype
    flat = indices.reshape(batch + [-1, 1])
    grad = grad_output.reshape(batch + [-1, 1])
    row = torch.div(flat, width, rounding_mode="floor")
    on_row = (row == torch.arange(height, device=grad.device)).to(dtype) * grad   # [..., O, H]
    on_col = ((flat - row * width) == torch.arange(width, device=grad.device)).to(dtype)
    return on_row.transpose(-1, -2) @ on_col                                     # [..., H, W]


def constant_pad_nd(x, pad_sizes, value=0):
    """Negative pads as slices (torch-mlir's lowering reads before the tensor)."""
    if all(p >= 0 for p in pad_sizes):
        return NotImplemented
    n = len(pad_sizes) // 2
    for i in range(n):
        dim = x.dim() - 1 - i
        low, high = pad_sizes[2 * i], pad_sizes[2 * i + 1]
        start, stop = max(-low, 0), x.shape[dim] - max(-high, 0)
        x = x.narrow(dim, start, max(stop - start, 0))
    positive = [max(p, 0) for p in pad_sizes]
    if any(positive):
        return aten.constant_pad_nd(x, positive, value)
    return x.clone()


def as_strided_scatter(input, src, size, stride, storage_offset=None):
    """`input` (contiguous, as every graph value is) with the strided view
    (size, stride, storage_offset) of it replaced by `src`. torch-mlir has no lowering;
    AOTAutograd writes gradients through a view this way (a permute before a global
    pool). A view that covers the whole input in order is a reshape; another one that
    does not overlap itself is a gather: each element of the input decodes its flat
    position into the view's indices (largest stride first) and reads `src` there if
    it is in the view."""
    offset = storage_offset or 0
    dims = sorted((d for d in range(len(size)) if size[d] != 1), key=lambda d: -stride[d])
    reach = 0  # the farthest element the dims after this one reach
    for d in reversed(dims):
        if stride[d] <= reach:
            return NotImplemented  # the view overlaps itself: eager's write order matters
        reach += (size[d] - 1) * stride[d]
    count = src.numel()
    contiguous = [d for d in range(len(size)) if size[d] != 1] == dims and all(
        stride[d] == math.prod(size[d + 1:]) for d in dims)
    if offset == 0 and count == input.numel() and contiguous:
        return src.reshape(input.shape).clone()
    rest = torch.arange(input.numel(), device=input.device) - offset
    inside = rest >= 0
    at = torch.zeros_like(rest)
    for d in dims:
        index = torch.div(rest, stride[d], rounding_mode="floor")
        rest = rest - index * stride[d]
        inside = inside & (index < size[d])
        at = at + index * math.prod(size[d + 1:])
    inside = inside & (rest == 0)
    taken = src.reshape(-1)[torch.where(inside, at, 0)]
    return torch.where(inside, taken, input.reshape(-1)).reshape(input.shape)


def _separable_backward(grad_output, input_size, resample):
    """The gradient of a separable 2-d resampling, out = Ah x Aw^T: Ah^T grad Aw. Each
    matrix is the forward resampling of an identity, resample(eye [n, 1, n], dim) ->
    [n, 1, out] = A^T (no scatter, which the cuda target runs on the host)."""
    dtype, device = grad_output.dtype, grad_output.device
    rows, cols = (resample(torch.eye(n, dtype=dtype, device=device).reshape(n, 1, n), dim)
                  .reshape(n, -1) for dim, n in enumerate(input_size[-2:]))
    return (rows @ (grad_output @ cols.t())).contiguous()


def upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners,
                                 scales_h=None, scales_w=None):
    """(torch-mlir has no lowering.)"""
    scales = (scales_h, scales_w)
    return _separable_backward(grad_output, input_size, lambda eye, d: _decomp.upsample_linear1d(
        eye, [output_size[d]], align_corners, scales[d]))


def upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h=None,
                                scales_w=None):
    """(torch-mlir's lowering is wrong where the scale is not an integer: 5 -> 7 rows.)"""
    scales = (scales_h, scales_w)
    return _separable_backward(grad_output, input_size, lambda eye, d: _decomp.upsample_nearest1d(
        eye, [output_size[d]], scales[d]))


def threshold_backward(grad_output, input, threshold):
    """ReLU's backward in the promoted type of its two operands, as eager computes it
    (PyTorch's decomposition returns the gradient's type: int64 for an int64 gradient
    of a float32 input)."""
    dtype = torch.result_type(grad_output, input)
    return torch.where(input <= threshold, 0, grad_output.to(dtype))


TABLE = {
    aten.threshold_backward.default: threshold_backward,
    aten.upsample_bilinear2d.default: _decomp.upsample_bilinear2d,
    aten.upsample_bilinear2d_backward.default: upsample_bilinear2d_backward,
    aten.upsample_nearest2d_backward.default: upsample_nearest2d_backward,
    aten.as_strided_scatter.default: as_strided_scatter,
    aten.convolution_backward.default: convolution_backward,
    aten.avg_pool2d_backward.default: avg_pool2d_backward,
    aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward,
    aten.adaptive_max_pool2d.default: adaptive_max_pool2d,
    aten.avg_pool2d.default: avg_pool2d,
    aten.adaptive_max_pool2d_backward.default: adaptive_max_pool2d_backward,
    aten.constant_pad_nd.default: constant_pad_nd,
}

# Embedding bags, forward and backward (embedding_bag.py).
TABLE.update(embedding_bag.TABLE)
