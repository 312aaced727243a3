"""torch.fft on the lazy device and through torch.compile, against eager (float64, so the
DFT matmuls must match pocketfft to rounding), with no eager fallback up to
lowering/front/fft.py's MAX_LENGTH, and the usual counted fallback above it."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, assert_no_fallback

import lazymlir
import lazymlir.dynamo  # noqa: F401  registers backend="lazymlir" in a source checkout
from lazymlir.lowering.front import fft


def transforms(x, c):
    return (torch.fft.rfft(x), torch.fft.irfft(c), torch.fft.fft(c),
            torch.fft.ifft(x, norm="ortho"), torch.fft.fft2(x),
            torch.fft.rfft2(x, norm="forward"), torch.fft.irfftn(c, s=(5, 7)),
            torch.fft.hfft(c), torch.fft.hfft2(c), torch.fft.hfftn(c), torch.fft.ihfft(x))


# The lazy device's side runs in the OpInfo CI tier (fft.* in float32, no fallback);
# float64 here, through torch.compile, checks the DFT matmuls to rounding.
@pytest.mark.parametrize("compiled", [True])
def test_fft_compiles(compiled):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, dtype=torch.float64, generator=g)
    c = torch.randn(4, 5, dtype=torch.complex128, generator=g)
    expected = transforms(x, c)
    lazymlir.metrics.reset()
    torch._dynamo.reset()
    if compiled:
        got = torch.compile(transforms, backend="lazymlir", dynamic=False)(x, c)
    else:
        got = [t.cpu() for t in transforms(x.to(DEVICE), c.to(DEVICE))]
    for i, (a, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-9, msg=lambda m, i=i: f"{i}: {m}")
    assert_no_fallback()


def test_a_transform_past_the_length_cap_falls_back():
    x = torch.randn(2, fft.MAX_LENGTH + 1)
    lazymlir.metrics.reset()
    lazymlir.session.current().warned.discard("aten::_fft_r2c")  # warned once per session
    with pytest.warns(UserWarning, match="aten::_fft_r2c has no lowering here"):
        got = torch.fft.rfft(x.to(DEVICE)).cpu()
    torch.testing.assert_close(got, torch.fft.rfft(x))
    assert lazymlir.metrics.fallback_ops() == {"aten::_fft_r2c": 1}
