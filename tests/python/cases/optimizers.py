"""The optimizers the model tests and benchmarks train with, by name (torch only: the
benchmarks import it outside pytest)."""

from __future__ import annotations

import torch

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
