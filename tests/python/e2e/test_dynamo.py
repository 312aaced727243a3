"""torch.compile(backend="lazymlir"): the same pipeline behind Dynamo and AOTAutograd."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import assert_no_fallback, target_name
from model_zoo import CASES, run_case
from torch import nn

import lazymlir
import lazymlir.dynamo  # noqa: F401  registers backend="lazymlir" in a source checkout
from lazymlir import metrics


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compile(fn):
    return torch.compile(fn, backend="lazymlir", dynamic=False)


def _train(model, compiled: bool, steps=4, compile_step=False, lr=0.05):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    forward = _compile(model) if compiled else model
    step = _compile(opt.step) if compiled and compile_step else opt.step
    torch.manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(6, 8), torch.randn(6, 4)
        opt.zero_grad()
        loss = nn.functional.mse_loss(forward(x), y)
        loss.backward()
        step()
        losses.append(loss.item())
    return losses


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _assert_same_state(a: nn.Module, b: nn.Module):
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("compile_step", [False, True], ids=["model", "model+optimizer"])
def test_mlp_training_matches_eager(compile_step):
    eager, compiled = _mlp(), _mlp()
    expected = _train(eager, False)
    actual = _train(compiled, True, compile_step=compile_step)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    _assert_same_state(eager, compiled)
    assert_no_fallback()
    # Forward and backward compile once; later steps are cache hits.
    assert metrics.counter("CachedCompile") >= 3


def test_batchnorm_running_stats_are_updated():
    """BatchNorm's running stats are input mutations: AOTAutograd returns them and
    copies them back; they must match eager."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Flatten(), nn.Linear(36, 4))
    compiled = copy.deepcopy(eager)
    forward = _compile(compiled)
    x = torch.randn(2, 3, 5, 5)
    for _ in range(2):
        eager(x).sum().backward()
        forward(x).sum().backward()
    _assert_same_state(eager, compiled)
    assert compiled[1].num_batches_tracked.item() == 2
    for p, q in zip(eager.parameters(), compiled.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
    assert_no_fallback()


class _MaskedWithConstants(nn.Module):
    """Tensors made in forward (as Hugging Face attention masks make their fill value):
    AOTAutograd lifts them into the graph as constants, real tensors in a graph handed
    over under its FakeTensorMode."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        y = self.lin(x)
        fill = torch.tensor(torch.finfo(y.dtype).min)
        scale = torch.tensor([1.0, 2.0, 0.5, 1.0])
        return torch.where(y > 0, y * scale, fill).softmax(-1)


def test_tensors_made_in_forward_are_graph_constants():
    torch.manual_seed(0)
    eager = _MaskedWithConstants()
    compiled = copy.deepcopy(eager)
    forward = _compile(compiled)
    x = torch.randn(6, 8)
    torch.testing.assert_close(forward(x), eager(x))
    eager(x)[:, 0].sum().backward()
    forward(x)[:, 0].sum().backward()
    for p, q in zip(eager.parameters(), compiled.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    assert_no_fallback()


def test_weight_norm_training_compiles_whole():
    """_weight_norm_interface_backward (autograd's formula for the fused weight norm)
    is decomposed (lowering/front/decompositions.py): no fallback inside the backward graph."""
    torch.manual_seed(0)
    eager = nn.utils.parametrizations.weight_norm(nn.Conv1d(8, 8, 4, padding=2, groups=2),
                                                  name="weight", dim=2)
    compiled = copy.deepcopy(eager)
    x = torch.randn(2, 8, 10)
    eager(x).pow(2).sum().backward()
    _compile(compiled)(x).pow(2).sum().backward()
    for p, q in zip(eager.parameters(), compiled.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-5)
    assert_no_fallback()


def _check_against_eager(f, inputs):
    eager_inputs = inputs()
    expected = f(*eager_inputs)
    compiled_inputs = inputs()
    actual = _compile(f)(*compiled_inputs)
    for x, y in zip(actual, expected):
        torch.testing.assert_close(x, y)
    for x, y in zip(compiled_inputs, eager_inputs):
        assert x.shape == y.shape
        torch.testing.assert_close(x, y)


def test_input_mutations_and_outputs_aliasing_inputs():
    def f(a, b, c):
        a.mul_(2)            # a data mutation of an input
        c.unsqueeze_(0)      # a metadata mutation of another input
        b[0].add_(1)         # a mutation through a view of an input
        return a + b.sum(), a.view(-1)  # the second output aliases an input

    _check_against_eager(f, lambda: (torch.arange(8.0).reshape(2, 4), torch.ones(2, 3),
                                     torch.ones(3)))
    assert_no_fallback()


def test_compiled_graphs_never_write_their_inputs():
    """slice_scatter's result was bufferized into its input's buffer: the caller's x changed."""
    _check_against_eager(lambda x, y: (torch.slice_scatter(x, y, 0, 0, 2),),
                         lambda: (torch.zeros(4, 3), torch.ones(2, 3)))
    assert_no_fallback()


def test_a_graph_returning_its_inputs_hands_back_the_callers_tensors():
    """A forward graph returns inputs the backward saves (weights, the batch): they are
    the caller's tensors, not copies the compiled code made (576 KB per MLP step)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    x, w = torch.randn(4, 8), torch.randn(8, 3)
    gm = make_fx(lambda x, w: (x @ w, w, x), tracing_mode="fake")(x, w)
    graph, _, layout = lazymlir.dynamo.to_fx_stage(gm)
    assert len(graph["outputs"]) == 1 and layout == [0, 1, 0]
    assert [type(i).__name__ for i in layout] == ["int", "Passed", "Passed"]
    product, same_w, same_x = lazymlir.dynamo._compile(gm, [x, w])([x, w])
    assert same_w is w and same_x is x
    torch.testing.assert_close(product, x @ w)
    assert_no_fallback()


def _in_place_executables() -> list:
    """The compiled executables of this session that update inputs in place."""
    cache = lazymlir.session.current().graph_cache
    plans = list(cache._memory.values()) if cache is not None else []
    return [p.executable for p in plans if getattr(p, "executable", None) is not None
            and p.executable.in_place]


@pytest.mark.parametrize("make_optimizer", [
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    lambda p: torch.optim.Adam(p, lr=0.01),
    lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
], ids=["sgd-momentum", "adam", "adamw"])
def test_a_compiled_optimizer_step_updates_parameters_and_state_in_place(make_optimizer):
    """AOTAutograd keeps an inference graph's input mutations in the graph
    (keep_inference_input_mutations): the compiled step writes each parameter and
    state tensor where it is (lowering/bufferize/graph_inputs.py), with no new tensors
    copied back."""
    eager, compiled = _mlp(), _mlp()
    opts = [make_optimizer(m.parameters()) for m in (eager, compiled)]
    step = _compile(opts[1].step)
    x, y = torch.randn(6, 8), torch.randn(6, 4)
    pointers = None
    for _ in range(3):
        for model, opt, run in ((eager, opts[0], opts[0].step), (compiled, opts[1], step)):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            run()
        state = [t for s in opts[1].state.values() for t in s.values()
                 if isinstance(t, torch.Tensor) and t.dim()]
        now = [t.data_ptr() for t in [*compiled.parameters(), *state]]
        assert pointers is None or now == pointers  # updated where they are
        pointers = now
    _assert_same_state(eager, compiled)
    for a, b in zip(opts[0].state.values(), opts[1].state.values()):
        for name in a:
            torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6)
    if target_name() == "cpu":
        # (the cuda target's plans write every result to an output buffer, which the
        # caller copies into its input: lowering/bufferize/graph_inputs.protect_inputs)
        updated = {i for e in _in_place_executables() for i, _ in e.in_place}
        assert len(updated) >= len(list(compiled.parameters())), updated
    assert_no_fallback()


def test_in_place_updates_of_strided_inputs_and_of_transposed_reads_match_eager():
    """A strided input is updated through a dense copy written back; an update reading
    its input transposed is computed aside and copied in (bufferization's analysis)."""
    def f(x, w):
        x.mul_(2)
        w.add_(w.t().contiguous())  # (eager refuses an overlapping w.add_(w.t()))
        return x.sum(), w.t() * 1

    _check_against_eager(f, lambda: (torch.arange(12.0).reshape(3, 4).t(),
                                     torch.arange(16.0).reshape(4, 4)))
    assert_no_fallback()


def test_an_update_through_a_view_also_returned_matches_eager():
    """Bufferization refuses to materialize this update in x (x is also a result): the
    graph is compiled with the update copied into x last (lowering/bufferize/stage.py)."""
    def f(x):
        x[1:].mul_(3)
        return (x,)

    _check_against_eager(f, lambda: (torch.arange(12.0).reshape(3, 4),))
    assert_no_fallback()


def test_an_in_place_update_in_a_graph_with_index_checks():
    """A graph with bounds checks is compiled without its in-place updates (a failed
    check reruns it eagerly on the same inputs): the update is copied in after the run,
    and a bad index raises eager's error with the input not yet updated (eager has
    updated it before raising)."""
    def f(x, idx):
        x.add_(1)
        return (x[idx] * 2,)

    _check_against_eager(f, lambda: (torch.arange(5.0), torch.tensor([1, 3])))
    x = torch.arange(5.0)
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 5"):
        _compile(f)(x, torch.tensor([1, 7]))
    assert torch.equal(x, torch.arange(5.0))
    assert_no_fallback()


def test_two_inputs_aliasing_each_other():
    """AOTAutograd passes overlapping inputs as one synthetic base and rebuilds them
    with as_strided_scatter, which torch-mlir does not lower: that op runs eagerly
    (counted), the rest compiles, and the values match eager."""
    def f(a, b):
        a.mul_(2)           # a data mutation of one alias...
        b.t_()              # ...and a metadata mutation of the other
        return a.sum(0) + b.sum(1)

    def inputs():
        base = torch.arange(12.0).reshape(3, 4)
        return base[:2], base[1:]

    _check_against_eager(f, inputs)
    assert set(metrics.fallback_ops()) <= {"aten::as_strided_scatter"}, metrics.fallback_ops()


def test_attention_gradients_match_eager_after_several_steps():
    torch.manual_seed(0)
    eager = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    compiled = copy.deepcopy(eager)
    forward = _compile(compiled)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, compiled)]
    x = torch.randn(2, 5, 16)
    for _ in range(3):
        for opt in opts:
            opt.zero_grad()
        eager(x).square().mean().backward()
        forward(x).square().mean().backward()
        for opt in opts:
            opt.step()
    _assert_same_state(eager, compiled)


def test_second_process_hits_the_disk_cache(tmp_path):
    script = tmp_path / "compiled.py"
    script.write_text(textwrap.dedent("""
        import torch, lazymlir, lazymlir.dynamo
        torch.manual_seed(0)
        m = torch.nn.Linear(5, 3)
        out = torch.compile(m, backend="lazymlir", dynamic=False)(torch.ones(2, 5))
        torch.testing.assert_close(out, m(torch.ones(2, 5)))
        c = lazymlir.metrics.counters()
        print("COUNTERS", c.get("DiskCacheHit", 0), c.get("UncachedCompile", 0))
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    env.update(LAZYMLIR_TARGET="cpu", LAZYMLIR_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                           text=True, timeout=600) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    assert runs[0].stdout.split()[-2:] == ["0", "1"], runs[0].stdout  # forward (backward: lazily)
    assert runs[1].stdout.split()[-2:] == ["1", "0"], runs[1].stdout


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic=True"])
def test_changing_batch_sizes_compile_once_per_shape_unless_dynamic(dynamic):
    """torch.compile's default marks a dimension dynamic once it changed; the backend
    then compiles one static specialization per shape (forward and backward). With
    dynamic=True the graphs with symbolic sizes compile once for every batch size
    (lazymlir/dynamo_dynamic.py)."""
    if dynamic and target_name() != "cpu":
        pytest.skip("symbolic sizes are the cpu target's; others compile per shape "
                    "(dynamo_dynamic.py), as the automatic case checks")
    eager, compiled = _mlp(), _mlp()
    forward = torch.compile(compiled, backend="lazymlir", dynamic=dynamic)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, compiled)]
    torch.manual_seed(1)
    compiles = []
    for batch in (4, 6, 4, 6, 3, 4, 6, 3):
        x, y = torch.randn(batch, 8), torch.randn(batch, 4)
        losses = []
        for model, opt in zip((eager, forward), opts):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-5, abs=1e-6), batch
        compiles.append(metrics.counter("UncachedCompile") + metrics.counter("DiskCacheHit"))
    _assert_same_state(eager, compiled)
    assert_no_fallback()
    # automatic: (forward, backward) per shape, plus the first shape's static graphs: the
    # min-cut partitioner splits the symbolic graph Dynamo traces after the first change
    # differently, so its specialization for batch 4 is another graph.
    assert compiles[-1] <= 8 if dynamic is None else compiles[-1] == 2, compiles
    assert compiles[-1] == compiles[4], "shapes seen before compiled again"
    assert metrics.counter("DynamicSpecialized") == 0


@pytest.mark.parametrize("model_name,opt_name", CASES, ids=[f"{m}-{o}" for m, o in CASES])
def test_model_zoo_training_compiled(model_name, opt_name):
    """The lazy device's model tests through torch.compile(backend="lazymlir"): the model
    and the optimizer step compiled, eager's numbers, no fallback, no compile after the
    warm-up steps."""
    run_case(model_name, opt_name, "compiled")


def test_forward_and_backward_compile_at_once_in_two_workers(tmp_path):
    current = lazymlir.session.reset()
    try:
        current.settings.compile_worker = True
        current.settings.compile_workers = 2
        current.settings.cache_dir = str(tmp_path / "cache")
        model = _mlp()
        reference = copy.deepcopy(model)
        assert _train(model, compiled=True, steps=2) == pytest.approx(
            _train(reference, compiled=False, steps=2), rel=1e-5)
        assert metrics.counter("UncachedCompile") == 2  # each graph compiled once
        assert metrics.counter("CompileWorkerStart") == 2  # the backward did not wait
        assert not current.compiles_ahead
        # Both were stored when their compile ended: a fresh session finds them on disk.
        current = lazymlir.session.reset()
        current.settings.cache_dir = str(tmp_path / "cache")
        torch._dynamo.reset()
        _train(_mlp(), compiled=True, steps=1)
        assert metrics.counter("DiskCacheHit") == 2 and metrics.counter("UncachedCompile") == 0
    finally:
        lazymlir.session.reset()


def _atan2_does_not_lower(monkeypatch):
    """Compiles of graphs with atan2 fail (in workers forked after this)."""
    from lazymlir.lowering.front import numerics

    real = numerics.apply

    def apply(gm):
        if any("atan2" in str(node.target) for node in gm.graph.nodes):
            raise NotImplementedError("injected: atan2 does not lower")
        return real(gm)

    monkeypatch.setattr(numerics, "apply", apply)


def test_an_op_that_does_not_lower_falls_back_inside_the_compiled_graph(monkeypatch):
    """A graph compiled ahead that fails: its first run splits it around the op (a
    counted eager fallback), or raises with LAZYMLIR_FALLBACK=error."""
    _atan2_does_not_lower(monkeypatch)
    current = lazymlir.session.reset()  # workers forked from here on inherit the injection
    try:
        current.settings.cache_dir = None
        x, y = torch.randn(8, 4), torch.randn(8, 4)
        fn = lambda x, y: (torch.atan2(x, y) * 2).sum(1) + x.exp().sum(1)  # noqa: E731
        torch.testing.assert_close(_compile(fn)(x, y), fn(x, y))
        assert metrics.fallback_ops() == {"aten::atan2": 1}, metrics.fallback_ops()
        torch._dynamo.reset()
        current = lazymlir.session.reset()
        current.settings.cache_dir = None
        current.settings.fallback = "error"
        with pytest.raises(lazymlir.CompileError, match="injected: atan2 does not lower"):
            _compile(fn)(x, y)
    finally:
        lazymlir.session.reset()


def test_a_compile_ahead_stored_before_its_first_run_is_still_this_process_compile(
        tmp_path, monkeypatch):
    current = lazymlir.session.reset()
    try:
        current.settings.compile_worker = True
        current.settings.cache_dir = str(tmp_path / "cache")
        real = lazymlir.execution.executor.compile_ahead

        def compile_ahead_and_wait(graph, key, **kwargs):  # done (and on disk) before it runs
            real(graph, key, **kwargs)
            for _, future in list(current.compiles_ahead.values()):
                future.result()

        monkeypatch.setattr(lazymlir.execution.executor, "compile_ahead",
                            compile_ahead_and_wait)
        _train(_mlp(), compiled=True, steps=1)
        assert metrics.counter("UncachedCompile") == 2 and not current.compiles_ahead
        assert metrics.counter("DiskCacheHit") == 0
    finally:
        lazymlir.session.reset()


def _slow_compiles(monkeypatch, seconds: float):
    """Every compile in the (forked) workers takes `seconds` longer."""
    import time

    from lazymlir.lowering.front import numerics

    real = numerics.apply

    def apply(gm):
        time.sleep(seconds)
        return real(gm)

    monkeypatch.setattr(numerics, "apply", apply)


def _nice_values(pool) -> set[int]:
    """The nice values of a worker pool's processes."""
    return {os.getpriority(os.PRIO_PROCESS, worker._process.pid) for worker in pool._workers}


def _sgd_step(optimizer, run, x, y) -> float:
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(run(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def test_eager_while_compiling_runs_first_runs_eagerly_and_later_runs_wait(monkeypatch):
    """With eager_while_compiling, a step whose graphs are still compiling runs them with
    PyTorch's kernels (counted, not a fallback) instead of waiting; the next step,
    although the compiles (2 s each, at low priority) have not ended, waits for them
    and runs the same graphs compiled. Every step matches eager."""
    _slow_compiles(monkeypatch, 2.0)
    current = lazymlir.session.reset()  # workers forked from here on are slow
    try:
        current.settings.cache_dir = None
        model, reference = _mlp(), _mlp()
        forward = torch.compile(model, backend="lazymlir", dynamic=False,
                                options={"eager_while_compiling": True})
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
        torch.manual_seed(1)
        batches = [(torch.randn(6, 8), torch.randn(6, 4)) for _ in range(3)]

        first = _sgd_step(opt, forward, *batches[0])
        assert first == pytest.approx(_sgd_step(ref_opt, reference, *batches[0]), rel=1e-5)
        assert metrics.counter("EagerWhileCompiling") == 2  # forward and backward
        assert metrics.counter("UncachedCompile") == 0  # nothing waited for a compile
        assert lazymlir.session.current().compiles_ahead  # still compiling
        for x, y in batches[1:]:
            assert _sgd_step(opt, forward, x, y) == pytest.approx(
                _sgd_step(ref_opt, reference, x, y), rel=1e-5)
        assert metrics.counter("EagerWhileCompiling") == 2
        assert metrics.counter("UncachedCompile") == 2  # then both ran compiled
        assert not current.compiles_ahead
        # compiled by the background workers, at the lowest CPU priority
        assert current.worker is None
        assert _nice_values(current.background_worker) == {19}
        assert_no_fallback()
        _assert_same_state(reference, model)
    finally:
        lazymlir.session.reset()


def test_eager_while_compiling_setting_applies_without_the_option(monkeypatch):
    """The setting (LAZYMLIR_EAGER_WHILE_COMPILING) gives a torch.compile without the
    option the same first step: its graphs run eagerly while they compile. (What
    follows is the option's test above; the session is closed here without waiting.)"""
    _slow_compiles(monkeypatch, 2.0)
    current = lazymlir.session.reset()
    try:
        current.settings.cache_dir = None
        current.settings.eager_while_compiling = True
        model, reference = _mlp(), _mlp()
        forward = torch.compile(model, backend="lazymlir", dynamic=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
        x, y = torch.randn(6, 8), torch.randn(6, 4)
        assert _sgd_step(opt, forward, x, y) == pytest.approx(
            _sgd_step(ref_opt, reference, x, y), rel=1e-5)
        assert metrics.counter("EagerWhileCompiling") == 2
        assert metrics.counter("UncachedCompile") == 0
        assert current.compiles_ahead
    finally:
        lazymlir.session.reset()


@pytest.mark.parametrize("fallback", ["warn", "error"])
def test_eager_while_compiling_reports_a_failed_compile_at_the_second_run(
        monkeypatch, fallback):
    """The first run goes eagerly while the graph compiles; its compile fails, and the
    second run falls back around the op (counted) or raises, as a first run would
    without eager_while_compiling."""
    _atan2_does_not_lower(monkeypatch)
    _slow_compiles(monkeypatch, 1.0)  # still compiling when the first run comes
    current = lazymlir.session.reset()
    try:
        current.settings.cache_dir = None
        current.settings.fallback = fallback
        x, y = torch.randn(8, 4), torch.randn(8, 4)
        fn = lambda x, y: (torch.atan2(x, y) * 2).sum(1) + x.exp().sum(1)  # noqa: E731
        compiled = torch.compile(fn, backend="lazymlir", dynamic=False,
                                 options={"eager_while_compiling": True})
        torch.testing.assert_close(compiled(x, y), fn(x, y))
        assert metrics.counter("EagerWhileCompiling") == 1
        assert not metrics.fallback_ops()
        if fallback == "error":
            with pytest.raises(lazymlir.CompileError, match="injected: atan2 does not lower"):
                compiled(x, y)
        else:
            torch.testing.assert_close(compiled(x, y), fn(x, y))
            assert metrics.fallback_ops() == {"aten::atan2": 1}, metrics.fallback_ops()
            assert metrics.counter("EagerWhileCompiling") == 1
    finally:
        lazymlir.session.reset()


def test_by_default_the_first_run_waits_for_its_compile(monkeypatch):
    _slow_compiles(monkeypatch, 0.5)
    current = lazymlir.session.reset()
    try:
        current.settings.cache_dir = None
        _train(_mlp(), compiled=True, steps=1)
        assert metrics.counter("EagerWhileCompiling") == 0
        assert metrics.counter("UncachedCompile") == 2
        # compiled by workers as busy as this process (it waits for them)
        assert current.background_worker is None
        assert _nice_values(current.worker) == {os.getpriority(os.PRIO_PROCESS, 0)}
    finally:
        lazymlir.session.reset()


def test_backend_options_are_checked():
    fn = lambda x: x.exp() + 1  # noqa: E731
    x = torch.randn(4)
    with pytest.raises(Exception, match=r"unknown option\(s\) \['eager'\]; known: "
                                        r"eager_while_compiling \(bool\)"):
        torch.compile(fn, backend="lazymlir", options={"eager": True})(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="option eager_while_compiling must be a bool"):
        torch.compile(fn, backend="lazymlir", options={"eager_while_compiling": "yes"})(x)
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match=r"mode='max-autotune'\) is ignored"):
        torch.testing.assert_close(
            torch.compile(fn, backend="lazymlir", mode="max-autotune")(x), fn(x))
