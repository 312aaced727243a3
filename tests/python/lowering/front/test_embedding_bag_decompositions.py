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
        for scale in (False, True):  # scale_grad_by_freq (max ignores it)
            expected = aten._embedding_bag_backward(grad, INDICES, offsets, *eager[1:], ROWS,
                                                    scale, mode, False, sample_weights,
                                                    padding_idx)
            for forward in (eager, ours):
                got = decomposed.embedding_bag_backward(grad, INDICES, offsets, *forward[1:],
                                                        ROWS, scale, mode, False,
                                                        sample_weights, padding_idx)
                torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("mode", [0, 1])
def test_frequency_scaling_divides_as_eagers_cpu_kernel(mode):
    """Eager's CPU kernel divides the k-th distinct row's gradient by the count of the
    k-th smallest index, not by the row's own count (embedding_bag._eager_frequency).
    Sorted, the indices are [0, 0, 1, 1, 4, 4, 4, 9]: rows 0, 1, 4, 9 are divided by the
    counts of 0, 0, 1, 1, i.e. 2, 2, 2, 2, where their own counts are 2, 2, 3, 1."""
    indices = torch.tensor([4, 0, 9, 1, 4, 0, 1, 4])
    offsets = torch.tensor([0, 3, 3, 6])
    weight = torch.randn(10, 2, dtype=torch.float64)
    eager = aten._embedding_bag(weight, indices, offsets, True, mode)
    grad = torch.ones(4, 2, dtype=torch.float64)
    expected = aten._embedding_bag_backward(grad, indices, offsets, *eager[1:], 10, True,
                                            mode, False, None, -1)
    got = decomposed.embedding_bag_backward(grad, indices, offsets, *eager[1:], 10, True,
                                            mode, False, None, -1)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    unscaled = aten._embedding_bag_backward(grad, indices, offsets, *eager[1:], 10, False,
                                            mode, False, None, -1)
    own = torch.bincount(indices, minlength=10).clamp(min=1).to(torch.float64)
    assert not torch.allclose(expected, unscaled / own.unsqueeze(1))  # the quirk is real
