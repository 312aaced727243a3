"""Small ordinary models, inputs, losses and optimizers shared by the model tests of the
lazy device (test_models.py) and of torch.compile(backend="lazymlir") (test_dynamo.py).

Each MODELS entry returns (model, x, y, loss_fn) with a fresh model; seed before calling."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_no_fallback
from optimizers import OPTIMIZERS
from torch import nn

import lazymlir

# The GPT is shared with the benchmarks (benchmarks/models.py, at the repository root).
sys.path.append(str(Path(__file__).resolve().parents[3]))
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


def _gpt(sdpa: bool):
    """Causal attention, tied token embedding/output head, cross-entropy
    (benchmarks/models.py, shrunk)."""
    cfg = GPTConfig(vocab=32, seq=8, dim=16, heads=2, layers=1, sdpa=sdpa)
    idx, targets = gpt_batch(cfg, 2)

    def loss_fn(logits, t):
        return F.cross_entropy(logits.reshape(-1, cfg.vocab), t.reshape(-1))

    return GPT(cfg), idx, targets, loss_fn


MODELS = {"cnn": _cnn, "resnet_block": _resnet_block, "resnet2": _resnet2, "lstm": _lstm,
          "gru": _gru, "embedding_mlp": _embedding_mlp, "transformer": _transformer,
          "transformer_encoder": _transformer_encoder,
          "gpt_masked_fill": lambda: _gpt(sdpa=False), "gpt_sdpa": lambda: _gpt(sdpa=True)}
CASES = [("cnn", "sgd_momentum"), ("resnet_block", "sgd_momentum"), ("resnet2", "adam"),
         ("lstm", "adam"), ("gru", "sgd_momentum"), ("embedding_mlp", "adamw"),
         ("transformer", "sgd_momentum"), ("transformer_encoder", "adamw"),
         ("embedding_mlp", "rmsprop"), ("gpt_masked_fill", "adamw"), ("gpt_sdpa", "adamw")]
# Language models are trained the way they usually are: with gradient clipping.
CLIP = {"gpt_masked_fill": 1.0, "gpt_sdpa": 1.0, "transformer_encoder": 1.0}
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


def train(model, x, y, loss_fn, make_opt, mode: str, steps=4, clip=None, micro_batches=1,
          schedule=False):
    """Train `model` for `steps` steps; mode: "eager" (CPU), "lazy" (lazy_mlir device),
    "compiled" (torch.compile(backend="lazymlir") of the model and the optimizer step) or
    "aot_eager" (the same programs compiled by PyTorch and run with its own kernels).

    Returns (losses, state_dict on the CPU, trained model). Lazy and compiled runs assert
    that after WARMUP_STEPS steps nothing compiles any more.
    """
    device = DEVICE if mode == "lazy" else "cpu"
    model = model.to(device)
    opt = make_opt(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5) if schedule else None
    forward, opt_step = model, opt.step
    if mode in ("compiled", "aot_eager"):
        backend = "lazymlir" if mode == "compiled" else "aot_eager"
        forward = torch.compile(model, backend=backend, dynamic=False)
        opt_step = torch.compile(opt.step, backend=backend, dynamic=False)
    record = _Recorder()
    for _ in range(steps):
        opt.zero_grad()
        for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
            loss = loss_fn(forward(xs.to(device)), ys.to(device)) / micro_batches
            loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt_step()
        if sched is not None:
            sched.step()
        if mode == "lazy":
            lazymlir.mark_step()
        record.step_done(loss)
    if mode != "eager":
        record.assert_compiles_settled()
    return record.losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}, model


def train_both(model, x, y, loss_fn, make_opt, mode: str, **kwargs):
    """Train a copy eagerly, then `model` in `mode`: (result, eager result)."""
    eager = train(copy.deepcopy(model), x, y, loss_fn, make_opt, "eager", **kwargs)
    return train(model, x, y, loss_fn, make_opt, mode, **kwargs), eager


def assert_same_training(actual, eager, rtol=1e-4, atol=1e-5):
    """Losses and final state (BatchNorm running stats and counters included) match
    eager, and nothing fell back to eager."""
    torch.testing.assert_close(actual[0], eager[0], rtol=rtol, atol=atol)
    for name, value in eager[1].items():
        torch.testing.assert_close(actual[1][name], value, rtol=rtol, atol=atol,
                                   msg=lambda m, n=name: f"{n}: {m}")
    assert_no_fallback()


def run_case(model_name: str, opt_name: str, mode: str):
    torch.manual_seed(0)
    model, x, y, loss_fn = MODELS[model_name]()
    actual, eager = train_both(model, x, y, loss_fn, OPTIMIZERS[opt_name], mode,
                               clip=CLIP.get(model_name))
    assert_same_training(actual, eager)
