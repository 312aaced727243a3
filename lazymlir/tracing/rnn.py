"""LSTM and GRU cells for lazy_mlir: the fused cell ops, written as ATen math.

For a PrivateUse1 device PyTorch's `lstm`/`gru` pick the fused cell kernels
(`_thnn_fused_lstm_cell`, `_thnn_fused_gru_cell`) that only CUDA implements,
and autograd pairs them with their fused backward ops. There is no CPU kernel
to fall back to and no decomposition in PyTorch or torch-mlir, so the tracer
records these instead (they are ordinary elementwise ops and concatenations,
which lower). The `workspace` each forward returns is only ever read by the
matching backward below, so its layout is ours: the activated gates
(LSTM: i, f, g, o; GRU: r, z, n, hx, hn) concatenated along dim 1, as in
PyTorch's CUDA kernels.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _gates(gates, hidden, input_bias, hidden_bias):
    total = gates + hidden
    if input_bias is not None:
        total = total + input_bias
    if hidden_bias is not None:
        total = total + hidden_bias
    return total


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """aten::_thnn_fused_lstm_cell -> (hy, cy, workspace)."""
    i, f, g, o = _gates(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """aten::_thnn_fused_lstm_cell_backward_impl -> (grad_gates, grad_cx, grad_bias)."""
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_c = torch.zeros_like(cy)
    grad_o = torch.zeros_like(cy)
    if grad_hy is not None:
        grad_o = grad_hy * tanh_cy
        grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_gates = torch.cat([
        grad_c * g * i * (1 - i),
        grad_c * cx * f * (1 - f),
        grad_c * i * (1 - g * g),
        grad_o * o * (1 - o),
    ], 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """aten::_thnn_fused_gru_cell -> (hy, workspace)."""
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    in_r, in_z, in_n = input_gates.chunk(3, 1)
    h_r, h_z, h_n = hidden_gates.chunk(3, 1)
    r = (in_r + h_r).sigmoid()
    z = (in_z + h_z).sigmoid()
    n = (in_n + r * h_n).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, h_n], 1)


def gru_cell_backward(grad_hy, workspace, has_bias):
    """aten::_thnn_fused_gru_cell_backward -> (grad_input_gates, grad_hidden_gates,
    grad_hx, grad_input_bias, grad_hidden_bias)."""
    r, z, n, hx, h_n = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_r = grad_n * h_n * r * (1 - r)
    grad_input_gates = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_n * r], 1)
    grad_hx = grad_hy * z
    if not has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hx, None, None
    return (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_gates.sum(0),
            grad_hidden_gates.sum(0))


# op -> its implementation in ATen math (the tracer routes these ops here).
CELLS = {
    aten._thnn_fused_lstm_cell.default: lstm_cell,
    aten._thnn_fused_lstm_cell_backward_impl.default: lstm_cell_backward,
    aten._thnn_fused_gru_cell.default: gru_cell,
    aten._thnn_fused_gru_cell_backward.default: gru_cell_backward,
}
