"""FFTs (`_fft_r2c`, `_fft_c2r`, `_fft_c2c`, so `torch.fft.*`) as DFT matmuls.

torch-mlir has no FFT lowering. Here each transformed dim is one matmul by the DFT's
cosine and sine matrices, built in the graph from `arange` (shape-only values, so the
lazy device's decomposition templates capture them), with the angle 2*pi*(k*m mod n)/n
taken in float64 from exact integers and the matrices then cast to the input's
precision. Complex values travel as (real, imaginary) pairs of real tensors and
become complex only at the end (`torch.complex`, which the cpu target lowers).

Cost: O(n^2) per transformed dim of length n (per row), against the FFT's O(n log n),
and an n x n matrix pair per dim. Above MAX_LENGTH a transform is not decomposed: the
op stays as it is, falls back to eager at the sync point, counted and warned as
every fallback. Sums in a different order than pocketfft's: float32 results differ
from eager's by ~sqrt(n) ulp.
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten

# The longest transformed dim decomposed (two 1024 x 1024 matrices; a matmul of
# 2n^2 flops per row).
MAX_LENGTH = 1024


def _twiddles(n_in: int, n_out: int, period: int, dtype, device, weights=None):
    """cos and sin of 2*pi*k*m/period for m < n_in (rows), k < n_out (columns)."""
    m = torch.arange(n_in, device=device).unsqueeze(1)
    k = torch.arange(n_out, device=device).unsqueeze(0)
    turns = torch.remainder(m * k, period).to(torch.float64) * (2 * math.pi / period)
    cos, sin = torch.cos(turns), torch.sin(turns)
    if weights is not None:
        cos, sin = cos * weights.unsqueeze(1), sin * weights.unsqueeze(1)
    return cos.to(dtype), sin.to(dtype)


def _dft(re, im, dim: int, n_out: int, sign: int):
    """sum_m x[m] e^(sign 2 pi i k m / n) along `dim` (length n) for k < n_out, on
    (re, im) pairs (`im` None: a real input)."""
    n = re.shape[dim]
    cos, sin = _twiddles(n, n_out, n, re.dtype, re.device)
    re = re.movedim(dim, -1)
    out_re, out_im = re @ cos, re @ sin * sign
    if im is not None:
        im = im.movedim(dim, -1)
        out_re = out_re - im @ sin * sign
        out_im = out_im + im @ cos
    return out_re.movedim(-1, dim), out_im.movedim(-1, dim)


def _normalize(re, im, normalization: int, size: int):
    """normalization: 0 none, 1 by 1/sqrt(size), 2 by 1/size (aten's fft_norm_mode)."""
    if normalization == 0:
        return re, im
    scale = 1 / math.sqrt(size) if normalization == 1 else 1 / size
    return re * scale, im * scale


def _too_long(sizes) -> bool:
    return any(s > MAX_LENGTH for s in sizes)


def _dims(x, dim) -> list[int]:
    return [d % x.dim() for d in dim]


def fft_r2c(self, dim, normalization, onesided):
    dim = _dims(self, dim)
    sizes = [self.shape[d] for d in dim]
    if _too_long(sizes) or self.dtype not in (torch.float32, torch.float64):
        return NotImplemented
    last = dim[-1]
    n = self.shape[last]
    re, im = _dft(self, None, last, n // 2 + 1 if onesided else n, -1)
    for d in dim[:-1]:
        re, im = _dft(re, im, d, re.shape[d], -1)
    re, im = _normalize(re, im, normalization, math.prod(sizes))
    return torch.complex(re, im)


def fft_c2c(self, dim, normalization, forward):
    dim = _dims(self, dim)
    sizes = [self.shape[d] for d in dim]
    if _too_long(sizes) or self.dtype not in (torch.complex64, torch.complex128):
        return NotImplemented
    re, im = self.real, self.imag
    for d in dim:
        re, im = _dft(re, im, d, re.shape[d], -1 if forward else 1)
    re, im = _normalize(re, im, normalization, math.prod(sizes))
    return torch.complex(re, im)


def fft_c2r(self, dim, normalization, last_dim_size):
    """The inverse of a onesided r2c: an inverse c2c over all but the last dim, then the
    real inverse over the last, where bin k stands for itself and its mirror n - k
    (weight 2; 1 for bin 0 and, n even, bin n/2, whose imaginary parts eager ignores)."""
    dim = _dims(self, dim)
    n = last_dim_size
    sizes = [self.shape[d] for d in dim[:-1]] + [n]
    if _too_long(sizes) or self.dtype not in (torch.complex64, torch.complex128):
        return NotImplemented
    re, im = self.real, self.imag
    for d in dim[:-1]:
        re, im = _dft(re, im, d, re.shape[d], 1)
    last = dim[-1]
    bins = n // 2 + 1
    have = re.shape[last]
    if have >= bins:
        re, im = re.narrow(last, 0, bins), im.narrow(last, 0, bins)
    else:  # missing bins are zeros
        pad = [0, 0] * (re.dim() - 1 - last) + [0, bins - have]
        re, im = aten.constant_pad_nd(re, pad, 0.0), aten.constant_pad_nd(im, pad, 0.0)
    k = torch.arange(bins, device=re.device)
    weights = torch.where((k == 0) | (k * 2 == n), 1.0, 2.0).to(torch.float64)
    cos, sin = _twiddles(bins, n, n, re.dtype, re.device, weights)
    out = re.movedim(last, -1) @ cos - im.movedim(last, -1) @ sin
    out = out.movedim(-1, last)
    if normalization:
        out = out * (1 / math.sqrt(math.prod(sizes)) if normalization == 1
                     else 1 / math.prod(sizes))
    return out


TABLE = {
    aten._fft_r2c.default: fft_r2c,
    aten._fft_c2c.default: fft_c2c,
    aten._fft_c2r.default: fft_c2r,
}
