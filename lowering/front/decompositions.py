"""Decompositions lazymlir adds to torch-mlir's table (both entry points apply them).

For ATen ops that torch-mlir does not lower and PyTorch's decomposition table
does not cover, written with ops torch-mlir lowers. Without them these ops run
eagerly (counted fallbacks) on every step of a model that uses them.
"""

from __future__ import annotations

import torch

from . import layers

aten = torch.ops.aten


def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """The backward of `_weight_norm_interface` (w = g * v / ||v||, the norm over every
    dim but `dim`), as PyTorch's `_weight_norm_differentiable_backward` computes it. Its
    forward has a decomposition, but AOTAutograd and the lazy device record autograd's
    formula for the fused op, which calls this one (`weight_norm` of a Conv1d: Wav2Vec2's
    positional convolution)."""
    dim = dim % saved_v.dim()
    reduced = [d for d in range(saved_v.dim()) if d != dim]
    norms = saved_norms.reshape(saved_g.shape)
    per_dim_sums = (grad_w * saved_v).sum(reduced, keepdim=True)
    grad_v = (saved_g / norms) * (grad_w - saved_v * (per_dim_sums / (norms * norms)))
    grad_g = per_dim_sums / norms
    return grad_v, grad_g


TABLE = {
    aten._weight_norm_interface_backward.default: weight_norm_interface_backward,
}

# Pooling, padding, resampling, grouped convolution... (layers.py)
TABLE.update(layers.TABLE)
