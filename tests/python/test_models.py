"""Ordinary PyTorch training code runs unchanged on lazy_mlir and gives eager's numbers,
with nothing falling back to eager and a fixed number of compiles: CNNs with BatchNorm
(training and eval mode), ResNets, LSTM/GRU, Adam-family optimizers on their default
(foreach) path, embeddings, transformers, a small GPT with tied embeddings, gradient
clipping, gradient accumulation and an LR schedule."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_no_fallback
from torch import nn

import lazymlir

# The GPT is shared with the benchmarks (benchmarks/models.py, at the repository root).
sys.path.append(str(Path(__file__).resolve().parents[2]))
from benchmarks.models import GPT, GPTConfig, gpt_batch  # noqa: E402


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


def _resnet2():
    """A stem and two residual blocks (convs without bias before BatchNorm)."""
    return (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                          _Residual(8), _Residual(8), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 4)),
            torch.randn(2, 3, 8, 8), torch.randint(0, 4, (2,)), F.cross_entropy)


def _transformer():
    return (nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
            torch.randn(2, 5, 16), torch.randn(2, 5, 16), F.mse_loss)


def _transformer_encoder():
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    return (nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
            torch.randn(2, 6, 16), torch.randn(2, 6, 16), F.mse_loss)


MODELS = {"cnn": _cnn, "resnet_block": _resnet_block, "resnet2": _resnet2, "lstm": _lstm,
          "gru": _gru, "embedding_mlp": _embedding_mlp, "transformer": _transformer,
          "transformer_encoder": _transformer_encoder}
# eps=1e-6 for the adaptive optimizers: they divide by the gradient's own scale, so a
# parameter whose exact gradient is zero (the attention key bias, a conv bias right
# before BatchNorm) turns rounding noise (~1e-9) into steps of up to `lr` with the
# default eps=1e-8, in eager and here alike, and the comparison would measure rounding.
OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-6),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01, eps=1e-6),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-3, eps=1e-6),
}
CASES = [("cnn", "sgd_momentum"), ("resnet_block", "sgd_momentum"), ("resnet2", "adam"),
         ("lstm", "adam"), ("gru", "sgd_momentum"), ("embedding_mlp", "adamw"),
         ("transformer", "sgd_momentum"), ("transformer_encoder", "adamw"),
         ("embedding_mlp", "rmsprop")]
WARMUP_STEPS = 2   # step 1 creates the optimizer state, step 2 is the steady-state graph


class _Recorder:
    """Per-step losses and graph-cache misses (fresh compiles and disk-cache loads)."""

    def __init__(self):
        self.losses, self.misses = [], []

    def step_done(self, loss):
        self.losses.append(loss.item())
        counters = lazymlir.metrics.counters()
        self.misses.append(counters.get("UncachedCompile", 0) + counters.get("DiskCacheHit", 0))

    def assert_compiles_settled(self):
        """After the warm-up steps every graph is a memory-cache hit."""
        if len(self.misses) > WARMUP_STEPS:
            assert self.misses[-1] == self.misses[WARMUP_STEPS - 1], self.misses


def _train(model, x, y, loss_fn, make_opt, device, steps=4, clip=None, micro_batches=1,
           schedule=False):
    model = model.to(device)
    opt = make_opt(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5) if schedule else None
    record = _Recorder()
    for _ in range(steps):
        opt.zero_grad()
        for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
            loss = loss_fn(model(xs.to(device)), ys.to(device)) / micro_batches
            loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if sched is not None:
            sched.step()
        if device == DEVICE:
            lazymlir.mark_step()
        record.step_done(loss)
    if device == DEVICE:
        record.assert_compiles_settled()
    return record.losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}, model


def _assert_same_training(lazy, eager, rtol=1e-4, atol=1e-5):
    lazy_losses, lazy_state, _ = lazy
    eager_losses, eager_state, _ = eager
    torch.testing.assert_close(lazy_losses, eager_losses, rtol=rtol, atol=atol)
    for name, value in eager_state.items():
        # BatchNorm running stats and num_batches_tracked included.
        torch.testing.assert_close(lazy_state[name], value, rtol=rtol, atol=atol,
                                   msg=lambda m, n=name: f"{n}: {m}")
    assert_no_fallback()


def _both(model, x, y, loss_fn, make_opt, **kwargs):
    """Train a copy eagerly, then `model` on lazy_mlir: (lazy, eager) results."""
    eager = _train(copy.deepcopy(model), x, y, loss_fn, make_opt, "cpu", **kwargs)
    return _train(model, x, y, loss_fn, make_opt, DEVICE, **kwargs), eager


@pytest.mark.parametrize("model_name,opt_name", CASES, ids=[f"{m}-{o}" for m, o in CASES])
def test_training_matches_eager(model_name, opt_name):
    torch.manual_seed(0)
    model, x, y, loss_fn = MODELS[model_name]()
    lazy, eager = _both(model, x, y, loss_fn, OPTIMIZERS[opt_name])
    _assert_same_training(lazy, eager)


def test_cnn_eval_mode_uses_running_stats():
    torch.manual_seed(0)
    model, x, y, loss_fn = _cnn()
    lazy, eager = _both(model, x, y, loss_fn, OPTIMIZERS["sgd_momentum"], steps=2)
    _assert_same_training(lazy, eager)
    probe = torch.randn(3, 3, 16, 16)
    expected = eager[2].eval()(probe)
    with torch.no_grad():
        actual = lazy[2].eval()(probe.to(DEVICE)).cpu()
    torch.testing.assert_close(actual, expected.detach(), rtol=1e-4, atol=1e-5)
    assert_no_fallback()


def test_gradient_accumulation_clipping_and_lr_schedule():
    """Two micro-batches per step, clip_grad_norm_, a StepLR schedule (the learning rate
    changes every step: a scalar graph input, so no recompiles)."""
    torch.manual_seed(0)
    model, x, y, loss_fn = _embedding_mlp()
    lazy, eager = _both(model, x, y, loss_fn, OPTIMIZERS["sgd_momentum"], steps=5,
                        clip=0.5, micro_batches=2, schedule=True)
    _assert_same_training(lazy, eager)


@pytest.mark.parametrize("sdpa", [False, True], ids=["masked_fill", "sdpa_is_causal"])
def test_small_gpt_adamw_matches_eager(sdpa):
    """Causal attention, tied token embedding/output head, cross-entropy, AdamW and
    clip_grad_norm_ (benchmarks/models.py, shrunk)."""
    cfg = GPTConfig(vocab=32, seq=8, dim=16, heads=2, layers=1, sdpa=sdpa)
    torch.manual_seed(0)
    model = GPT(cfg)
    idx, targets = gpt_batch(cfg, 2)

    def loss_fn(logits, t):
        return F.cross_entropy(logits.reshape(-1, cfg.vocab), t.reshape(-1))

    lazy, eager = _both(model, idx, targets, loss_fn, OPTIMIZERS["adamw"], steps=3,
                        clip=1.0)
    _assert_same_training(lazy, eager)
    assert lazy[2].head.weight is lazy[2].tok.weight


def test_module_to_keeps_tied_weights_tied():
    """nn.Module._apply makes a new Parameter per slot for PrivateUse1 devices, which
    untied shared weights (each half then trained with its own part of the gradient);
    lazymlir/module_moves.py re-ties them."""
    model = GPT(GPTConfig(vocab=32, seq=8, dim=16, heads=2, layers=1))
    model.tok.weight.grad = torch.ones_like(model.tok.weight)
    model.to(DEVICE)
    assert model.head.weight is model.tok.weight
    assert model.tok.weight.device.type == DEVICE
    torch.testing.assert_close(model.head.weight.grad.cpu(), torch.ones(32, 16))
    model.to("cpu")
    assert model.head.weight is model.tok.weight and model.tok.weight.device.type == "cpu"
