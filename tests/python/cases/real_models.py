"""Networks shaped like the ones people train, at the size of their graphs, for the
real-size tests (tests/python/e2e/test_real_size.py) and benchmarks.

Each builder returns (model, inputs, targets, loss_fn). The layer structure (depth, number
of parameter tensors, kinds of layers, the graph's node and buffer counts) is the real
network's; widths and input sizes are small so a training step computes little while its
graph stays as large as the real one's:

- MobileNetV3-like: depthwise convolutions, squeeze-excitation, hardswish/hardsigmoid.
- EfficientNet-like: MBConv blocks with SiLU, squeeze-excitation, stochastic depth.
- ConvNeXt-like: 7x7 depthwise convolutions, LayerNorm over channels_last via permutes,
  layer scale, LayerNorm-and-stride-2 downsampling, adaptive average pooling.
- Swin-like: window attention with shifted windows (torch.roll and a mask), padding to a
  window multiple, relative position bias, patch merging.
- DenseNet-like: concatenation-heavy dense blocks, transitions with average pooling.
- ViT-like: patch embedding, class token, position embedding, pre-norm blocks.
- GPT-2-like: a 12-block decoder stack with causal attention and tied embeddings.

Written here, not taken from torchvision or timm: neither is installed by the test extras,
and the definitions stay readable next to the tests that use them.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# The BatchNorm networks (MobileNet, EfficientNet, DenseNet) take 64x64 inputs: at 32x32
# their last stages run at 1x1, where BatchNorm normalizes two values per channel (batch
# 2) and its backward amplifies rounding so much that eager float64 and eager float64 on
# channels_last end far apart after 3 steps (EfficientNet: running_var 5.8e9 apart,
# DenseNet 6e-6, MobileNet 3.3e-9); at 64x64 (2x2) they are 1e-11 to 1e-13 apart.
def _classifier_batch(channels=3, size=32, classes=10, batch=2):
    return torch.randn(batch, channels, size, size), torch.randint(0, classes, (batch,))


# ---------------------------------------------------------------------------- MobileNetV3


class SqueezeExcite(nn.Module):
    def __init__(self, channels, reduced, gate=nn.Hardsigmoid, act=nn.ReLU):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.expand(self.act(self.reduce(s))))


def _conv_bn(cin, cout, k, stride=1, groups=1, act=None):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV3's block (EfficientNet's MBConv with other activations)."""

    def __init__(self, cin, expand, cout, k, stride, se, act, se_gate=nn.Hardsigmoid,
                 drop_path=0.0):
        super().__init__()
        self.residual = stride == 1 and cin == cout
        layers = [] if expand == cin else [_conv_bn(cin, expand, 1, act=act)]
        layers.append(_conv_bn(expand, expand, k, stride, groups=expand, act=act))
        if se:
            layers.append(SqueezeExcite(expand, max(8, expand // 4), gate=se_gate,
                                        act=nn.ReLU if se_gate is nn.Hardsigmoid else nn.SiLU))
        layers.append(_conv_bn(expand, cout, 1))
        self.block = nn.Sequential(*layers)
        self.drop_path = drop_path

    def forward(self, x):
        y = self.block(x)
        if not self.residual:
            return y
        if self.training and self.drop_path > 0:  # stochastic depth, per sample
            keep = 1 - self.drop_path
            mask = torch.empty(y.shape[0], 1, 1, 1, dtype=y.dtype, device=y.device)
            y = y * mask.bernoulli_(keep) / keep
        return x + y


# (kernel, expanded, out, squeeze-excite, activation, stride) as MobileNetV3-Small.
_MOBILENET_V3_SMALL = [
    (3, 16, 16, True, nn.ReLU, 2), (3, 72, 24, False, nn.ReLU, 2),
    (3, 88, 24, False, nn.ReLU, 1), (5, 96, 40, True, nn.Hardswish, 2),
    (5, 240, 40, True, nn.Hardswish, 1), (5, 240, 40, True, nn.Hardswish, 1),
    (5, 120, 48, True, nn.Hardswish, 1), (5, 144, 48, True, nn.Hardswish, 1),
    (5, 288, 96, True, nn.Hardswish, 2), (5, 576, 96, True, nn.Hardswish, 1),
    (5, 576, 96, True, nn.Hardswish, 1),
]


def mobilenet_v3_small(width=0.25, classes=10):
    """MobileNetV3-Small's 11 blocks at a quarter of its width."""
    def ch(c):
        return max(8, int(c * width) // 8 * 8)
    layers = [_conv_bn(3, ch(16), 3, 2, act=nn.Hardswish)]
    cin = ch(16)
    for k, expand, cout, se, act, stride in _MOBILENET_V3_SMALL:
        layers.append(InvertedResidual(cin, ch(expand), ch(cout), k, stride, se, act))
        cin = ch(cout)
    layers += [_conv_bn(cin, ch(576), 1, act=nn.Hardswish), nn.AdaptiveAvgPool2d(1),
               nn.Flatten(), nn.Linear(ch(576), 64), nn.Hardswish(), nn.Dropout(0.0),
               nn.Linear(64, classes)]
    x, y = _classifier_batch(size=64)  # at 32x32 the last stage is 1x1 (above)
    return nn.Sequential(*layers), x, y, F.cross_entropy


# ------------------------------------------------------------------------- EfficientNet

# (expand ratio, kernel, stride, out, repeats) as EfficientNet-B0.
_EFFICIENTNET_B0 = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                    (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]


def efficientnet_b0(width=0.25, classes=10, drop_path=0.2):
    """EfficientNet-B0's 16 MBConv blocks (SiLU, squeeze-excitation, stochastic depth)
    at a quarter of its width."""
    def ch(c):
        return max(8, int(c * width) // 8 * 8)
    layers = [_conv_bn(3, ch(32), 3, 2, act=nn.SiLU)]
    cin, blocks = ch(32), sum(r for *_, r in _EFFICIENTNET_B0)
    index = 0
    for ratio, k, stride, cout, repeats in _EFFICIENTNET_B0:
        for r in range(repeats):
            layers.append(InvertedResidual(cin, cin * ratio, ch(cout), k,
                                           stride if r == 0 else 1, True, nn.SiLU,
                                           se_gate=nn.Sigmoid,
                                           drop_path=drop_path * index / blocks))
            cin, index = ch(cout), index + 1
    layers += [_conv_bn(cin, ch(1280), 1, act=nn.SiLU), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(ch(1280), classes)]
    x, y = _classifier_batch(size=64)  # at 32x32 the last stage is 1x1 (above)
    return nn.Sequential(*layers), x, y, F.cross_entropy


# ----------------------------------------------------------------------------- ConvNeXt


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor, as ConvNeXt's downsampling writes
    it: permute to channels-last, normalize, permute back."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim, layer_scale=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1, self.pwconv2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


def convnext_tiny(dims=(16, 32, 64, 128), depths=(3, 3, 9, 3), classes=10):
    """ConvNeXt-Tiny's 18 blocks and 4 stages at an eighth of its width (layer scale
    0.1 instead of 1e-6, so the blocks' gradients are not all below float noise)."""
    layers = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6)]
    for i, (dim, depth) in enumerate(zip(dims, depths)):
        if i:
            layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
        layers += [ConvNeXtBlock(dim, layer_scale=0.1) for _ in range(depth)]
    head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(dims[-1], eps=1e-6),
            nn.Linear(dims[-1], classes)]
    x, y = _classifier_batch(size=64)
    return nn.Sequential(*layers, *head), x, y, F.cross_entropy


# --------------------------------------------------------------------------------- Swin


def _windows(x, w):
    """(B, H, W, C) -> (B * windows, w * w, C)."""
    b, h, wd, c = x.shape
    x = x.view(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, w * w, c)


def _unwindow(x, w, b, h, wd):
    c = x.shape[-1]
    x = x.view(b, h // w, wd // w, w, w, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, h, wd, c)


class WindowAttention(nn.Module):
    def __init__(self, dim, heads, window):
        super().__init__()
        self.heads, self.window = heads, window
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.bias_table = nn.Parameter(0.02 * torch.randn((2 * window - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                            indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
        self.register_buffer("bias_index", rel[..., 0] * (2 * window - 1) + rel[..., 1],
                             persistent=False)

    def forward(self, x, mask=None):
        bw, n, c = x.shape
        q, k, v = self.qkv(x).view(bw, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.bias_table[self.bias_index.reshape(-1)].view(n, n, -1).permute(2, 0, 1)
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            windows = mask.shape[0]
            attn = attn.view(bw // windows, windows, self.heads, n, n) + mask[None, :, None]
            attn = attn.view(bw, self.heads, n, n)
        out = (attn.softmax(-1) @ v).transpose(1, 2).reshape(bw, n, c)
        return self.proj(out)


class SwinBlock(nn.Module):
    def __init__(self, dim, heads, window, shift):
        super().__init__()
        self.window, self.shift = window, shift
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, window)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def _shift_mask(self, h, w, device):
        """-100 where a shifted window mixes regions that are not neighbours."""
        region = torch.zeros(1, h, w, 1, device=device)
        cuts = (slice(0, -self.window), slice(-self.window, -self.shift),
                slice(-self.shift, None))
        count = 0
        for hs in cuts:
            for ws in cuts:
                region[:, hs, ws, :] = count
                count += 1
        ids = _windows(region, self.window).squeeze(-1)
        diff = ids[:, None, :] - ids[:, :, None]
        return diff.ne(0).to(torch.float32) * -100.0

    def forward(self, x):
        b, h, w, c = x.shape
        y = self.norm1(x)
        # Pad to a window multiple (Swin's stages whose size the window does not divide).
        ph, pw = (-h) % self.window, (-w) % self.window
        y = F.pad(y, (0, 0, 0, pw, 0, ph))
        hp, wp = h + ph, w + pw
        mask = None
        if self.shift:
            y = torch.roll(y, (-self.shift, -self.shift), (1, 2))
            mask = self._shift_mask(hp, wp, x.device)
        y = _unwindow(self.attn(_windows(y, self.window), mask), self.window, b, hp, wp)
        if self.shift:
            y = torch.roll(y, (self.shift, self.shift), (1, 2))
        x = x + y[:, :h, :w]
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm, self.reduction = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        x = F.pad(x, (0, 0, 0, x.shape[2] % 2, 0, x.shape[1] % 2))  # odd sizes, as Swin
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]],
                      -1)
        return self.reduction(self.norm(x))


class Swin(nn.Module):
    """Swin-T's 12 blocks in 4 stages (window 4 instead of 7, an eighth of its width);
    the 48x48 input leaves stage 2 a 6x6 grid, padded to 8x8 for its windows, and
    stage 3 a 3x3 one, padded to 4x4 for patch merging."""

    def __init__(self, dim=16, depths=(2, 2, 6, 2), heads=(1, 2, 4, 8), window=4, classes=10):
        super().__init__()
        self.embed, self.embed_norm = nn.Conv2d(3, dim, 4, 4), nn.LayerNorm(dim)
        stages = []
        for i, (depth, h) in enumerate(zip(depths, heads)):
            d = dim * 2 ** i
            blocks = [SwinBlock(d, h, window, 0 if j % 2 == 0 else window // 2)
                      for j in range(depth)]
            if i < len(depths) - 1:
                blocks.append(PatchMerging(d))
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(dim * 2 ** (len(depths) - 1))
        self.head = nn.Linear(dim * 2 ** (len(depths) - 1), classes)

    def forward(self, x):
        x = self.embed_norm(self.embed(x).permute(0, 2, 3, 1))
        x = self.norm(self.stages(x))
        return self.head(x.mean((1, 2)))


def swin_tiny():
    x, y = _classifier_batch(size=48)
    return Swin(), x, y, F.cross_entropy


# ----------------------------------------------------------------------------- DenseNet


class DenseLayer(nn.Module):
    def __init__(self, cin, growth, bottleneck=4):
        super().__init__()
        self.norm1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, bottleneck * growth, 1,
                                                                bias=False)
        self.norm2 = nn.BatchNorm2d(bottleneck * growth)
        self.conv2 = nn.Conv2d(bottleneck * growth, growth, 3, padding=1, bias=False)

    def forward(self, features):
        x = self.conv1(F.relu(self.norm1(torch.cat(features, 1))))
        return self.conv2(F.relu(self.norm2(x)))


class DenseBlock(nn.Module):
    def __init__(self, layers, cin, growth):
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(cin + i * growth, growth) for i in range(layers))

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


def densenet121(growth=8, blocks=(6, 12, 24, 16), classes=10):
    """DenseNet-121's 58 dense layers (every layer concatenates all before it) at a
    quarter of its growth rate."""
    cin = 2 * growth
    layers = [nn.Conv2d(3, cin, 7, 2, 3, bias=False), nn.BatchNorm2d(cin), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    for i, n in enumerate(blocks):
        layers.append(DenseBlock(n, cin, growth))
        cin += n * growth
        if i < len(blocks) - 1:
            layers += [nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, cin // 2, 1, bias=False),
                       nn.AvgPool2d(2, 2)]
            cin //= 2
    layers += [nn.BatchNorm2d(cin), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(cin, classes)]
    x, y = _classifier_batch(size=64)  # at 32x32 the last block is 1x1 (above)
    return nn.Sequential(*layers), x, y, F.cross_entropy


# ---------------------------------------------------------------------------- ViT, GPT-2


class Block(nn.Module):
    """A pre-norm transformer block; causal attention for decoders."""

    def __init__(self, dim, heads, causal, dropout=0.0):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads) \
            .permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        if self.causal:
            pos = torch.arange(t, device=x.device)
            att = att.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.dropout(self.proj(y))
        return x + self.dropout(self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh")))


class ViT(nn.Module):
    """ViT-Tiny's 12 blocks (width 64 instead of 192) on 32x32 images, 4x4 patches."""

    def __init__(self, dim=64, depth=12, heads=4, patch=4, size=32, classes=10):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.pos = nn.Parameter(0.02 * torch.randn(1, (size // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, causal=False) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def vit_tiny():
    x, y = _classifier_batch(size=32)
    return ViT(), x, y, F.cross_entropy


class GPT2(nn.Module):
    """GPT-2-small's 12 decoder blocks (width 64 instead of 768), tied embeddings."""

    def __init__(self, vocab=256, dim=64, depth=12, heads=4, context=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, causal=True) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        for embedding in (self.wte, self.wpe):
            nn.init.normal_(embedding.weight, std=0.02)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.wte(idx) + self.wpe(pos))
        return self.head(self.ln_f(x))


def gpt2_small(batch=2, context=32, vocab=256):
    idx = torch.randint(0, vocab, (batch, context))
    targets = torch.randint(0, vocab, (batch, context))

    def loss_fn(logits, t):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1))

    return GPT2(vocab=vocab, context=context), idx, targets, loss_fn


MODELS = {
    "mobilenet_v3_small": mobilenet_v3_small,
    # Stochastic depth's masks come from the device's Philox stream, not CPU's (eager is
    # the reference here, number for number), so the equality test runs without it; random
    # masks in training graphs are e2e/test_random.py's.
    "efficientnet_b0": lambda: efficientnet_b0(drop_path=0.0),
    "convnext_tiny": convnext_tiny,
    "swin_tiny": swin_tiny,
    "densenet121": densenet121,
    "vit_tiny": vit_tiny,
    "gpt2_small": gpt2_small,
}

# How each network is trained (the slow tests and benchmarks/real_models.py), as usual:
# classifiers with SGD and momentum, transformers with AdamW and gradient clipping
# (names of optimizers.OPTIMIZERS).
TRANSFORMERS = ("vit_tiny", "gpt2_small", "swin_tiny")
OPTIMIZER = {name: "adamw" if name in TRANSFORMERS else "sgd_momentum" for name in MODELS}
CLIP = {name: 1.0 for name in TRANSFORMERS}
