"""The DFT decompositions of lowering/front/fft.py on CPU tensors against eager's FFT
kernels: every normalization, one and several dims, both directions, odd and even
output lengths (the compiled path is tested in e2e/test_fft.py)."""

from __future__ import annotations

import pytest
import torch

from lazymlir.lowering.front import fft

aten = torch.ops.aten


@pytest.mark.parametrize("real,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("dims", [[2], [1, 2], [0, 2], [0, 1, 2], [1]])
def test_transforms_match_eager(real, tol, dims):
    g = torch.Generator().manual_seed(len(dims))
    x = torch.randn(3, 5, 6, dtype=real, generator=g)
    c = torch.randn(3, 5, 6, dtype=real.to_complex(), generator=g)
    for norm in (0, 1, 2):
        for onesided in (True, False):
            torch.testing.assert_close(fft.fft_r2c(x, dims, norm, onesided),
                                       aten._fft_r2c(x, dims, norm, onesided), rtol=tol, atol=tol)
        for forward in (True, False):
            torch.testing.assert_close(fft.fft_c2c(c, dims, norm, forward),
                                       aten._fft_c2c(c, dims, norm, forward), rtol=tol, atol=tol)
        bins = c.shape[dims[-1]]
        for n in (2 * bins - 2, 2 * bins - 1):  # both have n // 2 + 1 = bins
            torch.testing.assert_close(fft.fft_c2r(c, dims, norm, n),
                                       aten._fft_c2r(c, dims, norm, n), rtol=tol, atol=tol)


def test_past_the_length_cap_the_op_is_left_alone():
    x = torch.randn(fft.MAX_LENGTH + 1)
    assert fft.fft_r2c(x, [0], 0, True) is NotImplemented
