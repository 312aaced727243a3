"""Random numbers as integer tensor arithmetic: Philox4x32-10 and the distributions on it.

Random ops (rand, randn, bernoulli, dropout, randint, exponential...) are written here
in terms of ordinary ATen integer and float ops, so a graph that draws random numbers
is a graph like any other: it lowers through torch-mlir's linalg path to both targets
with no new op, no runtime call and no state inside the compiled code. The tracer (lazy
device) and the torch.compile backend both replace a random op by these functions.

Why a decomposition and not a dedicated op lowered to linalg: torch-mlir has no random
ops it lowers (its `aten.uniform` lowering needs a seed global that our bufferized
graphs do not carry), a new op would need its own importer, linalg and GPU kernel
paths, and every op below already lowers on both targets. The cost is graph size
(about 120 elementwise int64 ops per random tensor; they fuse into one loop nest).

The generator is counter based (Random123's Philox4x32-10, which CUDA's curand and
inductor's Triton kernels use): the `seed_offset` input, an int64 tensor
`[seed, offset]`, is a *graph input*, so the stream advances from step to step
without recompiling. Counter `offset + i` (i < ceil(numel / 4)) keyed by `seed` gives
four 32-bit words, used for elements 4i..4i+3. A 32-bit word is held in an int64
tensor (torch has no uint32 arithmetic that lowers): products of two words wrap
modulo 2**64 in int64 exactly as in uint64, and an arithmetic shift followed by a
mask of 32 bits reads the high word.

The stream is not CPU's Mersenne Twister (no accelerator's is): the same seed gives
different numbers than eager CPU, with the same distributions.
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten

_MASK = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57      # Philox4x32 multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85      # Weyl key increments
ROUNDS = 10
WORDS = 4                              # 32-bit words per counter


def counters(numel: int) -> int:
    """How many counters (offset increments) a random tensor of `numel` elements uses."""
    return -(-numel // WORDS)


def _and(x, mask: int):
    return aten.bitwise_and.Scalar(x, mask)


def _shr(x, bits: int):
    """x >> bits (arithmetic). torch-mlir lowers only the Tensor-Tensor form of the
    shift: the amount is a 0-d tensor."""
    amount = aten.full.default([], bits, dtype=torch.int64, device=x.device)
    return aten.bitwise_right_shift.Tensor(x, amount)


def _shr32(x):
    """The high word of a 64-bit pattern (arithmetic shift, then mask: same bits)."""
    return _and(_shr(x, 32), _MASK)


def _xor(a, b):
    """a ^ b where a Python 0 stands for a zero word (the first rounds' zero counters)."""
    if isinstance(a, int) and a == 0:
        return b
    if isinstance(b, int) and b == 0:
        return a
    return aten.bitwise_xor.Tensor(a, b)


def _mulhilo(multiplier: int, x):
    if isinstance(x, int) and x == 0:
        return 0, 0
    product = aten.mul.Scalar(x, multiplier)    # < 2**64: wraps in int64 like uint64
    return _shr32(product), _and(product, _MASK)


def philox_words(seed_offset: torch.Tensor, count: int) -> list:
    """Four int64 tensors of shape (count,), 32-bit words of counters offset..offset+count-1.

    `seed_offset`: int64 tensor [seed, offset]. The counter is (lo, hi, 0, 0) of the
    64-bit value offset + i; the key (lo, hi) of seed."""
    seed = aten.select.int(seed_offset, 0, 0)
    offset = aten.select.int(seed_offset, 0, 1)
    index = aten.arange.start_step(0, count, 1, dtype=torch.int64, device=seed_offset.device)
    counter = aten.add.Tensor(index, offset)
    c = [_and(counter, _MASK), _shr32(counter), 0, 0]
    k0, k1 = _and(seed, _MASK), _shr32(seed)
    for r in range(ROUNDS):
        key0 = k0 if r == 0 else _and(aten.add.Scalar(k0, (r * _W0) & _MASK), _MASK)
        key1 = k1 if r == 0 else _and(aten.add.Scalar(k1, (r * _W1) & _MASK), _MASK)
        hi0, lo0 = _mulhilo(_M0, c[0])
        hi1, lo1 = _mulhilo(_M1, c[2])
        c = [_xor(_xor(hi1, c[1]), key0), lo1, _xor(_xor(hi0, c[3]), key1), lo0]
    return [_zeros_if_int(w, index) for w in c]


def _zeros_if_int(word, like):
    return aten.mul.Scalar(like, 0) if isinstance(word, int) else word


def random_words(seed_offset: torch.Tensor, numel: int) -> torch.Tensor:
    """int64 tensor (numel,) of independent uniform 32-bit words."""
    count = counters(numel)
    words = aten.stack.default(philox_words(seed_offset, count), 1)   # (count, 4)
    flat = aten.view.default(words, [count * WORDS])
    return flat if count * WORDS == numel else aten.slice.Tensor(flat, 0, 0, numel)


def _mantissa_bits(dtype: torch.dtype) -> int:
    return {torch.float64: 32, torch.float32: 24, torch.float16: 11,
            torch.bfloat16: 8}.get(dtype, 24)


def _unit(words, dtype: torch.dtype, *, open_low: bool = False):
    """Floats in [0, 1) (or (0, 1] with `open_low`) of `dtype`, each exactly representable:
    the top `bits` bits of a word times 2**-bits (float64 takes all 32 bits)."""
    bits = _mantissa_bits(dtype)
    top = words if bits == 32 else _shr(words, 32 - bits)
    if open_low:
        top = aten.add.Scalar(top, 1)
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    as_float = aten._to_copy.default(top, dtype=compute)
    return aten.mul.Scalar(as_float, 2.0 ** -bits)


def _shaped(flat, shape, dtype):
    out = aten.view.default(flat, list(shape))
    return out if out.dtype == dtype else aten._to_copy.default(out, dtype=dtype)


def uniform(seed_offset, shape, dtype, low: float = 0.0, high: float = 1.0):
    """`uniform_(low, high)`: U[low, high)."""
    numel = math.prod(shape)
    u = _unit(random_words(seed_offset, numel), dtype)
    if (low, high) != (0.0, 1.0):
        u = aten.add.Scalar(aten.mul.Scalar(u, high - low), low)
    return _shaped(u, shape, dtype)


def _standard_normal(seed_offset, numel: int, dtype):
    """Box-Muller on word pairs: (w0, w1) -> r cos, r sin; (w2, w3) likewise."""
    count = counters(numel)
    w = philox_words(seed_offset, count)
    pairs = []
    for a, b in ((w[0], w[1]), (w[2], w[3])):
        u1 = _unit(a, torch.float64 if dtype == torch.float64 else torch.float32,
                   open_low=True)       # (0, 1]: log is finite
        u2 = _unit(b, torch.float64 if dtype == torch.float64 else torch.float32)
        radius = aten.sqrt.default(aten.mul.Scalar(aten.log.default(u1), -2.0))
        angle = aten.mul.Scalar(u2, 2.0 * math.pi)
        pairs.append(aten.mul.Tensor(radius, aten.cos.default(angle)))
        pairs.append(aten.mul.Tensor(radius, aten.sin.default(angle)))
    # element 4i+j takes pairs[j] (the words' order, as random_words)
    z = aten.view.default(aten.stack.default(pairs, 1), [count * WORDS])
    return z if count * WORDS == numel else aten.slice.Tensor(z, 0, 0, numel)


def normal(seed_offset, shape, dtype, mean: float = 0.0, std: float = 1.0):
    """`normal_(mean, std)` with float mean and std."""
    z = _standard_normal(seed_offset, math.prod(shape), dtype)
    if (mean, std) != (0.0, 1.0):
        z = aten.add.Scalar(aten.mul.Scalar(z, std), mean)
    return _shaped(z, shape, dtype)


def normal_tensor(seed_offset, mean, std, shape, dtype):
    """normal with tensor mean and/or std (broadcast to `shape`)."""
    z = _shaped(_standard_normal(seed_offset, math.prod(shape), dtype), shape, dtype)
    z = aten.mul.Tensor(z, std) if isinstance(std, torch.Tensor) else aten.mul.Scalar(z, std)
    return aten.add.Tensor(z, mean) if isinstance(mean, torch.Tensor) \
        else aten.add.Scalar(z, mean)


def bernoulli(seed_offset, p, shape, dtype):
    """1 where u < p (p a float or a tensor broadcast to `shape`), else 0, of `dtype`."""
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    u = aten.view.default(_unit(random_words(seed_offset, math.prod(shape)), compute),
                          list(shape))
    keep = aten.lt.Tensor(u, p) if isinstance(p, torch.Tensor) else aten.lt.Scalar(u, p)
    return aten._to_copy.default(keep, dtype=dtype)


def dropout(seed_offset, input, p: float):
    """`native_dropout(input, p, train=True)`: (input * mask / (1 - p), mask as bool)."""
    shape = list(input.shape)
    u = aten.view.default(_unit(random_words(seed_offset, math.prod(shape)), torch.float32),
                          shape)
    mask = aten.lt.Scalar(u, 1.0 - p)
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    kept = aten.mul.Tensor(input, mask)
    return aten.mul.Scalar(kept, scale), mask


def randint(seed_offset, low: int, high: int, shape, dtype):
    """Integers in [low, high): a word (two words past 2**32 values) modulo the range."""
    numel = math.prod(shape)
    span = high - low
    if span <= 0:
        raise ValueError(f"random_ expects 'from' < 'to', got from={low} >= to={high}")
    if span <= 1 << 32:
        words = random_words(seed_offset, numel)
    else:   # 63 bits: two words per element
        pair = aten.view.default(random_words(seed_offset, 2 * numel), [numel, 2])
        high_word = _and(aten.select.int(pair, 1, 0), 0x7FFFFFFF)
        words = aten.add.Tensor(aten.mul.Scalar(high_word, 1 << 32),
                                aten.select.int(pair, 1, 1))
    value = aten.add.Scalar(aten.remainder.Scalar(words, span), low)
    return _shaped(value, shape, dtype)


def randperm(seed_offset, n: int, dtype=torch.int64):
    """A random permutation of 0..n-1: the argsort of 63-bit random keys (an argsort is a
    permutation whatever the ties, which 63 bits make rare). `sort.default`: torch-mlir
    lowers it, not `sort.stable`."""
    pair = aten.view.default(random_words(seed_offset, 2 * n), [n, 2])
    high_word = _and(aten.select.int(pair, 1, 0), 0x7FFFFFFF)
    keys = aten.add.Tensor(aten.mul.Scalar(high_word, 1 << 32), aten.select.int(pair, 1, 1))
    _, order = aten.sort.default(keys, 0)
    return order if dtype == torch.int64 else aten._to_copy.default(order, dtype=dtype)


def randint_counters(low: int, high: int, numel: int) -> int:
    return counters(numel if high - low <= 1 << 32 else 2 * numel)


def exponential(seed_offset, shape, dtype, lambd: float = 1.0):
    """-log(u) / lambd with u in (0, 1]."""
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    u = _unit(random_words(seed_offset, math.prod(shape)), compute, open_low=True)
    return _shaped(aten.mul.Scalar(aten.log.default(u), -1.0 / lambd), shape, dtype)


def multinomial_counters(probs, num_samples: int, replacement: bool) -> int:
    _check_multinomial(probs, num_samples, replacement)
    rows = probs.numel() // max(probs.shape[-1], 1)
    if replacement and num_samples > 1:
        return counters(rows * num_samples)
    return counters(probs.numel())


def _check_multinomial(probs, num_samples: int, replacement: bool) -> None:
    """Eager's shape and dtype errors (class and message), raised at the call."""
    if not probs.dtype.is_floating_point:
        raise RuntimeError(
            f"multinomial only supports floating-point dtypes for input, got: {probs.dtype}")
    if probs.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > probs.shape[-1]:
        raise RuntimeError(
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement")


def multinomial(seed_offset, probs, num_samples: int, replacement: bool = False):
    """`multinomial(probs, num_samples, replacement)`: int64 category indices drawn in
    proportion to the (unnormalized, non-negative) weights of each row.

    Without replacement (and for one sample either way): an exponential race. Each
    category gets E / p with E ~ Exp(1); the smallest keys win in order, which draws
    without replacement in proportion to p (the Gumbel-top-k trick). One sample is an
    argmin, linear in the row length (what sampling a token from a vocabulary does);
    more take a top-k. With replacement: each sample inverts the row's cumulative sum
    (the count of cumulative weights at or below u * total). Eager's checks of the
    weights' values (negative, inf/NaN, an all-zero row) are data-dependent: not made
    here (docs/random.md); the shape checks are the caller's."""
    _check_multinomial(probs, num_samples, replacement)
    n = probs.shape[-1]
    compute = torch.float64 if probs.dtype == torch.float64 else torch.float32
    weights = probs if probs.dtype == compute else aten._to_copy.default(probs, dtype=compute)
    if not replacement or num_samples == 1:
        e = exponential(seed_offset, list(probs.shape), compute)
        # A zero weight never wins (inf key; E / 0 would also give NaN where E = 0).
        keys = aten.where.self(aten.gt.Scalar(weights, 0.0), aten.div.Tensor(e, weights),
                               aten.full_like.default(e, math.inf))
        if num_samples == 1:
            return aten.argmin.default(keys, -1, True)
        return aten.topk.default(keys, num_samples, -1, False, True)[1]
    rows = list(probs.shape[:-1])
    cdf = aten.cumsum.default(weights, -1)
    total = aten.slice.Tensor(cdf, -1, n - 1, n)                       # [..., 1]
    u = uniform(seed_offset, rows + [num_samples], compute)          # [..., k]
    target = aten.mul.Tensor(u, total)
    below = aten.le.Tensor(aten.unsqueeze.default(cdf, -2), aten.unsqueeze.default(target, -1))
    index = aten.sum.dim_IntList(aten._to_copy.default(below, dtype=torch.int64), [-1])
    return aten.clamp_max.default(index, n - 1)   # u * total rounding up to total


# ------------------------------------------------------------------ ATen random ops
# Per functional random op: (counters it draws, given its arguments; its value, given
# `seed_offset` and its arguments). The lazy device's tracer and the torch.compile
# backend both replace an op of this table by `compute(seed_offset, *args, **kwargs)`
# with `seed_offset` taken from the device generator after reserving `counters(...)`.
# Factories (rand, randn, randint) reach only the torch.compile graphs: on the lazy
# device they arrive as empty + the in-place op's functional form.

def _numel(shape) -> int:
    return math.prod(shape)


def _default_dtype(dtype):
    return dtype if dtype is not None else torch.get_default_dtype()


def _random_bounds(dtype: torch.dtype) -> tuple[int, int]:
    """random_()'s default range: [0, 2**mantissa] for floats, [0, max] for integers."""
    if dtype == torch.bool:
        return 0, 2
    if dtype.is_floating_point:
        return 0, (1 << (torch.finfo(dtype).nmant + 1)) + 1
    return 0, torch.iinfo(dtype).max + 1


def _drop_eval(seed_offset, input, p, train=True):
    if train is False:
        return aten.clone.default(input), aten.ones_like.default(input, dtype=torch.bool)
    return dropout(seed_offset, input, float(p))


def _from_kwargs(fn):
    """Ignore factory-only keywords (layout, device, pin_memory, memory_format)."""
    def call(*args, dtype=None, layout=None, device=None, pin_memory=None,
             memory_format=None, **rest):
        return fn(*args, dtype=dtype, **rest)
    return call


def _shape_of(x) -> list:
    return list(x.shape)


RANDOM_OPS = {
    aten.uniform.default: (
        lambda self, low=0.0, high=1.0: counters(self.numel()),
        lambda so, self, low=0.0, high=1.0: uniform(so, _shape_of(self), self.dtype,
                                                     float(low), float(high))),
    aten.normal_functional.default: (
        lambda self, mean=0.0, std=1.0: counters(self.numel()),
        lambda so, self, mean=0.0, std=1.0: normal(so, _shape_of(self), self.dtype,
                                                   float(mean), float(std))),
    aten.normal.Tensor_float: (
        lambda mean, std=1.0: counters(mean.numel()),
        lambda so, mean, std=1.0: normal_tensor(so, mean, float(std), _shape_of(mean),
                                                mean.dtype)),
    aten.normal.float_Tensor: (
        lambda mean, std: counters(std.numel()),
        lambda so, mean, std: normal_tensor(so, float(mean), std, _shape_of(std), std.dtype)),
    aten.normal.Tensor_Tensor: (
        lambda mean, std: counters(_numel(torch.broadcast_shapes(mean.shape, std.shape))),
        lambda so, mean, std: normal_tensor(
            so, mean, std, list(torch.broadcast_shapes(mean.shape, std.shape)),
            torch.promote_types(mean.dtype, std.dtype))),
    aten.bernoulli.default: (
        lambda self: counters(self.numel()),
        lambda so, self: bernoulli(so, self, _shape_of(self), self.dtype)),
    aten.bernoulli.p: (
        lambda self, p=0.5: counters(self.numel()),
        lambda so, self, p=0.5: bernoulli(so, float(p), _shape_of(self), self.dtype)),
    aten.bernoulli.Tensor: (
        lambda self, p: counters(self.numel()),
        lambda so, self, p: bernoulli(so, p, _shape_of(self), self.dtype)),
    aten.native_dropout.default: (
        lambda input, p, train=True: counters(input.numel()),
        _drop_eval),
    getattr(aten.random, "from"): (   # "from" is a Python keyword
        lambda self, low, high=None: randint_counters(
            int(low), _random_bounds(self.dtype)[1] if high is None else int(high),
            self.numel()),
        lambda so, self, low, high=None: randint(
            so, int(low), _random_bounds(self.dtype)[1] if high is None else int(high),
            _shape_of(self), self.dtype)),
    aten.random.to: (
        lambda self, high: randint_counters(0, int(high), self.numel()),
        lambda so, self, high: randint(so, 0, int(high), _shape_of(self), self.dtype)),
    aten.random.default: (
        lambda self: randint_counters(*_random_bounds(self.dtype), self.numel()),
        lambda so, self: randint(so, *_random_bounds(self.dtype), _shape_of(self),
                                 self.dtype)),
    aten.exponential.default: (
        lambda self, lambd=1.0: counters(self.numel()),
        lambda so, self, lambd=1.0: exponential(so, _shape_of(self), self.dtype,
                                                float(lambd))),
    aten.rand_like.default: (
        _from_kwargs(lambda self, dtype=None: counters(self.numel())),
        _from_kwargs(lambda so, self, dtype=None: uniform(so, _shape_of(self),
                                                          dtype or self.dtype))),
    aten.randn_like.default: (
        _from_kwargs(lambda self, dtype=None: counters(self.numel())),
        _from_kwargs(lambda so, self, dtype=None: normal(so, _shape_of(self),
                                                         dtype or self.dtype))),
    aten.randint_like.default: (
        _from_kwargs(lambda self, high, dtype=None: randint_counters(0, int(high),
                                                                    self.numel())),
        _from_kwargs(lambda so, self, high, dtype=None: randint(
            so, 0, int(high), _shape_of(self), dtype or self.dtype))),
    aten.randint_like.low_dtype: (
        _from_kwargs(lambda self, low, high, dtype=None: randint_counters(
            int(low), int(high), self.numel())),
        _from_kwargs(lambda so, self, low, high, dtype=None: randint(
            so, int(low), int(high), _shape_of(self), dtype or self.dtype))),
    aten.rand.default: (
        _from_kwargs(lambda size, dtype=None: counters(_numel(size))),
        _from_kwargs(lambda so, size, dtype=None: uniform(so, list(size),
                                                          _default_dtype(dtype)))),
    aten.randn.default: (
        _from_kwargs(lambda size, dtype=None: counters(_numel(size))),
        _from_kwargs(lambda so, size, dtype=None: normal(so, list(size),
                                                         _default_dtype(dtype)))),
    aten.randint.default: (
        _from_kwargs(lambda high, size, dtype=None: randint_counters(0, int(high),
                                                                    _numel(size))),
        _from_kwargs(lambda so, high, size, dtype=None: randint(
            so, 0, int(high), list(size), dtype or torch.int64))),
    aten.multinomial.default: (
        lambda self, num_samples, replacement=False: multinomial_counters(
            self, int(num_samples), bool(replacement)),
        lambda so, self, num_samples, replacement=False: multinomial(
            so, self, int(num_samples), bool(replacement))),
    aten.randperm.default: (
        _from_kwargs(lambda n, dtype=None: counters(2 * int(n))),
        _from_kwargs(lambda so, n, dtype=None: randperm(so, int(n), dtype or torch.int64))),
    aten.randint.low: (
        _from_kwargs(lambda low, high, size, dtype=None: randint_counters(
            int(low), int(high), _numel(size))),
        _from_kwargs(lambda so, low, high, size, dtype=None: randint(
            so, int(low), int(high), list(size), dtype or torch.int64))),
}
