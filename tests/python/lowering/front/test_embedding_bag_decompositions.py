"""The embedding_bag decompositions (lowering/front/embedding_bag.py), run on CPU tensors,
against eager's own kernels: every mode with padding, empty bags, sample weights and a last
offset, fed by eager's forward results and by the decomposition's (whose offset2bag and
bag_size differ in shape). The compiled path is tested in e2e/test_layers.py."""

from __future__ import annotations

import pytest
import torch

from lazymlir.lowering.front import embedding_bag as decomposed

aten = torch.ops.aten

ROWS, WIDTH = 7, 3
# Indices repeat inside a bag and across bags; the third bag is empty.
INDICES = torch.tensor([1, 2, 2, 5, 1, 3, 6, 1, 0, 2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [-1, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_weight_gradient_matches_eager(dtype, mode, padding_idx, include_last_offset):
    g = torch.Generator().manual_seed(mode)
    offsets = torch.tensor([0, 3, 3, 7] + ([10] if include_last_offset else []))
    weight = torch.randn(ROWS, WIDTH, dtype=dtype, generator=g)
    for sample_weights in ([None, torch.randn(10, dtype=dtype, generator=g)] if mode == 0
                           else [None]):
        args = (False, mode, False, sample_weights, include_last_offset, padding_idx)
        eager = aten._embedding_bag(weight, INDICES, offsets, *args)
        ours = decomposed.embedding_bag(weight, INDICES, offsets, *args)
        torch.testing.assert_close(ours[0], eager[0])
        grad = torch.randn(eager[0].shape, dtype=dtype, generator=g)
        for scale in ([False, True] if mode == 2 else [False]):  # max ignores the flag
            expected = aten._embedding_bag_backward(grad, INDICES, offsets, *eager[1:], ROWS,
                                                    scale, mode, False, sample_weights,
                                                    padding_idx)
            for forward in (eager, ours):
                got = decomposed.embedding_bag_backward(grad, INDICES, offsets, *forward[1:],
                                                        ROWS, scale, mode, False,
                                                        sample_weights, padding_idx)
                torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_frequency_scaling_of_sums_is_left_to_eager():
    # Eager's CPU kernel divides by another index's count there (embedding_bag.py).
    offsets = torch.tensor([0, 3, 3, 7])
    eager = aten._embedding_bag(torch.randn(ROWS, WIDTH), INDICES, offsets, True, 0)
    out = decomposed.embedding_bag_backward(torch.ones(4, WIDTH), INDICES, offsets, *eager[1:],
                                            ROWS, True, 0, False, None, -1)
    assert out is NotImplemented
