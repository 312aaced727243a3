"""The fast Meta kernels of in-place `_foreach_` ops (tracing/foreach_meta.py).

Functionalization runs an in-place op on meta tensors before tracing it; the fast
kernels skip that run when it cannot fail and must raise what eager raises otherwise.
"""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, assert_no_fallback

from lazymlir.tracing import foreach_meta


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _taken(call) -> tuple[int, int]:
    """How many of `call`'s in-place foreach calls the fast kernels found trivially
    valid, and how many they gave the composite kernel (which may raise)."""
    before = foreach_meta.counts()
    try:
        call()
    except RuntimeError:
        pass
    after = foreach_meta.counts()
    return after[0] - before[0], after[1] - before[1]


def test_trivially_valid_only_for_same_shapes_and_floating_dtypes():
    """The kernels (on meta tensors, as functionalization calls them) answer at once
    only where the in-place op cannot fail; other calls run the composite kernel."""
    a, b = [_meta(3, 4), _meta(5)], [_meta(3, 4), _meta(5)]
    assert _taken(lambda: torch._foreach_add_(a, b, alpha=2)) == (1, 0)
    assert _taken(lambda: torch._foreach_addcdiv_(a, b, b, [0.5, 0.25])) == (1, 0)
    assert _taken(lambda: torch._foreach_mul_(a, 3)) == (1, 0)
    assert _taken(lambda: torch._foreach_sqrt_(a)) == (1, 0)
    assert _taken(lambda: torch._foreach_add_(a, [_meta(2, 3, 4), _meta(5)])) == (0, 1)
    assert _taken(lambda: torch._foreach_add_([_meta(3, dtype=torch.int64)], 2)) == (0, 1)
    assert _taken(lambda: torch._foreach_mul_(a, 1j)) == (0, 1)  # a complex number
    assert _taken(lambda: torch._foreach_add_(a, [_meta(3, 4), _meta(5, dtype=torch.float64)])) \
        == (0, 1)


@pytest.mark.parametrize("call", [
    lambda s, o: torch._foreach_add_(s, o),
    lambda s, o: torch._foreach_lerp_(s, o, 0.5),
    lambda s, o: torch._foreach_addcmul_(s, o, o, value=0.5),
])
def test_growing_broadcast_still_raises_like_eager(call):
    """An in-place op whose broadcast would grow `self` raises, on lazy tensors too."""
    def operands(device):
        return ([torch.ones(3, device=device)],
                [torch.ones(2, 3, device=device)])
    with pytest.raises(RuntimeError) as eager:
        call(*operands("cpu"))
    with pytest.raises(RuntimeError) as lazy:
        call(*operands(DEVICE))
    assert "broadcast" in str(eager.value) and "broadcast" in str(lazy.value)


def test_inplace_foreach_values_match_eager():
    torch.manual_seed(0)
    host = [torch.randn(4, 3), torch.randn(5)]
    other = [torch.randn(4, 3), torch.randn(5)]
    lazy = [t.to(DEVICE) for t in host]
    lazy_other = [t.to(DEVICE) for t in other]
    for selfs, others in ((host, other), (lazy, lazy_other)):
        torch._foreach_mul_(selfs, 0.9)
        torch._foreach_addcmul_(selfs, others, others, value=0.1)
        torch._foreach_lerp_(selfs, others, 0.25)
        torch._foreach_add_(selfs, others, alpha=-0.5)
    for h, t in zip(host, lazy):
        torch.testing.assert_close(t.cpu(), h)
    assert_no_fallback()
