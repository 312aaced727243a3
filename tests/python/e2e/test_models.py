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

# The emulator pass (scripts/test.sh: the cuda target, every kernel run on one CPU thread)
# leaves out the cases whose ops a faster case of the same family runs: GPT with sdpa
# covers masked_fill's, transformer-sgd the encoder's, resnet_block resnet2's.
SLOW_ON_THE_EMULATOR = {("gpt_masked_fill", "adamw"), ("transformer_encoder", "adamw"),
                        ("resnet2", "adam")}


@pytest.mark.parametrize("model_name,opt_name", [
    pytest.param(m, o, id=f"{m}-{o}",
                 marks=() if (m, o) in SLOW_ON_THE_EMULATOR else pytest.mark.emulator)
    for m, o in CASES])
def test_training_matches_eager(model_name, opt_name):
    run_case(model_name, opt_name, "lazy")


@pytest.mark.emulator
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
    changes every step: a scalar graph input, so no recompiles). Not in the emulator
    pass: test_training_matches_eager's cases run its ops there."""
    torch.manual_seed(0)
    model, x, y, loss_fn = MODELS["embedding_mlp"]()
    lazy, eager = train_both(model, x, y, loss_fn, OPTIMIZERS["sgd_momentum"], "lazy", steps=5,
                             clip=0.5, micro_batches=2, schedule=True)
    assert_same_training(lazy, eager)


@pytest.mark.emulator
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
