"""The tracer's caches: shape cache, decomposition templates, live tensors, graph building.

Behaviour only (what is recorded and what values come out), never timing.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from conftest import DEVICE, assert_no_fallback, count_python_entries

import lazymlir
from lazymlir.lowering.front import fx_graph
from lazymlir.tracing import native, tracer, values
from lazymlir.tracing.graph import build_graph


@pytest.fixture(autouse=True)
def _python_recording():
    """These tests are about the Python tracer's caches and count its entries: the C++
    entry records nothing itself here (every other suite runs with it)."""
    with native.python_recording():
        yield


def _graph_of(*tensors):
    inner = [values.value_of(values.inner(t)) for t in tensors]
    graph, inputs, scalars = build_graph(inner)
    return graph, scalars


def _out(t):
    return values.inner(t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
@pytest.mark.parametrize("scalar", [2, 2.5, True])
def test_shape_cache_dtype_of_scalar_mixes(dtype, scalar):
    """int/float/bool scalars promote like eager, also when the cache is warm."""
    host = torch.ones(3, 4, dtype=dtype)
    for _ in range(2):  # a miss, then a hit
        lazy = host.to(DEVICE)
        for op in (torch.add, torch.mul):
            expected = op(host, scalar)
            got = op(lazy, scalar)
            assert got.dtype == expected.dtype, (op, dtype, scalar)
            assert got.shape == expected.shape
            if dtype == torch.bool and op is torch.add:
                continue  # values: bool + bool lowers to a wrapping i1 add (a lowering bug)
            assert torch.equal(got.cpu(), expected)


def test_shape_cache_keys_distinguish_1_1p0_and_true():
    lazy = torch.ones(2, dtype=torch.int32).to(DEVICE)
    assert (lazy * 1).dtype == torch.int32
    assert (lazy * 1.0).dtype == torch.float32
    assert (lazy * True).dtype == torch.int32
    assert (lazy * 1.0).dtype == torch.float32  # a hit for 1.0 after 1 and True
    assert (lazy * 1).dtype == torch.int32


def test_shape_cache_distinguishes_shapes_and_dtypes():
    for shape in [(2, 3), (3, 2), (6,)]:
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(shape, dtype=dtype)
            y = (x.to(DEVICE) * 2.0).sum(0)
            assert y.shape == x.sum(0).shape and y.dtype == dtype
            torch.testing.assert_close(y.cpu(), (x * 2.0).sum(0))


def test_shape_mismatch_raises_at_the_op_hit_or_miss():
    a = torch.randn(2, 3).to(DEVICE)
    b = torch.randn(4, 5).to(DEVICE)
    a + torch.randn(2, 3).to(DEVICE)  # warm the cache for add.Tensor
    for _ in range(2):
        with pytest.raises(RuntimeError):
            a + b


def test_changing_floats_share_one_shape_entry_and_are_scalar_inputs():
    x = torch.randn(4).to(DEVICE)
    graphs = []
    for s in (0.5, 0.25, -3.0):
        graph, scalars = _graph_of(x * s)
        graphs.append(fx_graph.structural_hash(graph, "cpu"))
        assert scalars == [s]
    assert len(set(graphs)) == 1


def test_decomposition_replay_builds_the_same_graph():
    """The first call of a decomposed op is captured, the second replays the template;
    both record the same nodes."""
    torch.manual_seed(0)
    host = torch.randn(5, 7)
    results = []
    for _ in range(3):
        x = host.to(DEVICE)
        w = torch.randn(3, 7).to(DEVICE)
        y = nn.functional.mse_loss(x.t() @ torch.ones(5, 2).to(DEVICE),
                                   torch.zeros(7, 2).to(DEVICE)) + w.t().sum()
        graph, _ = _graph_of(y)
        results.append((fx_graph.structural_hash(graph, "cpu"), len(graph["nodes"])))
        assert y.shape == ()
    assert results[0] == results[1] == results[2]


def test_decomposition_replay_values_match_eager():
    torch.manual_seed(0)
    for _ in range(3):
        a, b = torch.randn(6, 4), torch.randn(6, 4)
        got = nn.functional.mse_loss(a.to(DEVICE), b.to(DEVICE))
        torch.testing.assert_close(got.cpu(), nn.functional.mse_loss(a, b))
        g = torch.randn(4, 6)
        torch.testing.assert_close(g.to(DEVICE).t().cpu(), g.t())
    assert_no_fallback()


def test_decomposition_called_with_one_value_twice_has_its_own_template():
    """A template captured from a call that passes one value twice (AdamW's
    addcmul(v, grad, grad)) ties those places: it serves only calls that tie them too."""
    a, b, c = torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3)
    la = a.to(DEVICE)
    same = nn.functional.mse_loss(la, la)  # the first call of this signature: tied
    torch.testing.assert_close(same.cpu(), torch.tensor(0.0))
    got = nn.functional.mse_loss(b.to(DEVICE), c.to(DEVICE))  # not the tied template
    torch.testing.assert_close(got.cpu(), nn.functional.mse_loss(b, c))
    again = nn.functional.mse_loss(la, la)
    torch.testing.assert_close(again.cpu(), torch.tensor(0.0))
    lb = b.to(DEVICE)
    products = [torch.addcmul(lc, lb, lb, value=0.5) for lc in (c.to(DEVICE), a.to(DEVICE))]
    for got, base in zip(products, (c, a)):  # the second replays the tied template
        torch.testing.assert_close(got.cpu(), torch.addcmul(base, b, b, value=0.5))


def test_decomposition_with_different_float_is_not_replayed_with_the_old_one():
    x = torch.randn(3, 4)
    for alpha in (0.5, -0.0, 0.0, 2.0):
        got = torch.nn.functional.elu(x.to(DEVICE), alpha=alpha).cpu()
        torch.testing.assert_close(got, torch.nn.functional.elu(x, alpha=alpha))


def test_training_loop_replays_and_matches_eager():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    lazy = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    lazy.load_state_dict(eager.state_dict())
    lazy.to(DEVICE)
    x, y = torch.randn(4, 6), torch.randn(4, 2)
    xl, yl = x.to(DEVICE), y.to(DEVICE)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_l = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    for _ in range(4):
        for model, opt, a, b in ((eager, opt_e, x, y), (lazy, opt_l, xl, yl)):
            opt.zero_grad()
            nn.functional.mse_loss(model(a), b).backward()
            opt.step()
        lazymlir.mark_step()
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.detach().cpu(), pe.detach())
    assert_no_fallback()


def test_live_tensors_follow_the_session():
    x = torch.randn(3).to(DEVICE) + 1.0
    inner = _out(x)
    assert any(t is inner for t in values.live_tensors())
    del x, inner
    for _ in range(5000):  # enough to trigger a sweep of dead references
        torch.randn(2).to(DEVICE)
    assert len(values.live_tensors()) < 5000


def test_trace_time_is_recorded():
    lazymlir.metrics.reset()
    x = torch.randn(3).to(DEVICE)
    for _ in range(10):
        x = x * 1.5
    tracer.flush_trace_time()
    assert lazymlir.metrics.timers()["TraceTime"]["total_s"] > 0


def test_batch_norm_at_many_channel_counts_replays_a_template_and_matches_eager(monkeypatch):
    """Training-mode batch norm (decomposed, forward and backward) at one channel count per
    layer, as in DenseNet: the decomposition runs for a count equal to another size (5 =
    the height: not substituted) and the next two; the last replays a template with the
    sizes substituted. Values, gradients and running statistics as eager."""
    from torch._decomp import decompositions

    runs = []
    helper = decompositions.native_batch_norm_helper

    def counting(*args, **kwargs):
        runs.append(args[0].shape[1])
        return helper(*args, **kwargs)

    monkeypatch.setattr(decompositions, "native_batch_norm_helper", counting)
    torch.manual_seed(0)
    channels = (5, 4, 6, 7)
    xs = [torch.randn(2, c, 5, 3) for c in channels]
    eager = [nn.BatchNorm2d(c) for c in channels]
    lazy = [nn.BatchNorm2d(c).to(DEVICE) for c in channels]
    results = []
    for bns, device in ((eager, "cpu"), (lazy, DEVICE)):
        inputs = [x.to(device).detach().requires_grad_() for x in xs]
        loss = sum((bn(x) * x).sum() for bn, x in zip(bns, inputs))
        loss.backward()
        if device == DEVICE:
            lazymlir.mark_step()  # one graph for all the values read below
        results.append([t.detach().cpu() for bn, x in zip(bns, inputs)
                        for t in (x.grad, bn.weight.grad, bn.running_mean, bn.running_var)])
    for got, expected in zip(*reversed(results)):
        torch.testing.assert_close(got, expected)
    assert sorted(set(runs)) == [4, 5, 6], runs  # 7: a substituted template
    assert_no_fallback()


def test_foreach_elements_skip_the_dispatcher_and_match_eager(monkeypatch):
    """A `_foreach_` op's element ops go to the tracer's entry directly (one
    `__torch_dispatch__` call per foreach op, not one per element), with the overload
    the dispatcher would pick, and give eager's values."""
    torch.manual_seed(0)
    hosts = [torch.randn(3, 4), torch.randn(5)]
    others = [torch.randn(3, 4), torch.randn(5)]
    for _ in range(2):  # routes made, then warm
        lazy = [h.to(DEVICE) for h in hosts]
        lazy_others = [o.to(DEVICE) for o in others]
        expected = [h.clone() for h in hosts]
        entries = count_python_entries(monkeypatch)
        torch._foreach_add_(lazy, lazy_others, alpha=-0.5)
        torch._foreach_mul_(lazy, 0.9)
        roots = torch._foreach_sqrt(lazy_others)
        monkeypatch.undo()
        torch._foreach_add_(expected, others, alpha=-0.5)
        torch._foreach_mul_(expected, 0.9)
        assert [f for f in entries if "_foreach_" not in f] == []
        for got, want in zip(lazy, expected):
            torch.testing.assert_close(got.cpu(), want)
        for got, other in zip(roots, others):
            torch.testing.assert_close(got.cpu(), torch.sqrt(other), equal_nan=True)
    assert_no_fallback()


def test_addcdiv_with_a_changing_value_makes_one_graph(monkeypatch):
    """AdamW's addcdiv step size changes every step: the op is recorded whole with the
    value as a scalar input of the graph (decomposed by the torch stage:
    late_decompositions.py), so later values make the same graph, and match eager."""
    torch.manual_seed(0)
    a, b, c = torch.randn(3, 5), torch.randn(3, 5), torch.rand(3, 5) + 0.5
    la, lb, lc = (t.to(DEVICE) for t in (a, b, c))
    entries = count_python_entries(monkeypatch)
    results = []
    for value in (0.5, -0.25, 3.0):
        entries.clear()
        results.append((value, torch.addcdiv(la, lb, lc, value=value),
                        torch.addcmul(la, lb, lc, value=value)))
    monkeypatch.undo()
    assert entries == ["aten.addcdiv.default", "aten.addcmul.default"]
    graphs = set()
    for value, quotient, product in results:
        graph, scalars = _graph_of(quotient, product)
        graphs.add(fx_graph.structural_hash(graph, "cpu"))
        assert scalars.count(value) == 2
        torch.testing.assert_close(quotient.cpu(), torch.addcdiv(a, b, c, value=value))
        torch.testing.assert_close(product.cpu(), torch.addcmul(a, b, c, value=value))
    assert len(graphs) == 1
    assert_no_fallback()


def test_decomposition_returning_a_named_tuple_replays(monkeypatch):
    """PyTorch's references return named tuples (nll_loss_forward's): their templates
    are captured too, so cross_entropy's later calls replay, and match eager."""
    torch.manual_seed(0)
    logits, target = torch.randn(6, 5), torch.randint(0, 5, (6,))
    lx, ly = logits.to(DEVICE), target.to(DEVICE)
    losses = []
    for _ in range(2):
        entries = count_python_entries(monkeypatch)
        losses.append(nn.functional.cross_entropy(lx, ly))
        monkeypatch.undo()
    assert "aten.nll_loss_forward.default" in entries
    assert not [e for e in entries if "gather" in e or "where" in e]  # replayed, not run
    for loss in losses:
        torch.testing.assert_close(loss.cpu(), nn.functional.cross_entropy(logits, target))
    assert_no_fallback()


@pytest.mark.parametrize("view", [
    lambda x, y: x.t(), lambda x, y: y.t(), lambda x, y: x.transpose(-1, 0),
    lambda x, y: x.transpose(1, 1), lambda x, y: x.unsqueeze(1).expand(-1, 3, 4),
    lambda x, y: (x @ torch.ones(4, 2, device=x.device)).view(6, 1)])
def test_view_copies_record_what_their_decomposition_records(monkeypatch, view):
    """t_copy, transpose_copy, expand_copy and _unsafe_view go straight to their view's
    recorder (tracing/view_copies.py): the same graph as through the decomposition."""
    from lazymlir.tracing import view_copies

    host_x, host_y = torch.randn(3, 4), torch.randn(5)
    graphs = []
    for direct in (True, False):
        monkeypatch.setattr(view_copies, "DIRECT", direct)
        got = view(host_x.to(DEVICE), host_y.to(DEVICE)) * 2.0
        graph, _ = _graph_of(got)
        graphs.append(fx_graph.structural_hash(graph, "cpu"))
        torch.testing.assert_close(got.cpu(), view(host_x, host_y) * 2.0)
    assert graphs[0] == graphs[1]
