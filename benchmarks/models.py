"""Small, ordinary PyTorch models shared by the benchmarks and the model tests.

Written the way users write them (nn.Module, F.* calls, no lazymlir-specific code), so
the tests and the benchmark rows exercise what real training code does: a GPT with
tied embeddings and causal attention (through `masked_fill` + softmax or through
`F.scaled_dot_product_attention(is_causal=True)`), and a training step with
cross-entropy, AdamW and gradient clipping.
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
    seq: int = 64
    dim: int = 128
    heads: int = 4
    layers: int = 2
    sdpa: bool = False   # attention through F.scaled_dot_product_attention(is_causal=True)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads, self.sdpa = cfg.heads, cfg.sdpa
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.register_buffer("causal", torch.tril(torch.ones(cfg.seq, cfg.seq, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            att = att.masked_fill(~self.causal[:t, :t], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(),
                                 nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq, cfg.dim)
        self.blocks = nn.Sequential(*(Block(cfg) for _ in range(cfg.layers)))
        self.ln = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.head.weight = self.tok.weight     # tied input/output embeddings

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.tok(idx) + self.pos(pos))
        return self.head(self.ln(x))


def gpt_batch(cfg: GPTConfig, batch: int, generator: torch.Generator | None = None):
    """Random token ids and next-token targets, on the CPU."""
    idx = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=generator)
    return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()


def gpt_loss(model: GPT, idx, targets):
    logits = model(idx)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def gpt_train_step(model: GPT, opt: torch.optim.Optimizer, idx, targets, clip: float = 1.0):
    """One AdamW-style step with gradient clipping; returns the (lazy or eager) loss."""
    opt.zero_grad(set_to_none=True)
    loss = gpt_loss(model, idx, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return loss


BENCH_BATCH = 8


def gpt(cfg: GPTConfig = GPTConfig(), seed: int = 0) -> GPT:
    """The benchmark GPT with weights fixed by `seed`."""
    torch.manual_seed(seed)
    return GPT(cfg)


def block(cfg: GPTConfig = GPTConfig(), seed: int = 0) -> Block:
    """One transformer block in eval mode, weights fixed by `seed`."""
    torch.manual_seed(seed)
    return Block(cfg).eval()
