"""complex64/complex128 arithmetic compiles on the lazy device and through torch.compile,
against eager, with no eager fallback (lowering/front/complex_ops.py, the cpu stages'
complex lowering), and a conj view that does fall back keeps its conjugation."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, assert_no_fallback

import lazymlir
import lazymlir.dynamo  # noqa: F401  registers backend="lazymlir" in a source checkout
from lazymlir.execution import partition


def arithmetic(a, b, r):
    return (a + b, a - 2 * b, a * b, a / b, a / r, a * r, a + r, a * 2.5, -a, a.abs(),
            a.angle(), a.exp(), a.conj() * b, torch.conj_physical(a), a.sum(0), a.sum(),
            a @ b, torch.view_as_real(a) * 2, a.real * a.imag,
            torch.complex(r, r * 2), torch.polar(r.abs(), r), r.to(a.dtype) + 1,
            torch.view_as_complex(torch.view_as_real(b) + 1))


# complex128 on the lazy device, complex64 through torch.compile: each pair compiles one
# graph (~10 s); the other two pairs take the same routes.
@pytest.mark.parametrize("dtype,compiled", [(torch.complex128, False), (torch.complex64, True)])
def test_complex_arithmetic_compiles(dtype, compiled):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(3, 3, dtype=dtype, generator=g) for _ in range(2))
    r = torch.randn(3, 3, dtype=a.real.dtype, generator=g)
    expected = arithmetic(a, b, r)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.complex64 else \
        {"rtol": 1e-12, "atol": 1e-12}
    lazymlir.metrics.reset()
    torch._dynamo.reset()
    if compiled:
        got = torch.compile(arithmetic, backend="lazymlir", dynamic=False)(a, b, r)
    else:
        got = [x.cpu() for x in arithmetic(a.to(DEVICE), b.to(DEVICE), r.to(DEVICE))]
    for i, (x, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(x, e, **tol, msg=lambda m, i=i: f"result {i}: {m}")
    assert_no_fallback()


def functions(z, w):
    return (z.sqrt(), z.rsqrt(), z.log(), z ** 2.5, z ** 2, z ** w, z.reciprocal(), z.sin(),
            z.cos(), z.sinh(), z.cosh(), z.tanh(), z.sigmoid())


def test_complex_functions_compile_with_eagers_branch_cuts():
    """sqrt, log, pow, trigonometric and hyperbolic functions on (re, im) pairs, with the
    values where formulas go wrong: zeros of both signs, the negative real axis from
    both sides (-4 + 0i and -4 - 0i: sqrt and log take eager's side of the cut), large
    real parts (tanh), and random points."""
    g = torch.Generator().manual_seed(0)
    re = torch.tensor([0., 0., -0., -4., -4., 4., 0., 0., 25., -25., 1e-3])
    im = torch.tensor([0., -0., 0., 0., -0., 0., 2., -2., 1., 2., 1e-3])
    z = torch.cat([torch.complex(re, im), 3 * torch.randn(29, dtype=torch.complex64,
                                                              generator=g)])
    w = torch.randn(40, dtype=torch.complex64, generator=g)
    # 0 ** w at a zero with a -0.0 part and a complex w: eager's cpow gives inf + nanj or
    # nan + nanj there (C's cexp(w * clog(z))), this 0 (complex_ops.py).
    w[1:3] = 0.5
    expected = functions(z, w)
    lazymlir.metrics.reset()
    got = [x.cpu() for x in functions(z.to(DEVICE), w.to(DEVICE))]
    for i, (x, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(x, e, rtol=1e-5, atol=1e-5, equal_nan=True,
                                   msg=lambda m, i=i: f"result {i}: {m}")
    assert_no_fallback()


class _StorageCopyTarget:
    """Holds complex buffers as their parts, as a device copy of the storage would."""

    @staticmethod
    def upload(tensor):
        return torch.view_as_real(tensor).clone()  # raises on an unresolved conj view

    @staticmethod
    def download(data, meta):
        return torch.view_as_complex(data)


def test_an_eager_conj_view_keeps_its_conjugation():
    # A node run eagerly at the sync point (the graph split around it; on the cuda target
    # `_conj` does) returns a conj view: a copy of its storage lost the conjugation.
    graph = {"inputs": [{"shape": [3], "dtype": "complex64"}], "scalars": [],
             "nodes": [{"op": "aten._conj.default", "args": [{"ref": ["input", 0, 0]}],
                        "kwargs": {}, "outputs": [{"shape": [3], "dtype": "complex64"}]}]}
    a = torch.randn(3, dtype=torch.complex64)
    target = _StorageCopyTarget()
    env = {("input", 0, 0): target.upload(a)}
    partition.run_node_eagerly(graph, target, 0, env)
    meta = torch.empty(3, dtype=torch.complex64, device="meta")
    assert torch.equal(target.download(env[("node", 0, 0)], meta), a.conj())
