"""The C++ dispatch entry (lazymlir/tracing/native_entry.cpp).

It records the common op itself (no Python frame) and hands everything else to the
Python tracer. What it records must be exactly what the Python tracer records: the
same graph documents, hence the same keys, compiles and numbers.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from conftest import DEVICE, assert_no_fallback, count_python_entries

import lazymlir
from lazymlir.lowering.front import fx_graph
from lazymlir.tracing import native, values
from lazymlir.tracing.graph import build_graph


def _document(tensors) -> str:
    graph, _, scalars = build_graph([values.value_of(values.inner(t)) for t in tensors])
    return fx_graph.structural_hash(graph, "cpu"), len(graph["nodes"]), scalars


def _mlp_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3)).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 6).to(DEVICE), torch.randint(0, 3, (4,)).to(DEVICE)
    out = []
    for _ in range(2):  # the second step takes every cache (shape entries, templates)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        out = [loss, *model.parameters(), *(s for g in opt.state.values() for s in g.values())]
    return [t for t in out if t.device.type == "lazy_mlir"]  # (AdamW's step counts: host)


_PROGRAMS = {
    "arithmetic with numbers": lambda: [(torch.ones(3, 4).to(DEVICE) * 2.5 + 1) / 3 - True],
    "int tensor times a float": lambda: [torch.ones(3, dtype=torch.int32).to(DEVICE) * 1.0],
    "views and reductions": lambda: [
        torch.arange(24.0).to(DEVICE).view(2, 3, 4).permute(2, 0, 1).sum((0, 2), keepdim=True)],
    "defaults and keywords": lambda: [
        torch.nn.functional.gelu(torch.randn(5).to(DEVICE), approximate="tanh"),
        torch.div(torch.ones(4).to(DEVICE), 3.0, rounding_mode="floor"),
        torch.randn(2, 3).to(DEVICE).softmax(-1), torch.randn(3).to(DEVICE).to(torch.float64)],
    "an MLP training step (AdamW)": _mlp_step,
    "view copies recorded as one view": lambda: _view_copies(torch.randn(3, 4, 2).to(DEVICE)),
    "view ops": lambda: _view_ops(),
    "a write through a view": lambda: _write_through_a_view(),
    "new tensors like another (memory formats, layouts)": lambda: _like(),
    "tensor lists (cat, split)": lambda: _tensor_lists(*_list_inputs(DEVICE)),
    "layer norms": lambda: [t for dtype in _LAYER_NORM_DTYPES
                            for t in _layer_norms(*_layer_norm_inputs(DEVICE, dtype))],
}

_LAYER_NORM_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _layer_norm_inputs(device, dtype):
    torch.manual_seed(0)
    return [torch.randn(s).to(dtype).to(device) for s in ((2, 5, 8), (8,), (8,), (5, 8))]


def _layer_norms(x, w, b, w2):
    """native_layer_norm (special_ops._layer_norm's route, and the C++ entry's) with and
    without affine parameters, over one and two dims."""
    aten = torch.ops.aten
    return [*aten.native_layer_norm(x, [8], w, b, 1e-5),
            *aten.native_layer_norm(x, [5, 8], w2, None, 1e-3),
            *aten.native_layer_norm(x, [8], None, None, 1e-5)]


def _list_inputs(device, dtype=torch.float32):
    torch.manual_seed(0)
    return [torch.randn(s).to(dtype).to(device) for s in ((3, 4), (3, 2), (5, 4))]


def _tensor_lists(a, b, c):
    """Ops taking a list of tensors (cat) or giving one (split_copy), as a transformer's
    attention (qkv.split) and its backward (cat of the gradients) call them; stack (LATE)
    and split_with_sizes_copy (a decomposition: the Python tracer) feeding them."""
    halves = a.split(2, 1)
    thirds = torch.cat([a, c], 0).split(3)  # (a shorter last piece)
    return [torch.cat([a, b], 1), torch.cat([a, c]) * 2, torch.cat([b]), *halves,
            *thirds, torch.cat([*halves, halves[0]], -1),
            torch.cat([a, a.split([1, 3], 1)[1].sum(1, keepdim=True)], 1),
            torch.stack([a, a * 2]).sum(0), a.split(4, 1)[0] + 1]


def _like():
    """ones_like and zeros_like (recorded whole: late_decompositions.LATE) with the
    keyword arguments the C++ entry keys: a dtype, a layout, memory formats."""
    x = torch.randn(3, 4).to(DEVICE)
    return [torch.ops.aten.ones_like(x, memory_format=torch.contiguous_format) * x,
            torch.zeros_like(x, dtype=torch.float16, layout=torch.strided),
            torch.ones_like(x, memory_format=torch.preserve_format) + 1,
            torch.full_like(x, 2.5, memory_format=torch.contiguous_format)]


def _view_copies(x):
    """t_copy, transpose_copy, expand_copy, _unsafe_view, detach_copy and alias_copy
    (what functionalization emits for them), each made into arithmetic."""
    m = x[0]
    v = torch.randn(3).to(DEVICE)
    return [m.t() + 1, x.transpose(0, 2) * 2, x.transpose(-1, 1) - 1, x.transpose(1, 1) + 0.5,
            v.t() * 3, v[:, None].expand(3, 5) + 1, m.detach() * 2,
            torch.ops.aten.alias(m) + 2, torch.ops.aten._unsafe_view(x, (4, 6)) + 1]


def _view_ops():
    """Each view op functionalization turns into a *_copy op on the inner tensors."""
    x = torch.arange(24.0).to(DEVICE)
    a = x.view(2, 12).reshape(4, 6).t().unsqueeze(0).squeeze(0)  # view, t, (un)squeeze
    b = a.expand(2, 6, 4)[1, 2:5, ::2]  # expand, select, slice with a step
    c = x.view(2, 3, 4).transpose(0, 2).select(1, 1).narrow(0, 1, 2).permute(1, 0)
    d = x.reshape(6, 4).unflatten(1, (2, 2)).flatten(0, 1).as_strided((3, 2), (2, 1), 1)
    e = x.view(4, 6).unbind(0)[2].view(-1, 3) * 2.0  # (a multi-output view)
    return [a, b, c, d, e, x.view(2, 12).diagonal(), x.view(3, 8).split(3, 1)[1]]


def _write_through_a_view():
    """Aliasing: an in-place op on a view updates its base and its other views."""
    x = torch.arange(12.0).to(DEVICE) * 1.0
    rows = x.view(3, 4)
    col = rows[:, 1]
    rows[1].add_(10.0)
    col.mul_(2.0)
    return [x, rows, col, rows.t()]


@pytest.mark.parametrize("name", list(_PROGRAMS))
def test_records_the_documents_the_python_tracer_records(name):
    """Each program traced with the C++ entry's own recording and with every op sent
    to the Python tracer: equal documents (structural hash, node count, scalars)."""
    program = _PROGRAMS[name]
    fast = _document(program())
    with native.python_recording():
        python = _document(program())
    assert fast == python
    assert_no_fallback()


def test_small_ops_do_not_enter_python(monkeypatch):
    """After the first call of each op, a chain of small ops on lazy tensors reaches
    the Python tracer not once, and gives eager's values."""
    host = torch.randn(8, 8)
    x = host.to(DEVICE)
    (x + x).relu().sum(0)  # each op's first call: its route and shape entry
    entries = count_python_entries(monkeypatch)
    y = x
    for _ in range(50):
        y = (y + x).relu() * 0.5
    total = y.sum(0)
    assert entries == []
    monkeypatch.undo()
    expected = host
    for _ in range(50):
        expected = (expected + host).relu() * 0.5
    torch.testing.assert_close(total.cpu(), expected.sum(0))
    assert_no_fallback()


def test_numbers_promote_as_in_eager():
    """Python numbers (wrapped numbers at the dispatcher) promote as eager's do, on the
    first call and from the shape cache."""
    for dtype in (torch.int32, torch.int64, torch.bool, torch.float16):
        host = torch.ones(2, 3, dtype=dtype)
        for _ in range(2):
            lazy = host.to(DEVICE)
            for scalar in (2, 2.5, True, -0.0):
                for op in (torch.add, torch.mul, torch.sub):
                    try:
                        want = op(host, scalar)
                    except RuntimeError:  # subtracting a bool: eager refuses; the meta
                        continue  # kernel does not (docs/known-issues.md)
                    got = op(lazy, scalar)
                    assert got.dtype == want.dtype, (op, dtype, scalar)
                    torch.testing.assert_close(got.cpu(), want)


def test_inner_tensors_hold_their_values():
    """Inner tensors the C++ entry made are LazyTensors to Python, with their value;
    a detach (shallow copy) shares it."""
    x = torch.randn(3).to(DEVICE)
    y = x * 2.0
    inner = values.inner(y)
    assert type(inner) is values.LazyTensor and values.is_lazy(inner)
    assert values.value_of(inner) is inner._lazy and inner._lazy.pending
    assert not values.is_lazy(y) and not values.is_lazy(torch.ones(2))
    assert values.value_of(torch.ones(2)) is None
    assert values.value_of(inner.detach()) is inner._lazy
    torch.testing.assert_close(y.cpu(), x.cpu() * 2.0)


def test_a_new_session_does_not_collect_the_old_sessions_tensors():
    x = torch.randn(4).to(DEVICE)
    old = x * 3.0  # pending in this session
    lazymlir.session.reset()
    new = torch.randn(4).to(DEVICE) + 1.0
    pending = values.live_pending_values()
    assert values.value_of(values.inner(new)) in pending
    assert values.value_of(values.inner(old)) not in pending


def test_live_tensors_are_the_living_ones_in_creation_order():
    """The C++ entry's list of live inner tensors (mark_step materializes what it
    holds): a dropped tensor leaves it, the kept ones stay in creation order, through
    many more tensors than the list ever held at once."""
    x = torch.randn(4).to(DEVICE)
    before = len(values.live_tensors())
    kept = []
    for i in range(10_000):
        y = (x + float(i)).view(2, 2)
        if i % 1000 == 999:
            kept.append(y)
    live = [values.value_of(t) for t in values.live_tensors()]
    want = [values.value_of(values.inner(t)) for t in kept]
    assert [v for v in live if v in want] == want
    assert len(live) <= before + 2 * len(kept) + 2  # (each kept view, its base's: dropped)
    assert want[-1] in values.live_pending_values()
    lazymlir.mark_step()
    torch.testing.assert_close(kept[-1].cpu(), (x.cpu() + 9999.0).view(2, 2))
    assert values.value_of(values.inner(kept[-1])) not in values.live_pending_values()


def test_calls_without_a_lazy_tensor_keep_pytorchs_kernels():
    """A call the dispatcher sends to the device by a device argument (`.to()`, a
    factory) runs the kernel it ran before the entry was registered."""
    host = torch.randn(2, 3)
    assert torch.equal(host.to(DEVICE).cpu(), host)
    assert torch.equal(torch.zeros(2, 2, device=DEVICE).cpu(), torch.zeros(2, 2))
    assert torch.equal(torch.full((2,), 7.0, device=DEVICE).cpu(), torch.full((2,), 7.0))
    assert torch.equal(torch.tensor([1, 2], device=DEVICE).cpu(), torch.tensor([1, 2]))


def test_errors_of_the_python_tracer_reach_the_caller_unchanged():
    a, b = torch.randn(2, 3).to(DEVICE), torch.randn(4, 5).to(DEVICE)
    for _ in range(2):  # a miss, then with add's shape entry warm
        with pytest.raises(RuntimeError, match="broadcast"):
            a + b
    with pytest.raises(IndexError):
        a.select(0, 5)


def test_training_matches_eager_and_compiles_once():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 2))
    lazy = copy.deepcopy(eager).to(DEVICE)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, lazy)]
    x, y = torch.randn(6, 5), torch.randn(6, 2)
    lazymlir.metrics.reset()
    for _ in range(4):
        for model, opt, (xs, ys) in zip((eager, lazy), opts,
                                        ((x, y), (x.to(DEVICE), y.to(DEVICE)))):
            loss = nn.functional.mse_loss(model(xs), ys)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if model is lazy:
                lazymlir.mark_step()
                lazy_loss = loss.item()
            else:
                eager_loss = loss.item()
        assert abs(lazy_loss - eager_loss) <= 1e-5 * max(1.0, abs(eager_loss))
    for p, q in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(q.cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    assert_no_fallback()


def _foreach_calls(tensors):
    """Every kind of functional foreach call the C++ entry splits itself (lists of
    tensors and of numbers, a number, `alpha` and `value` keywords), and in-place forms."""
    a, b, c = tensors
    n = len(a)
    out = [
        *torch._foreach_add(a, b, alpha=0.5), *torch._foreach_add(a, 2.0),
        *torch._foreach_add(a, [float(i) for i in range(n)]), *torch._foreach_sub(a, b),
        *torch._foreach_mul(a, 0.9), *torch._foreach_mul(a, b), *torch._foreach_div(a, 3),
        *torch._foreach_div(a, [1.5] * n), *torch._foreach_sqrt(torch._foreach_abs(a)),
        *torch._foreach_addcmul(a, b, c, value=0.25), *torch._foreach_addcmul(a, b, b),
        *torch._foreach_addcdiv(a, b, torch._foreach_add(c, 3.0), [-0.1] * n),
        *torch._foreach_lerp(a, b, 0.1), *torch._foreach_lerp(a, b, 0.75),
        *torch._foreach_lerp(a, b, c), *torch._foreach_maximum(a, b),
        *torch._foreach_clamp_min(a, -0.5), *torch._foreach_pow(torch._foreach_abs(a), 2.0),
        *torch._foreach_neg(a), *torch._foreach_exp(a),
    ]
    inplace = [t.clone() for t in a]
    torch._foreach_mul_(inplace, 0.5)
    torch._foreach_addcmul_(inplace, b, b, value=-0.125)
    torch._foreach_lerp_(inplace, c, 0.25)
    return out + inplace


def _foreach_inputs(device=None):
    torch.manual_seed(0)
    shapes = [(3, 4), (5,), (2, 2, 2), ()]
    lists = [[torch.randn(s) for s in shapes] for _ in range(3)]
    return [[t.to(device) for t in ts] for ts in lists] if device else lists


def test_foreach_calls_record_the_python_tracers_documents_and_eagers_values():
    """Functional foreach calls are split into element calls by the C++ entry: the
    same documents as the Python tracer's foreach route, eager's values, no fallback."""
    fast = _foreach_calls(_foreach_inputs(DEVICE))
    with native.python_recording():
        python = _foreach_calls(_foreach_inputs(DEVICE))
    assert _document(fast) == _document(python)
    want = _foreach_calls(_foreach_inputs())
    for got, expected in zip(fast, want, strict=True):
        torch.testing.assert_close(got.cpu(), expected, rtol=1.3e-6, atol=1e-6, equal_nan=True)
    assert_no_fallback()


def test_foreach_elements_do_not_enter_python(monkeypatch):
    """After the first call, a foreach call whose element op is recorded by the C++
    entry reaches the Python tracer not once."""
    a, b, _ = _foreach_inputs(DEVICE)
    torch._foreach_add(torch._foreach_mul(a, 0.9), b, alpha=2)
    entries = count_python_entries(monkeypatch)
    for _ in range(5):
        a = torch._foreach_add(torch._foreach_mul(a, 0.9), b, alpha=2)
        torch._foreach_mul_(a, 1.5)
    assert entries == []
    monkeypatch.undo()


def test_view_copies_match_eager_and_do_not_enter_python(monkeypatch):
    x = torch.randn(3, 4, 2)
    lazy = x.to(DEVICE)
    _view_copies(lazy)
    entries = count_python_entries(monkeypatch)
    got = _view_copies(lazy)
    direct = {"aten.t_copy.default", "aten.transpose_copy.int", "aten.expand_copy.default",
              "aten._unsafe_view.default", "aten.detach_copy.default", "aten.alias_copy.default"}
    assert [e for e in entries if e in direct] == []
    assert len(entries) == 1  # (the host tensor's move to the device)
    monkeypatch.undo()
    torch.manual_seed(0)
    for a, b in zip(got[:4], _view_copies(x)[:4], strict=True):
        torch.testing.assert_close(a.cpu(), b)
    with pytest.raises(IndexError):  # out of range: the Python tracer raises eager's error
        lazy.transpose(0, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_tensor_lists_match_eager_and_do_not_enter_python(monkeypatch, dtype):
    """cat, stack and split_copy (a list of tensors in, a list out) are recorded by the
    C++ entry after their first call: no Python entry, eager's values (exactly: they only
    move elements), no fallback."""
    lazymlir.metrics.reset()
    inputs = _list_inputs(DEVICE, dtype)
    _tensor_lists(*inputs)
    entries = count_python_entries(monkeypatch)
    got = _tensor_lists(*inputs)
    monkeypatch.undo()
    lists = {"aten.cat.default", "aten.split_copy.Tensor", "aten.stack.default"}
    assert [e for e in entries if e in lists] == [], entries
    for g, w in zip(got, _tensor_lists(*_list_inputs("cpu", dtype)), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)
    assert_no_fallback()


@pytest.mark.parametrize("dtype", _LAYER_NORM_DTYPES)
def test_layer_norms_match_eager_and_do_not_enter_python(monkeypatch, dtype):
    """native_layer_norm: eager's values and dtypes (a half input's mean and rstd are
    half: cast, as special_ops._layer_norm casts them); after a first call, no entry of
    the Python tracer (the C++ entry records what that route records)."""
    lazymlir.metrics.reset()
    inputs = _layer_norm_inputs(DEVICE, dtype)
    _layer_norms(*inputs)
    entries = count_python_entries(monkeypatch)
    got = _layer_norms(*inputs)
    monkeypatch.undo()
    half = dtype in (torch.float16, torch.bfloat16)
    assert entries == [], entries
    for g, w in zip(got, _layer_norms(*_layer_norm_inputs("cpu", dtype)), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        if half:
            eps = torch.finfo(dtype).eps
            torch.testing.assert_close(g.cpu(), w, rtol=4 * eps, atol=4 * eps)
        else:
            torch.testing.assert_close(g.cpu(), w)
    assert_no_fallback()


def test_a_host_tensor_in_a_list_goes_to_the_python_tracer(monkeypatch):
    """A CPU tensor in cat's list goes to the Python tracer (the fast path takes lazy
    tensors only), which raises eager's error."""
    a = torch.randn(2, 3)
    lazy = a.to(DEVICE)
    torch.cat([lazy, lazy])
    entries = count_python_entries(monkeypatch)
    with pytest.raises(RuntimeError, match="device"):
        torch.cat([lazy, a])
    monkeypatch.undo()
    assert entries == ["aten.cat.default"]


def test_foreach_errors_are_pytorchs():
    a, b, _ = _foreach_inputs(DEVICE)
    with pytest.raises(RuntimeError, match="same length|same number"):
        torch._foreach_add(a, b[:2])
    with pytest.raises(RuntimeError, match="broadcast|size of tensor"):
        torch._foreach_add(a, list(reversed(b)))
