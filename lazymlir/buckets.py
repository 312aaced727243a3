"""Opt-in shape bucketing for sequence lengths: pad on the host, compile per bucket.

lazymlir compiles static shapes: a loop whose sequence grows by one (a decoding loop)
compiles one graph per length. Padding every sequence to a *bucket* and passing a mask
bounds that: with `multiple=64`, lengths 1..64 use the buckets 1, 2, 4, ..., 64 (powers
of two) and longer ones the multiples of 64, so lengths 1..L compile at most
7 + L/64 graphs. This is PyTorch/XLA users' practice, made explicit; nothing pads
behind your back (full dynamic-shape compilation is not implemented).

`pad_to_bucket` pads on the host: a lazy tensor is read back first (a sync; meant for
token ids and masks, which are small), so every graph downstream sees bucket sizes
only. A pad recorded in the graph would make the graph depend on the unpadded length
again. Ops that reduce over the padded dimension must use the mask (attention masks,
masked means); positions past the length hold `value`.
"""

from __future__ import annotations

import torch


def bucket(length: int, multiple: int = 64) -> int:
    """The bucket of `length`: the next power of two up to `multiple`, beyond it the next
    multiple of `multiple`."""
    if length < 0 or multiple < 1:
        raise ValueError(f"bucket({length}, multiple={multiple}): need length >= 0, "
                         f"multiple >= 1")
    if length <= multiple:
        size = 1
        while size < length:
            size *= 2
        return min(size, multiple) if length else 1
    return -(-length // multiple) * multiple


def pad_to_bucket(x: torch.Tensor, dim: int = -1, value=0, multiple: int = 64
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(`x` padded with `value` along `dim` to its bucket, a bool mask of the bucket's
    length that is True at the real positions), both on `x`'s device."""
    device = x.device
    host = x.detach().to("cpu") if device.type != "cpu" else x
    length = host.shape[dim]
    size = bucket(length, multiple)
    dim = dim % host.dim()
    pad_shape = list(host.shape)
    pad_shape[dim] = size - length
    padded = torch.cat([host, torch.full(pad_shape, value, dtype=host.dtype)], dim)
    mask = torch.arange(size) < length
    return padded.to(device), mask.to(device)
