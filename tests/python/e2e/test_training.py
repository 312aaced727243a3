"""Training on lazy_mlir matches eager; module/device plumbing; sync points."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import DEVICE, assert_no_fallback
from torch import nn

import lazymlir


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _train(device, steps=5):
    model = _mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(1)
    data = [(torch.randn(6, 8), torch.randn(6, 4)) for _ in range(steps)]
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        if device == DEVICE:
            lazymlir.mark_step()
        losses.append(loss.item())
    return model, losses


def test_mlp_sgd_momentum_matches_eager():
    eager, eager_losses = _train("cpu")
    lazy, lazy_losses = _train(DEVICE)
    np.testing.assert_allclose(lazy_losses, eager_losses, rtol=1e-4, atol=1e-4)
    for (name, pe), pl in zip(eager.named_parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.detach().cpu(), pe.detach(), rtol=1e-4, atol=1e-4,
                                   msg=lambda m, n=name: f"{n}: {m}")
    assert_no_fallback()


def test_module_to_and_back():
    model = _mlp()
    ref = {k: v.clone() for k, v in model.state_dict().items()}
    model.to(DEVICE)
    assert all(p.device.type == DEVICE for p in model.parameters())
    model.to("cpu")
    for k, v in model.state_dict().items():
        assert v.device.type == "cpu"
        assert torch.equal(v, ref[k]), k


def test_copy_both_directions():
    src = torch.randn(3, 4)
    lz = torch.zeros(3, 4, device=DEVICE)
    lz.copy_(src)
    assert torch.equal(lz.cpu(), src)
    back = torch.empty(3, 4)
    back.copy_((lz * 2).cpu())
    assert torch.equal(back, src * 2)
    ints = torch.zeros(3, 4, dtype=torch.int64, device=DEVICE)
    ints.copy_(src * 10)
    assert torch.equal(ints.cpu(), (src * 10).to(torch.int64))
    assert_no_fallback()


def test_copy_lazy_into_cpu_tensor():
    src = torch.randn(3, 4)
    back = torch.empty(3, 4)
    back.copy_(src.to(DEVICE) * 2)
    assert torch.equal(back, src * 2)


def test_device_module():
    mod = torch.lazy_mlir
    assert mod.is_available()
    assert mod.device_count() == 1
    assert mod.current_device() == 0
    x = torch.ones(2, device=DEVICE) + 1
    before = lazymlir.metrics.counter("MarkStep")
    mod.synchronize()
    assert lazymlir.metrics.counter("MarkStep") == before + 1
    assert torch.equal(x.cpu(), torch.full((2,), 2.0))


def test_sync_points(capsys):
    e = torch.tensor([[1.5, -2.0], [3.0, 0.25]])
    x = e.to(DEVICE)
    assert (x.sum() * 2).item() == (e.sum() * 2).item()
    assert (x * 3).tolist() == (e * 3).tolist()
    assert bool((x > 0).sum() == 3) is True
    assert bool((x > 100).sum() > 0) is False
    if x.abs().amax() > 2.5:
        pass
    else:
        raise AssertionError("bool() of a lazy mask")
    np.testing.assert_array_equal((x - 1).cpu().numpy(), (e - 1).numpy())
    assert_no_fallback()


def test_print_and_repr_show_values(capsys):
    e = torch.tensor([[1.5, -2.0], [3.0, 0.25]])
    x = e.to(DEVICE)
    print(x + 1)
    out = capsys.readouterr().out
    assert "2.5000" in out and "-1.0000" in out and "1.2500" in out, out
    assert "lazy_mlir" in repr(x + 1)
    w = torch.ones(2, device=DEVICE, requires_grad=True)
    assert repr(w * 3) == "tensor([3., 3.], device='lazy_mlir:0', grad_fn=<MulBackward0>)"
    assert_no_fallback()


@pytest.mark.parametrize("factory", ["randn", "rand", "randint"])
def test_random_factories_follow_manual_seed(factory):
    """Random ops compile to Philox arithmetic (test_random.py): torch.manual_seed
    reproduces the device's stream, which is not CPU's."""
    def make(device):
        torch.manual_seed(0)
        if factory == "randint":
            return torch.randint(0, 100, (4, 3), device=device)
        return getattr(torch, factory)(4, 3, device=device)

    first = make(DEVICE).cpu()
    torch.testing.assert_close(make(DEVICE).cpu(), first)
    assert first.shape == (4, 3) and first.dtype == make("cpu").dtype
    assert_no_fallback()


@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize("device", ["cpu", DEVICE])
def test_activation_checkpointing_matches_eager(device, use_reentrant):
    """lazy_mlir is PyTorch's registered accelerator once imported, so checkpointing
    builds an autocast context for it even for CPU tensors (it asked the device
    module for get_amp_supported_dtype, which was missing)."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    layer = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    x0 = torch.randn(5, 8)
    expected = x0.clone().requires_grad_()
    layer(expected).pow(2).sum().backward()
    expected_grads = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    moved = layer.to(device)
    x = x0.clone().to(device).requires_grad_()
    checkpoint(moved, x, use_reentrant=use_reentrant).pow(2).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), expected.grad, rtol=1e-5, atol=1e-6)
    for p, g in zip(moved.parameters(), expected_grads):
        torch.testing.assert_close(p.grad.cpu(), g, rtol=1e-5, atol=1e-6)
    assert_no_fallback()

