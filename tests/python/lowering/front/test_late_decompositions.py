"""Ops recorded whole by the lazy device and decomposed by the torch stage
(lowering/front/late_decompositions.py) as the tracer decomposed them before: addcmul,
addcdiv and lerp, and a transformer's backward ops and loss."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import DEVICE, assert_no_fallback, count_python_entries, tolerances

import lazymlir
from lazymlir.tracing import values
from lazymlir.tracing.graph import build_graph


def _calls(a, b, c):
    return [torch.addcmul(a, b, c, value=0.3), torch.addcmul(a, b, b),
            torch.addcdiv(a, b, c, value=-0.2), torch.addcdiv(a, b, c, value=2),
            torch.lerp(a, b, 0.1), torch.lerp(a, b, 0.75), torch.lerp(a, b, -3.0),
            torch.lerp(a, b, 2), torch.lerp(a, b, c)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_late_decompositions_give_eagers_values(dtype):
    """Within a unit in the last place: eager's kernels contract `self + value * t1 * t2`
    and lerp to fused multiply-adds (lerp explicitly), our code does not, which moves a
    rounding (for half types, computed in float32, 1 value of 2112 for addcmul by 0.3;
    a float32 result near 0 by cancellation differs relatively more)."""
    torch.manual_seed(0)
    a, b = torch.randn(64, 33, dtype=dtype), torch.randn(64, 33, dtype=dtype)
    c = torch.rand(64, 33, dtype=dtype) + 0.5
    lazymlir.metrics.reset()
    got = _calls(*(t.to(DEVICE) for t in (a, b, c)))
    for g, w in zip(got, _calls(a, b, c), strict=True):
        g = g.cpu()
        assert g.dtype == w.dtype
        eps = torch.finfo(dtype).eps
        torch.testing.assert_close(g, w, rtol=4 * eps, atol=32 * eps)
        if dtype in (torch.float16, torch.bfloat16):
            assert (g != w).sum() <= 2
    assert_no_fallback()


def test_the_ops_are_recorded_whole_with_their_floats_as_scalar_inputs():
    """A changing `value` or weight makes one graph (a scalar input), not one per value."""
    a, b, c = (torch.randn(4, 3).to(DEVICE) for _ in range(3))
    keys = set()
    for value in (0.5, -0.25, 3.0):
        outs = [torch.addcdiv(a, b, c, value=value), torch.lerp(a, b, value)]
        graph, _, scalars = build_graph([values.value_of(values.inner(t)) for t in outs])
        assert [n["op"] for n in graph["nodes"]] == ["aten.addcdiv.default", "aten.lerp.Scalar"]
        assert scalars.count(value) == 2
        keys.add(str(graph["nodes"]))
    assert len(keys) == 1


# ---------------------------------------------------------------- a transformer's ops

aten = torch.ops.aten
_NEW = ("native_layer_norm_backward", "gelu_backward", "_softmax_backward_data",
        "_log_softmax_backward_data", "embedding_dense_backward", "masked_fill",
        "nll_loss_forward", "nll_loss_backward", "ones_like", "zeros_like", "stack")


def _transformer_calls(device, dtype):
    """The backward ops and losses LATE took from the tracer, each called directly (as
    autograd calls them) with their list, None and bool arguments in several forms, and
    `ones_like`/`zeros_like` (dtypes, memory formats, a layout) and `stack`; their
    results on the CPU. Inputs made on the CPU from a fixed seed."""
    torch.manual_seed(0)
    x, g = torch.randn(3, 5, 16, dtype=dtype), torch.randn(3, 5, 16, dtype=dtype)
    w, b = torch.randn(16, dtype=dtype), torch.randn(16, dtype=dtype)
    _, mean, rstd = aten.native_layer_norm(x, [16], w, b, 1e-5)
    p = torch.softmax(torch.randn(6, 9), -1).to(dtype)
    logp = torch.log_softmax(torch.randn(6, 9), -1).to(dtype)
    idx = torch.tensor([[1, 2, 2, 7], [0, 2, 5, 1]])
    mask = torch.rand(3, 5, 16) > 0.5
    ints = torch.arange(80, dtype=torch.int32).reshape(5, 16)
    scores, target = torch.randn(6, 9, dtype=dtype), torch.tensor([1, 8, 0, -100, 3, 3])
    weight = torch.rand(9, dtype=dtype) + 0.5
    host = dict(x=x, g=g, w=w, b=b, mean=mean, rstd=rstd, p=p, logp=logp, idx=idx,
                mask=mask, ints=ints, scores=scores, target=target, weight=weight,
                ge=g[:2, :4], g0=torch.tensor(0.7, dtype=dtype))
    t = {k: v.to(device) for k, v in host.items()}
    out = [*aten.native_layer_norm_backward(t["g"], t["x"], [16], t["mean"], t["rstd"],
                                            t["w"], t["b"], [True, True, True]),
           aten.native_layer_norm_backward(t["g"], t["x"], [5, 16], *(
               aten.native_layer_norm(t["x"], [5, 16], None, None, 1e-5)[1:]),
               None, None, [True, False, False])[0],
           aten.gelu_backward(t["g"], t["x"]),
           aten.gelu_backward(t["g"], t["x"], approximate="tanh"),
           aten._softmax_backward_data(t["logp"], t["p"], -1, dtype),
           aten._log_softmax_backward_data(t["p"], t["logp"], 1, dtype),
           aten.embedding_dense_backward(t["ge"], t["idx"], 9, -1, False),
           aten.embedding_dense_backward(t["ge"], t["idx"], 9, 2, True),
           t["x"].masked_fill(t["mask"], float("-inf")), t["x"].masked_fill(t["mask"], 0.25),
           t["x"].masked_fill(t["mask"][0, 0], 3), t["ints"].masked_fill(t["mask"][0], -2.75),
           t["mask"].masked_fill(t["mask"][0], 0.0),
           # (autograd's gradient seed: a contiguous memory format)
           aten.ones_like(t["x"], memory_format=torch.contiguous_format),
           torch.ones_like(t["x"]) * t["x"], torch.ones_like(t["mask"]),
           torch.zeros_like(t["ints"], dtype=torch.bool), torch.zeros_like(t["g"]) - t["g"],
           torch.ones_like(t["ints"], dtype=dtype, memory_format=torch.preserve_format),
           torch.zeros_like(t["x"], layout=torch.strided),
           # (gradient clipping's: 0-d norms; a list holding one tensor twice)
           torch.stack([t["x"], t["g"]], 1), torch.stack([t["g0"], t["g0"] * 2, t["g0"]]),
           torch.stack([t["x"][0]], -1)]
    for reduction in (0, 1, 2):
        for wt in (None, t["weight"]):
            loss, total = aten.nll_loss_forward(t["scores"], t["target"], wt, reduction, -100)
            grad = t["g0"] if reduction else t["scores"][:, 0]
            out += [loss, total, aten.nll_loss_backward(grad, t["scores"], t["target"], wt,
                                                        reduction, -100, total)]
    return [o.cpu() for o in out]


_DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", _DTYPES)
def test_transformer_ops_give_eagers_values(dtype):
    """Recorded whole, decomposed by the torch stage: eager's values (float32 within
    the suite's tolerance; half types computed in float32 and rounded once, within a
    few units in the last place of their own)."""
    lazymlir.metrics.reset()
    got = _transformer_calls(DEVICE, dtype)
    want = _transformer_calls("cpu", dtype)
    assert_no_fallback()
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype and g.shape == w.shape, i
        if dtype == torch.float32 or not w.is_floating_point():
            tolerance = tolerances(w.dtype)
        else:
            eps = torch.finfo(dtype).eps
            tolerance = {"rtol": 4 * eps, "atol": 4 * eps}
        torch.testing.assert_close(g, w, equal_nan=True, **tolerance,
                                   msg=lambda m, i=i: f"{i}: {m}")


_DECOMPOSED_BY_THE_TRACER = """
import sys
sys.path[:0] = [{tests!r}, {here!r}]
import torch
import lazymlir
from lazymlir.lowering.front import late_decompositions
from lazymlir.tracing import native, tracer
import test_late_decompositions as t
for op in list(late_decompositions.LATE):
    if op._schema.name.split("::")[1] in t._NEW:
        # (ones_like's route is made at import: made again, and the C++ entry, which
        # asked once whether it is a leaf, is kept out by python_recording below)
        tracer._ROUTES.pop(id(op), None)
        tracer._LEAVES.pop(id(op), None)
        del late_decompositions.LATE[op]
late_decompositions._tracer_table = late_decompositions._make_fx_table = None
lazymlir.metrics.reset()
with native.python_recording():
    calls = {{str(d): t._transformer_calls("lazy_mlir", d) for d in t._DTYPES}}
torch.save(calls, sys.argv[1])
assert lazymlir.metrics.fallback_ops() == {{}}, lazymlir.metrics.fallback_ops()
"""


def _bits(t):
    return t if t.dtype == torch.bool else t.reshape(-1).view(torch.uint8)


def test_transformer_ops_give_the_tracers_bits(tmp_path):
    """The graph's values equal, bit for bit, those of the tracer's decomposition (a
    fresh process with the ops taken out of LATE, decomposed as they are recorded)."""
    here = Path(__file__).parent
    script = tmp_path / "decomposed.py"
    script.write_text(_DECOMPOSED_BY_THE_TRACER.format(tests=str(here.parents[1]), here=str(here)))
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "out.pt")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    then = torch.load(tmp_path / "out.pt")
    for dtype in _DTYPES:
        got = _transformer_calls(DEVICE, dtype)
        for i, (g, w) in enumerate(zip(got, then[str(dtype)], strict=True)):
            assert g.dtype == w.dtype and g.shape == w.shape, (dtype, i)
            assert torch.equal(_bits(g), _bits(w)), (dtype, i)


def test_transformer_ops_are_recorded_whole_without_python(monkeypatch):
    """After a first call, the ops reach the Python tracer once: the C++ entry records
    them (output masks and absent optional tensors included), except a layer norm
    backward with outputs masked off (undefined results, which it does not make)."""
    _transformer_calls(DEVICE, torch.float32)
    entries = count_python_entries(monkeypatch)
    _transformer_calls(DEVICE, torch.float32)
    monkeypatch.undo()
    assert [e for e in entries if e.split(".")[1] in _NEW] == [
        "aten.native_layer_norm_backward.default"]


def test_a_gpt_step_takes_them_without_python(monkeypatch):
    """A GPT training step (benchmarks/models.py's model, smaller; AdamW) once its caches
    are warm: none of these ops reaches the Python tracer (before LATE held them: 16
    entries of the benchmark GPT's 28 per step, and nll_loss_backward's, whose absent
    weight autograd passes as an undefined tensor; then the gradient seed's ones_like),
    and nothing falls back. What still enters it is listed."""
    sys.path.append(str(Path(__file__).resolve().parents[4]))
    from benchmarks.models import GPT, GPTConfig, gpt_batch, gpt_train_step

    torch.manual_seed(0)
    config = GPTConfig(vocab=32, seq=8, dim=16, heads=2, layers=1)
    model = GPT(config).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, targets = (t.to(DEVICE) for t in gpt_batch(config, 2, torch.Generator().manual_seed(1)))
    lazymlir.metrics.reset()
    for _ in range(2):
        gpt_train_step(model, opt, idx, targets)
        lazymlir.mark_step()
    entries = count_python_entries(monkeypatch)
    loss = gpt_train_step(model, opt, idx, targets)
    monkeypatch.undo()
    assert torch.isfinite(loss.cpu())
    ops = {e.split(".")[1] for e in entries}
    assert ops & set(_NEW) == set(), entries
    assert sorted(entries) == _GPT_STEP_ENTRIES, entries
    assert_no_fallback()


# What a (one-layer) GPT step still hands the Python tracer: gradient clipping's foreach
# ops (`_foreach_norm`, `_foreach_mul` by a tensor; the norms' `stack` is LATE). (Its attention's
# split and the backward's cat are the C++ entry's since it takes lists of tensors, its
# layer norms since it takes layer norm's route; the benchmark's step, which does not
# clip, enters Python not once.)
_GPT_STEP_ENTRIES = sorted(["aten._foreach_norm.Scalar", "aten._foreach_mul.Tensor"])


def test_masked_fill_converts_a_lifted_float_to_the_tensors_dtype():
    """A float filling an integer or complex tensor (a scalar graph input): converted in
    the graph as eager converts it (integers truncated toward 0; the tracer's
    decomposition could not record a complex fill value)."""
    mask = torch.rand(4, 3, generator=torch.Generator().manual_seed(0)) > 0.5
    lazymlir.metrics.reset()
    for x in (torch.arange(12).reshape(4, 3), torch.randn(4, 3, dtype=torch.complex64)):
        for value in (2.75, -2.75):
            got = x.to(DEVICE).masked_fill(mask.to(DEVICE), value).cpu()
            assert torch.equal(got, x.masked_fill(mask, value)), (x.dtype, value)
    assert_no_fallback()
