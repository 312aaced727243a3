"""The lazy_mlir device's random generator state: a Philox seed and a counter offset.

Random ops compile to Philox4x32-10 arithmetic (lowering/front/philox.py) whose seed
and offset are graph inputs. Drawing `n` counters hands out the current (seed, offset)
and advances the offset by `n`, so successive graphs (and successive random ops of one
graph) read disjoint counters, and nothing about the stream is baked into a compiled
graph. `torch.manual_seed(s)` (through the device module's `manual_seed_all`) sets the
seed and rewinds the offset, as CUDA's Philox generator does. One state per session
(lazymlir/session.py).
"""

from __future__ import annotations

import threading

import torch

# PyTorch's default seed (c10::default_rng_seed_val), which CPU and CUDA start from.
DEFAULT_SEED = 67280421310721


class RngState:
    """Thread-safe (seed, offset) pair; `reserve` is the only way to draw counters."""

    def __init__(self, seed: int = DEFAULT_SEED):
        self._lock = threading.Lock()
        self.seed = seed
        self.offset = 0

    def manual_seed(self, seed: int) -> None:
        with self._lock:
            # A seed is 64 bits, stored as int64 in the graph input (two's complement).
            self.seed = _as_int64(int(seed))
            self.offset = 0

    def reserve(self, counters: int) -> tuple[int, int]:
        """(seed, first counter) for `counters` consecutive counters, taken from the stream."""
        with self._lock:
            drawn = (self.seed, self.offset)
            self.offset = _as_int64(self.offset + counters)
            return drawn

    def get_state(self) -> torch.Tensor:
        """16 bytes, seed then offset as int64 (the layout of CUDA's Philox state)."""
        with self._lock:
            return torch.tensor([self.seed, self.offset], dtype=torch.int64).view(torch.uint8)

    def set_state(self, state: torch.Tensor) -> None:
        values = state.detach().to("cpu", torch.uint8).contiguous()
        if values.numel() != 16:
            raise RuntimeError(f"lazy_mlir RNG state must be 16 bytes (seed, offset), "
                               f"got {values.numel()}")
        seed, offset = values.view(torch.int64).tolist()
        with self._lock:
            self.seed, self.offset = seed, offset


def _as_int64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value
