"""Decompositions lazymlir adds to torch-mlir's table (both entry points apply them).

For ATen ops that torch-mlir does not lower and PyTorch's decomposition table
does not cover, written with ops torch-mlir lowers. Without them these ops run
eagerly (counted fallbacks) on every step of a model that uses them.
"""

from __future__ import annotations

import struct

import torch

from . import fft, layers

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


def amp_non_finite_check_and_unscale(grads, found_inf, inv_scale):
    """GradScaler's unscale (the functional form of `_amp_foreach_non_finite_check_and_
    unscale_`): each gradient times `inv_scale`, and `found_inf` set to 1 if any element
    of any gradient is inf or NaN. `0 * x` is NaN exactly where x is not finite, and a
    NaN sum is != 0."""
    found = found_inf
    out = []
    for grad in grads:
        probe = aten.sum.default(aten.mul.Scalar(grad, 0.0), dtype=torch.float32)
        bad = aten._to_copy.default(aten.ne.Scalar(probe, 0.0), dtype=found_inf.dtype)
        found = aten.maximum.default(found, bad)
        out.append(aten._to_copy.default(aten.mul.Tensor(grad, inv_scale), dtype=grad.dtype))
    return out, found


def amp_update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                     growth_interval):
    """GradScaler's update (the functional form of `_amp_update_scale_`), as CUDA's
    kernel: back off and reset the tracker after an inf; else count a good step, and
    grow the scale (if the grown one is finite) and reset every `growth_interval`."""
    found = aten.gt.Scalar(found_inf, 0.0)
    successful = aten.add.Scalar(growth_tracker, 1)
    grow = aten.ge.Scalar(successful, growth_interval)
    grown = aten.mul.Scalar(scale, growth_factor)
    grown_ok = aten.logical_and.default(grow, aten.eq.Scalar(aten.mul.Scalar(grown, 0.0), 0.0))
    kept = aten.where.self(grown_ok, grown, scale)
    new_scale = aten.where.self(found, aten.mul.Scalar(scale, backoff_factor), kept)
    zero = aten.mul.Scalar(growth_tracker, 0)
    new_tracker = aten.where.self(aten.logical_or.default(found, grow), zero, successful)
    return new_scale, new_tracker


# Eager's CPU kernel writes 1/6 as a float literal (`1.0f / 6.0f`) for every dtype.
_ONE_SIXTH_F32 = float(torch.tensor(1.0 / 6.0, dtype=torch.float32))


def hardsigmoid_backward(grad_output, self):
    """grad * 1/6 inside (-3, 3), else 0, with eager's constant: its CPU kernel
    multiplies by the float32 1/6 in every dtype, so a float64 gradient is 3e-8 (relative)
    from the exact sixth that torch-mlir's lowering uses (a MobileNetV3 step in float64
    drifted from eager by it)."""
    inside = aten.logical_and.default(aten.gt.Scalar(self, -3.0), aten.lt.Scalar(self, 3.0))
    # 0 outside, whatever the gradient (an inf or NaN one included), as eager.
    return aten.where.ScalarOther(inside, aten.mul.Scalar(grad_output, _ONE_SIXTH_F32), 0.0)


def scatter_reduce_legacy(self, dim, index, src, reduce):
    """`scatter(..., reduce="add"|"multiply")`, the deprecated form torch-mlir does not
    lower (its `linalg` stage fails), as the `scatter_add` / `scatter_reduce("prod")` that
    eager's kernel computes: every update combined into `self`, included."""
    if reduce == "add":
        return aten.scatter_add.default(self, dim, index, src)
    if reduce == "multiply":
        return aten.scatter_reduce.two(self, dim, index, src, "prod", include_self=True)
    raise RuntimeError("reduce argument must be either add or multiply.")  # eager's words


def scatter_value_reduce_legacy(self, dim, index, value, reduce):
    """`scatter(..., value, reduce=...)`: the same with `value` in every updated place."""
    src = aten.full.default(list(index.shape), value, dtype=self.dtype, device=self.device)
    return scatter_reduce_legacy(self, dim, index, src, reduce)


def lerp_scalar(self, end, weight):
    """`lerp(self, end, weight)` with a number weight, as PyTorch's reference computes it
    (`coeff * (end - self) + base`, coeff and base picked by |weight| >= 0.5) with the
    pick made here: three ops. The reference makes the weight a 0-d tensor and picks
    with `where`, nine ops per call (AdamW calls it per parameter per step). The weight
    is rounded to `self`'s dtype first, as that 0-d tensor was. Half types keep the
    reference, which computes in float32 and rounds once (as eager does)."""
    if isinstance(weight, complex) or self.dtype not in (torch.float32, torch.float64):
        return torch._refs.lerp(self, end, weight)
    # Rounded in Python, not through a tensor: a tensor made here would be a graph
    # constant under torch.compile's tracing.
    try:
        rounded = _float32(weight) if self.dtype == torch.float32 else float(weight)
    except OverflowError:
        return torch._refs.lerp(self, end, weight)
    diff = aten.sub.Tensor(end, self)
    if abs(rounded) >= 0.5:
        # (exact in float64, then rounded once: float32's own subtraction)
        coeff = rounded - 1 if self.dtype == torch.float64 else _float32(rounded - 1)
        return aten.add.Tensor(aten.mul.Tensor(diff, coeff), end)
    return aten.add.Tensor(aten.mul.Tensor(diff, rounded), self)


def _float32(x) -> float:
    """`x` rounded to the nearest float32 (OverflowError beyond its range)."""
    return struct.unpack("f", struct.pack("f", x))[0]


TABLE = {
    aten.lerp.Scalar: lerp_scalar,
    aten.scatter.reduce: scatter_reduce_legacy,
    aten.scatter.value_reduce: scatter_value_reduce_legacy,
    aten._weight_norm_interface_backward.default: weight_norm_interface_backward,
    aten.hardsigmoid_backward.default: hardsigmoid_backward,
    aten._amp_foreach_non_finite_check_and_unscale.default: amp_non_finite_check_and_unscale,
    aten._amp_update_scale.default: amp_update_scale,
}

# Pooling, padding, resampling, grouped convolution... (layers.py)
TABLE.update(layers.TABLE)

# FFTs as DFT matmuls, up to a length (fft.py).
TABLE.update(fft.TABLE)


# Ops torch-mlir lowers directly: the lazy device's tracer records them whole
# (decomposing them would only make graphs larger; torch-mlir decomposes internally
# where it must).
KEEP = {
    aten._to_copy.default, aten.addmm.default, aten._log_softmax.default,
    aten._softmax.default, aten.native_layer_norm.default, aten.gelu.default,
    aten.arange.start_step, aten.full.default, aten.empty.memory_format,
}

_TRACING_TABLE = None


def tracing_table() -> dict:
    """The lazy device's decompositions: torch-mlir's table (what its FX path applies
    before import) without KEEP, plus TABLE. The tracer applies them as it records,
    except late_decompositions.LATE's, which the `torch` stage applies."""
    global _TRACING_TABLE
    if _TRACING_TABLE is None:
        from torch_mlir.extras.fx_decomp_util import get_decomposition_table

        ops = dict(get_decomposition_table())
        for op in KEEP:
            ops.pop(op, None)
        ops.update(TABLE)
        _TRACING_TABLE = ops
    return _TRACING_TABLE
