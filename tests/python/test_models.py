"""Ordinary PyTorch training code runs unchanged on lazy_mlir and gives eager's numbers,
with nothing falling back to eager: CNNs with BatchNorm, a residual block, LSTM/GRU,
Adam-family optimizers on their default (foreach) path, embeddings, a transformer."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_no_fallback
from torch import nn

import lazymlir


class _Residual(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.c1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(channels)
        self.c2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


class _Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(4, 8, batch_first=True)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        return self.out(self.rnn(x)[0][:, -1])


def _cnn():
    return (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)),
            torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)), F.cross_entropy)


def _resnet_block():
    return (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _Residual(8), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 5)),
            torch.randn(2, 3, 8, 8), torch.randn(2, 5), F.mse_loss)


def _lstm():
    return _Recurrent(nn.LSTM), torch.randn(3, 5, 4), torch.randn(3, 3), F.mse_loss


def _gru():
    return _Recurrent(nn.GRU), torch.randn(3, 5, 4), torch.randn(3, 3), F.mse_loss


def _embedding_mlp():
    return (nn.Sequential(nn.Embedding(20, 8), nn.Flatten(), nn.Linear(24, 16), nn.GELU(),
                          nn.LayerNorm(16), nn.Linear(16, 3)),
            torch.randint(0, 20, (4, 3)), torch.randn(4, 3), F.mse_loss)


def _transformer():
    return (nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
            torch.randn(2, 5, 16), torch.randn(2, 5, 16), F.mse_loss)


MODELS = {"cnn": _cnn, "resnet_block": _resnet_block, "lstm": _lstm, "gru": _gru,
          "embedding_mlp": _embedding_mlp, "transformer": _transformer}
OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-3),
}
CASES = [("cnn", "sgd_momentum"), ("resnet_block", "sgd_momentum"), ("lstm", "adam"),
         ("gru", "sgd_momentum"), ("embedding_mlp", "adamw"), ("transformer", "sgd_momentum"),
         ("embedding_mlp", "rmsprop")]
# Adaptive optimizers divide by the gradient's own scale, so a parameter whose exact
# gradient is zero (a conv bias right before BatchNorm, the attention key bias) turns
# rounding noise into full-size steps in eager and here alike; such pairs compare
# rounding, not correctness, and are left out.


def _train(model, x, y, loss_fn, make_opt, device, steps=3):
    model = model.to(device)
    opt = make_opt(model.parameters())
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        if device == DEVICE:
            lazymlir.mark_step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("model_name,opt_name", CASES, ids=[f"{m}-{o}" for m, o in CASES])
def test_training_matches_eager(model_name, opt_name):
    torch.manual_seed(0)
    model, x, y, loss_fn = MODELS[model_name]()
    eager_losses, eager_state = _train(copy.deepcopy(model), x, y, loss_fn,
                                       OPTIMIZERS[opt_name], "cpu")
    lazy_losses, lazy_state = _train(model, x, y, loss_fn, OPTIMIZERS[opt_name], DEVICE)
    torch.testing.assert_close(lazy_losses, eager_losses, rtol=1e-4, atol=1e-5)
    for name, value in eager_state.items():
        # BatchNorm running stats and num_batches_tracked included.
        torch.testing.assert_close(lazy_state[name], value, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")
    assert_no_fallback()
