"""torch.compile graphs with symbolic sizes: compiled once, run for every size
(lazymlir/dynamo_dynamic.py, lowering/front/symbolic.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_no_fallback, target_name
from torch import nn

import lazymlir
import lazymlir.dynamo  # noqa: F401  registers backend="lazymlir" in a source checkout
from lazymlir import metrics


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    if target_name() != "cpu":
        pytest.skip("symbolic sizes are compiled for the cpu target only")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class _Attention(nn.Module):
    """A pre-norm causal self-attention block: views of (batch, time) sizes, both dynamic."""

    def __init__(self, width=16, heads=2):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x):
        batch, time, width = x.shape
        q, k, v = self.qkv(self.norm(x)).split(width, dim=2)
        q, k, v = [t.view(batch, time, self.heads, width // self.heads).transpose(1, 2)
                   for t in (q, k, v)]
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(y.transpose(1, 2).reshape(batch, time, width))


def _compiles() -> int:
    return metrics.counter("UncachedCompile") + metrics.counter("DiskCacheHit")


def test_dynamic_true_trains_six_batch_sizes_with_one_forward_and_one_backward():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    compiled = torch.compile(eager, backend="lazymlir", dynamic=True)
    for batch in (2, 3, 5, 7, 11, 16):
        x = torch.randn(batch, 8)
        expected = eager(x)
        got = compiled(x)
        torch.testing.assert_close(got, expected)
        grads = torch.autograd.grad(got.square().sum(), list(eager.parameters()))
        want = torch.autograd.grad(expected.square().sum(), list(eager.parameters()))
        for g, w in zip(grads, want):
            torch.testing.assert_close(g, w)
    assert _compiles() == 2  # forward and backward, for all six sizes
    assert metrics.counter("DynamicGraphs") == 2
    assert metrics.counter("DynamicSpecialized") == 0
    assert_no_fallback()


def test_mark_dynamic_attention_over_batch_and_sequence_length():
    """Inference (one graph; the training step's two are the test above)."""
    torch.manual_seed(0)
    block = _Attention()
    compiled = torch.compile(block, backend="lazymlir")
    with torch.no_grad():
        for batch, time in ((2, 3), (3, 5), (4, 7), (5, 4), (6, 9), (7, 2)):
            x = torch.randn(batch, time, 16)
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(x, 1)
            torch.testing.assert_close(compiled(x), block(x))
    assert _compiles() == 1
    assert metrics.counter("DynamicSpecialized") == 0
    assert_no_fallback()


def test_a_graph_that_cannot_be_symbolic_is_compiled_per_shape_with_a_warning():
    """An embedding's indices are bounds-checked against static sizes: the graph is
    specialized per shape (warned, counted), with eager's numbers."""
    torch.manual_seed(0)
    embed = nn.Embedding(10, 4)

    def f(idx):
        return embed(idx).sum(1)

    compiled = torch.compile(f, backend="lazymlir", dynamic=True)
    with pytest.warns(UserWarning, match="compiled once per shape instead"):
        compiled(torch.randint(0, 10, (2, 3)))
    for batch in (2, 3):
        idx = torch.randint(0, 10, (batch, 3))
        torch.testing.assert_close(compiled(idx), f(idx))
    assert metrics.counter("DynamicSpecialized") == 1
    assert metrics.counter("DynamicGraphs") == 0
    assert _compiles() == 2  # one per shape
    assert_no_fallback()


@pytest.fixture
def dynamic_after():
    from lazymlir import config
    saved = config.settings().dynamic_after
    config.settings().dynamic_after = 2
    yield
    config.settings().dynamic_after = saved


def _decode(device: str, steps: int) -> list[torch.Tensor]:
    """A growing loop: each step appends a position to the context and attends over it."""
    torch.manual_seed(0)
    proj = nn.Linear(8, 24).to(device)
    context = torch.randn(1, 1, 8).to(device)
    outputs = []
    for _ in range(steps):
        context = torch.cat([context, torch.randn(1, 1, 8).to(device)], 1)
        q, k, v = proj(context).split(8, dim=2)
        weights = ((q[:, -1:] @ k.transpose(1, 2)) / 8 ** 0.5).softmax(-1)
        outputs.append(weights @ v)
        if device != "cpu":
            lazymlir.mark_step()  # one graph: the output, and the next step's context
    return [y.cpu() for y in outputs]


def test_growing_loop_on_the_lazy_device_compiles_a_bounded_number_of_graphs(dynamic_after):
    """LAZYMLIR_DYNAMIC_AFTER=2: the step's graph compiles for two lengths, then once with
    a symbolic length that serves the other ten."""
    expected = _decode("cpu", 12)
    got = _decode("lazy_mlir", 12)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    assert metrics.counter("UncachedCompile") == 3, metrics.counters()
    assert metrics.counter("DynamicGraphs") == 1
    assert metrics.counter("DynamicMatches") == 10
    assert_no_fallback()


def test_the_lazy_policy_fits_sizes_as_a_times_s_plus_b():
    from lazymlir.execution import dynamic_policy

    assert dynamic_policy._fit((5, 7, 9), [(2, 3, 4)]) == "2*s0 + 1"
    assert dynamic_policy._fit((10, 9, 8), [(2, 3, 4)]) == "-1*s0 + 12"
    assert dynamic_policy._fit((4, 9, 16), [(2, 3, 4)]) is None  # s*s


def test_symbolic_sizes_get_the_tiled_schedule_with_remainders_and_both_parallel_branches():
    """The cpu schedule's code for `?` sizes (lowering/cpu/dynamic.py): full register tiles,
    peeled remainders (primes: no tile divides them) and a run-time choice
    between parallel and in-order loops (300 rows are over the parallel threshold, the
    others under), against eager, with one graph for every size."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    w = torch.randn(64, 40)

    def f(x):
        h = mlp(x)
        # a dynamic contraction dim and innermost reduction/elementwise extents (s0)
        scores = torch.softmax(h @ h.t(), -1)
        return scores @ h + (h @ w).sum(-1, keepdim=True), torch.relu(x.flatten()) * 2

    compiled = torch.compile(f, backend="lazymlir", dynamic=True)
    with torch.no_grad():
        for batch in (300, 7, 13, 37, 1):
            x = torch.randn(batch, 64)
            for got, want in zip(compiled(x), f(x)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # Dynamo specializes a size of 1: that call has a static graph of its own.
    assert _compiles() == 2
    assert metrics.counter("DynamicSpecialized") == 0
    assert_no_fallback()
