"""Opt-in bucketing (lazymlir.pad_to_bucket): a growing sequence compiles once per bucket."""

from __future__ import annotations

import torch
from conftest import DEVICE, assert_no_fallback

import lazymlir


def test_bucket_policy():
    assert [lazymlir.bucket(n, 8) for n in (0, 1, 2, 3, 5, 8, 9, 16, 17)] == \
        [1, 1, 2, 4, 8, 8, 16, 16, 24]
    assert lazymlir.bucket(100) == 128 and lazymlir.bucket(129) == 192


def test_growing_sequence_compiles_once_per_bucket():
    """Lengths 1..8 with multiple=4: buckets 1, 2, 4, 8 (4 graphs, not 8); the
    masked mean over the padded sequence equals eager's over the real one."""
    torch.manual_seed(0)
    tokens = torch.randn(8, 3)
    weight = torch.randn(3, 3).to(DEVICE)
    for n in range(1, 9):
        x, mask = lazymlir.pad_to_bucket(tokens[:n].to(DEVICE), dim=0, multiple=4)
        assert x.shape[0] == lazymlir.bucket(n, 4)
        m = mask.to(x.dtype)[:, None]
        got = ((x @ weight) * m).sum(0) / m.sum()
        expected = (tokens[:n] @ weight.cpu()).mean(0)
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert lazymlir.metrics.counter("UncachedCompile") == 4
    assert_no_fallback()
