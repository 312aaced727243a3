"""torch.autocast("lazy_mlir") and GradScaler against CPU autocast (eager is the reference).

lazy_mlir follows the autocast policy of its target's eager backend (lazymlir/autocast.py):
CPU's on the cpu target, so CPU autocast is the reference op by op; CUDA's on the cuda
target, where it differs from CPU's (CPU keeps softmax, exp, sum, layer_norm of a half
input in half) the expected dtype is CUDA's float32 and the reference is eager CPU in
float32.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import DEVICE, assert_no_fallback, target_name
from torch import nn

import lazymlir


# Ops CUDA's policy (the cuda target's) runs in float32 and CPU autocast's runs in the
# input's dtype: there, their reference is eager CPU on the float32 form of the input.
CUDA_FLOAT32 = {"softmax", "log_softmax", "exp", "sum", "layer_norm"}


def _ops(device: str, dtype: torch.dtype, upcast: bool = False) -> dict:
    torch.manual_seed(0)
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    linear = nn.Linear(8, 3)
    a, b, linear = a.to(device), b.to(device), linear.to(device)
    with torch.autocast("cpu" if device == "cpu" else DEVICE, dtype=dtype):
        low = a.to(dtype).float() if upcast else a.to(dtype)
        out = {
            "mm": a @ b, "linear": linear(a), "bmm": torch.bmm(a[None], b[None]),
            "addmm": torch.addmm(b[0], a, b),
            "softmax": torch.softmax(low, -1), "log_softmax": torch.log_softmax(low, -1),
            "exp": low.exp(), "sum": low.sum(), "layer_norm": nn.functional.layer_norm(low, (8,)),
            "mse_loss": nn.functional.mse_loss(low, a * 2),
            "add": a + 1, "cat": torch.cat([(a @ b) @ b.T, a]),
        }
    if device != "cpu":
        lazymlir.mark_step()
    return {k: v.to("cpu") for k, v in out.items()}


# float16 is marked slow (CI time: scripts/test-slow.sh runs it); the GradScaler test
# below trains in float16.
@pytest.mark.parametrize("dtype", [
    torch.bfloat16, pytest.param(torch.float16, marks=pytest.mark.slow)],
    ids=["bf16", "f16"])
def test_dtypes_and_values_per_op_match_cpu_autocast(dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no "target dtype is not supported" warning
        got = _ops(DEVICE, dtype)
    expected = _ops("cpu", dtype)
    if target_name() == "cuda":
        upcast = _ops("cpu", dtype, upcast=True)
        expected.update({name: upcast[name] for name in CUDA_FLOAT32})
    for name, value in expected.items():
        assert got[name].dtype == value.dtype, (name, got[name].dtype, value.dtype)
        tol = 1e-5 if value.dtype == torch.float32 and name not in ("cat", "add") else 1e-2
        torch.testing.assert_close(got[name].float(), value.float(), rtol=tol, atol=tol,
                                   msg=name)
    assert_no_fallback()


def _train_with_scaler(device: str, init_scale: float, amp: bool = True, steps: int = 4):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=init_scale, growth_interval=2,
                                  enabled=amp)
    torch.manual_seed(1)
    data = [(torch.randn(6, 8), torch.randn(6, 4)) for _ in range(steps)]
    losses, scales = [], []
    for x, y in data:
        opt.zero_grad()
        with torch.autocast("cpu" if device == "cpu" else DEVICE, dtype=torch.float16,
                            enabled=amp):
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if device != "cpu":
            lazymlir.mark_step()
        losses.append(loss.item())
        scales.append(scaler.get_scale() if amp else 1.0)
    return losses, scales


def test_grad_scaler_float16_training_matches_cpu_autocast():
    """Unscale, inf check and scale update run in the graph (no fallback). From 2**17
    the scale grows after two good steps (growth_interval=2), then backs off when the
    float16 gradients overflow and that step is skipped, as on CPU; the losses follow
    CPU autocast's and stay close to float32 training's."""
    losses, scales = _train_with_scaler(DEVICE, 2.0 ** 17)
    assert_no_fallback()
    cpu_losses, cpu_scales = _train_with_scaler("cpu", 2.0 ** 17)
    assert scales == cpu_scales == [2.0 ** 17, 2.0 ** 18, 2.0 ** 17, 2.0 ** 17]
    torch.testing.assert_close(losses, cpu_losses, rtol=2e-3, atol=2e-3)
    float32_losses, _ = _train_with_scaler("cpu", 1.0, amp=False)
    torch.testing.assert_close(losses, float32_losses, rtol=5e-3, atol=5e-3)
