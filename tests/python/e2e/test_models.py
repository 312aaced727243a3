"""Ordinary PyTorch training code runs unchanged on the lazy_mlir device and gives eager's
numbers, with nothing falling back to eager and a fixed number of compiles: CNNs with
BatchNorm (training and eval mode), ResNets, LSTM/GRU, Adam-family optimizers on their
default (foreach) path, embeddings, transformers, a small GPT with tied embeddings,
gradient clipping, gradient accumulation and an LR schedule (models in model_zoo.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, assert_no_fallback
from model_zoo import (CASES, MODELS, OPTIMIZERS, GPTConfig, GPT, assert_same_training,
                       run_case, train_both)


@pytest.mark.parametrize("model_name,opt_name", CASES, ids=[f"{m}-{o}" for m, o in CASES])
def test_training_matches_eager(model_name, opt_name):
    run_case(model_name, opt_name, "lazy")


def test_cnn_eval_mode_uses_running_stats():
    torch.manual_seed(0)
    model, x, y, loss_fn = MODELS["cnn"]()
    lazy, eager = train_both(model, x, y, loss_fn, OPTIMIZERS["sgd_momentum"], "lazy", steps=2)
    assert_same_training(lazy, eager)
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
    model, x, y, loss_fn = MODELS["embedding_mlp"]()
    lazy, eager = train_both(model, x, y, loss_fn, OPTIMIZERS["sgd_momentum"], "lazy", steps=5,
                             clip=0.5, micro_batches=2, schedule=True)
    assert_same_training(lazy, eager)


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
