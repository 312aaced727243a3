"""Small models for the benchmarks: a GPT (training step) and its block (inference).

The GPT is the usual decoder-only shape at toy size: token and position
embeddings, `layers` blocks of causal self-attention (masked_fill + softmax)
and a GELU MLP, each behind a LayerNorm with a residual, a final LayerNorm
and an output head tied to the token embedding; cross-entropy loss. Written
with plain tensor ops (no fused attention kernel) so every op goes through
the lazy device's tracer and compiler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 256
    d: int = 128
    heads: int = 4
    seq: int = 64
    layers: int = 2
    batch: int = 8


class Block(nn.Module):
    """Pre-LayerNorm transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        d = config.d
        self.heads = config.heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        # True above the diagonal: a position may not attend to later ones.
        self.register_buffer("mask", torch.triu(torch.ones(config.seq, config.seq,
                                                           dtype=torch.bool), diagonal=1))

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        hd = c // self.heads
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab, config.d)
        self.positions = nn.Parameter(0.02 * torch.randn(config.seq, config.d))
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.d)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tokens(idx) + self.positions[:t]
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.tokens.weight.t()  # head tied to the embedding
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def gpt(config: GPTConfig = GPTConfig(), seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(config)


def block(config: GPTConfig = GPTConfig(), seed: int = 0) -> Block:
    torch.manual_seed(seed)
    return Block(config).eval()


def gpt_batch(config: GPTConfig = GPTConfig(), seed: int = 1):
    """(tokens, next tokens) of shape (batch, seq): random, fixed by the seed."""
    generator = torch.Generator().manual_seed(seed)
    data = torch.randint(0, config.vocab, (config.batch, config.seq + 1), generator=generator)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()
