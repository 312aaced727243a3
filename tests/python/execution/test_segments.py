"""Big graphs compiled as segments: a graph of more than LAZYMLIR_SEGMENT_NODES nodes is
cut into contiguous segments that compile at once in the compile workers and run in
order as one plan (execution/partition.py's cut_points, executor._segmented).

The threshold is made tiny here, so graphs of a few dozen nodes split into a few
segments: results are eager's on both entry points, the segments' compiles overlap,
a changed graph compiles only the segments that changed, and a segment that does not
lower falls back around its op as a whole graph would.
"""

from __future__ import annotations

import threading
import weakref

import pytest
import torch
from conftest import DEVICE, assert_no_fallback, assert_same

import lazymlir
import lazymlir.dynamo  # noqa: F401  registers backend="lazymlir" in a source checkout
from lazymlir import metrics, session
from lazymlir.execution import executor, partition, worker
from lazymlir.lowering.front import fft, fx_graph

SEGMENT_NODES = 8


@pytest.fixture
def small_segments():
    settings = lazymlir.config.settings()
    saved, settings.segment_nodes = settings.segment_nodes, SEGMENT_NODES
    yield
    settings.segment_nodes = saved


@pytest.fixture
def compiles_in_flight(monkeypatch):
    """{"most": the most requests the compile workers were busy with at once}."""
    seen = {"now": 0, "most": 0}
    lock = threading.Lock()
    original = worker.CompileWorker.request

    def request(self, kind, payload):
        with lock:
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])
        try:
            return original(self, kind, payload)
        finally:
            with lock:
                seen["now"] -= 1

    monkeypatch.setattr(worker.CompileWorker, "request", request)
    return seen


@pytest.fixture
def launched_plans(monkeypatch):
    """The plans mark_step() launched (in the background: a target whose code runs on
    any thread, the cpu target's; the cuda target runs a plan at its sync)."""
    if not lazymlir.targets.active().runs_in_background:
        pytest.skip("the active target does not launch plans in the background")
    plans = []
    original = executor.launch

    def launch(plan, *args):
        plans.append(plan)
        return original(plan, *args)

    monkeypatch.setattr(executor, "launch", launch)
    return plans


def _step(w, b, x, lr, last=torch.exp):
    """A few dozen ops: a forward, its hand-written gradient, an update by a Python
    float `lr` (a scalar input of the graph)."""
    h = torch.tanh(x @ w + b)
    loss = (h * h).sum()
    grad_h = 2 * h * (1 - h * h)
    grad_w = x.t() @ grad_h
    grad_b = grad_h.sum(0)
    return loss, w - lr * grad_w, b - lr * grad_b, last(h).mean() * lr


def _inputs():
    torch.manual_seed(0)
    return (torch.randn(6, 5, dtype=torch.float64), torch.randn(5, dtype=torch.float64),
            torch.randn(4, 6, dtype=torch.float64))


def test_a_big_lazy_graph_compiles_as_concurrent_segments(
        small_segments, compiles_in_flight, launched_plans):
    w, b, x = _inputs()
    expected = _step(w, b, x, 0.1)
    actual = _step(w.to(DEVICE), b.to(DEVICE), x.to(DEVICE), 0.1)
    lazymlir.mark_step()
    assert_same([a.cpu() for a in actual], expected)
    assert_no_fallback()
    (plan,) = launched_plans  # the segmented plan was launched (a chain on the native thread)
    assert isinstance(plan, partition.Partitioned) and not plan.eager
    assert len(plan.plans) >= 3, len(plan.plans)
    assert all(len(sub["nodes"]) <= SEGMENT_NODES + SEGMENT_NODES // 8 + 1
               for sub in plan.segments())
    assert metrics.counter("UncachedCompile") == len(plan.plans)
    # the segments compiled two at a time (one worker on a one-core machine)
    assert compiles_in_flight["most"] == min(2, lazymlir.config.settings().compile_workers)
    # The next step's graph (another lr: the same graph) runs the same plan.
    again = _step(w.to(DEVICE), b.to(DEVICE), x.to(DEVICE), 0.2)
    lazymlir.mark_step()
    assert_same([a.cpu() for a in again], _step(w, b, x, 0.2))
    assert metrics.counter("UncachedCompile") == len(plan.plans)


def test_a_changed_graph_compiles_only_its_changed_segments(small_segments):
    w, b, x = _inputs()
    w, b, x = w[:, :3], b[:3], x[:3]  # shapes of their own: no graph of another test
    lazy_w, lazy_b, lazy_x = w.to(DEVICE), b.to(DEVICE), x.to(DEVICE)
    first = _step(lazy_w, lazy_b, lazy_x, 0.1)
    lazymlir.mark_step()
    compiled = metrics.counter("UncachedCompile")
    assert compiled >= 3
    # The same step with its last exp a sin: only the last segment differs.
    changed = _step(lazy_w, lazy_b, lazy_x, 0.1, last=torch.sin)
    lazymlir.mark_step()
    assert metrics.counter("UncachedCompile") == compiled + 1
    assert metrics.counter("CachedCompile") >= compiled - 1
    assert_same([a.cpu() for a in first], _step(w, b, x, 0.1))
    assert_same([a.cpu() for a in changed], _step(w, b, x, 0.1, last=torch.sin))
    assert_no_fallback()


def _blocks(count: int, early: int = 0) -> dict:
    """An fx-stage graph shaped like a network's layers: `early` negations, then `count`
    blocks of 10 nodes, each reading its block's first value (which crosses any cut inside
    the block) and the previous node; one value crosses a cut between blocks."""
    def ref(kind, index):
        return {"ref": [kind, index, 0]}
    desc = {"shape": [3], "dtype": "float32"}
    nodes = [{"op": "aten.neg.default", "args": [ref("input", 0) if i == 0 else ref("node", i - 1)],
              "kwargs": {}, "outputs": [desc]} for i in range(early)]
    for block in range(count):
        start = len(nodes)
        for i in range(10):
            last = ref("node", len(nodes) - 1) if nodes else ref("input", 0)
            other = ref("input", 1) if i == 0 else ref("node", start)
            op = "aten.mul.Tensor" if (block + i) % 3 else "aten.add.Tensor"
            nodes.append({"op": op, "args": [last, other], "kwargs": {}, "outputs": [desc]})
    return {"format": fx_graph.FORMAT, "version": fx_graph.VERSION,
            "inputs": [desc, desc], "scalars": [], "nodes": nodes,
            "outputs": [ref("node", len(nodes) - 1)]}


def test_cut_points_are_near_equal_and_cross_few_values():
    graph = _blocks(20)
    cuts = partition.cut_points(graph, 60)
    assert cuts == [50, 100, 150]  # block boundaries: one value crosses each
    assert partition.cut_points(graph, 200) == [] and partition.cut_points(graph, 0) == []
    # A node inserted at the start shifts every cut by one: the later segments are the
    # same graphs (the same hashes: their compiles are reused).
    split = partition.Partitioned(graph, {}, None, cuts)
    grown = _blocks(20, early=1)
    assert partition.cut_points(grown, 60) == [51, 101, 151]
    shifted = partition.Partitioned(grown, {}, None, partition.cut_points(grown, 60))
    hashes = [fx_graph.structural_hash(s, "cpu") for s in split.segments()]
    grown_hashes = [fx_graph.structural_hash(s, "cpu") for s in shifted.segments()]
    assert hashes[1:] == grown_hashes[1:] and hashes[0] != grown_hashes[0]


def test_a_split_run_frees_each_crossing_value_after_its_last_reader():
    """A value that crosses a cut is dropped once the segment that reads it last has run:
    a big graph's run holds one cut's crossing values at a time (a training step's saved
    activations), not every one until the run ends."""
    graph = _blocks(20)  # 4 segments; segment k's last value is read by segment k + 1 only
    split = partition.Partitioned(graph, {}, None, partition.cut_points(graph, 60))
    made, alive = [], []  # per segment run: weak references to its outputs; who lived

    def run_segment(sub, tensors, scalars):
        alive.append([[ref() is not None for ref in refs] for refs in made])
        outputs = [torch.zeros(3) for _ in sub["outputs"]]
        made.append([weakref.ref(o) for o in outputs])
        return outputs

    split.run_segment = run_segment
    result = split.run(None, [torch.ones(3), torch.ones(3)], [])
    assert alive == [[], [[True]], [[False], [True]], [[False], [False], [True]]]
    assert made[-1][0]() is result[0]  # the graph's output is kept


def test_a_big_compiled_graph_with_in_place_updates_splits(small_segments, compiles_in_flight):
    """torch.compile's graphs take the same path: a step updating its inputs in place
    (the "in_place" entry), split, gives eager's values in the caller's tensors."""
    def update(params, grads, lr):
        for p, g in zip(params, grads):
            p.mul_(0.9).add_(torch.sin(g) * g, alpha=-lr)
        return sum(p.sum() for p in params)

    torch.manual_seed(0)
    params = [torch.randn(4, dtype=torch.float64) for _ in range(4)]
    grads = [torch.randn(4, dtype=torch.float64) for _ in range(4)]
    expected_params = [p.clone() for p in params]
    expected = update(expected_params, grads, 0.5)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(update, backend="lazymlir", dynamic=False)
        actual = compiled(params, grads, 0.5)
    finally:
        torch._dynamo.reset()
    assert_same(actual, expected)
    assert_same(params, expected_params, "the parameters updated in place")
    assert metrics.counter("UncachedCompile") >= 2
    assert compiles_in_flight["most"] == min(2, lazymlir.config.settings().compile_workers)
    assert_no_fallback()


def test_a_segment_that_does_not_lower_falls_back_alone(small_segments, monkeypatch):
    """A segment holding an op without a lowering is split around it, as a whole graph
    would be; the other segments stay compiled."""
    split = []
    original = executor._partition

    def partition_graph(current, target, graph, error):
        split.append(len(graph["nodes"]))
        return original(current, target, graph, error)

    monkeypatch.setattr(executor, "_partition", partition_graph)
    w, b, x = _inputs()
    signal = torch.randn(2, fft.MAX_LENGTH + 1, dtype=torch.float64)  # no lowering
    expected = _step(w, b, x, 0.1)
    with pytest.warns(UserWarning, match="_fft_r2c"):
        actual = _step(w.to(DEVICE), b.to(DEVICE), x.to(DEVICE), 0.1)
        spectrum = torch.fft.fft(signal.to(DEVICE) * 2).real
        lazymlir.mark_step()
        assert_same(spectrum.cpu(), torch.fft.fft(signal * 2).real)
    assert_same([a.cpu() for a in actual], expected)
    assert metrics.counters().get("aten::_fft_r2c") == 1
    assert len(split) == 1 and split[0] <= SEGMENT_NODES + SEGMENT_NODES // 8 + 1


def test_a_failed_check_in_a_segment_raises_eagers_error(small_segments):
    """A bounds check failing in one segment reruns that segment eagerly (Compiled.run):
    eager's error reaches the reader."""
    w, b, x = _inputs()
    loss, new_w, new_b, extra = _step(w.to(DEVICE), b.to(DEVICE), x.to(DEVICE), 0.1)
    picked = new_b[torch.tensor([0, 7]).to(DEVICE)] * 2  # 7 is out of range
    with pytest.raises(IndexError):
        picked.cpu()


def test_segments_give_the_whole_graphs_values_bit_for_bit():
    """float64: the same values as the graph compiled whole (the same ops in the same
    order; a cut only stores a value and reads it back)."""
    w, b, x = _inputs()
    results = []
    for limit in (0, SEGMENT_NODES):
        session.reset()  # a fresh plan cache: the graph's plan is cached under its hash
        lazymlir.config.settings().segment_nodes = limit
        actual = _step(w.to(DEVICE), b.to(DEVICE), x.to(DEVICE), 0.1)
        lazymlir.mark_step()
        results.append([a.cpu() for a in actual])
        compiles = metrics.counter("UncachedCompile")
        assert compiles == 1 if limit == 0 else compiles >= 3, (limit, compiles)
    session.reset()
    assert all(torch.equal(whole, split) for whole, split in zip(*results))


def test_a_changed_segment_limit_applies_to_graphs_already_compiled(
        small_segments, launched_plans):
    """LAZYMLIR_SEGMENT_NODES changed at run time (a field of lazymlir.config.settings())
    applies to the next run of a graph already compiled, as it does to a new graph: a
    split plan is kept per limit, a plan compiled whole is kept while the limit does not
    cut its graph, and a graph the change does not concern compiles nothing again."""
    settings = lazymlir.config.settings()
    w, b, x = _inputs()
    w, b, x = w[:4], b, x[:, :4]  # shapes of their own: no graph of another test
    expected = _step(w, b, x, 0.1)

    def run() -> tuple:
        actual = _step(w.to(DEVICE), b.to(DEVICE), x.to(DEVICE), 0.1)
        lazymlir.mark_step()
        assert_same([a.cpu() for a in actual], expected)
        return launched_plans[-1], metrics.counter("UncachedCompile")

    split, compiles = run()
    assert isinstance(split, partition.Partitioned) and len(split.plans) >= 3
    settings.segment_nodes = 0  # never split: the graph compiles whole
    whole, now = run()
    assert type(whole) is executor.Compiled and now == compiles + 1
    settings.segment_nodes = SEGMENT_NODES  # the split plan again, from memory
    again, now = run()
    assert again is split and now == compiles + 1
    settings.segment_nodes = 2 * SEGMENT_NODES  # other cuts: fewer, bigger segments
    bigger, now = run()
    assert isinstance(bigger, partition.Partitioned) and len(bigger.plans) < len(split.plans)
    assert now > compiles + 1
    # A graph smaller than every limit used keeps its compile across limits.
    small = (x.to(DEVICE) * 3).sin()
    lazymlir.mark_step()
    compiled = metrics.counter("UncachedCompile")
    for limit in (0, SEGMENT_NODES, 1000):
        settings.segment_nodes = limit
        small = (x.to(DEVICE) * 3).sin()
        lazymlir.mark_step()
        assert_same(small.cpu(), (x * 3).sin())
    assert metrics.counter("UncachedCompile") == compiled
    assert_no_fallback()


def _evaluate(graph: dict, inputs: list) -> list:
    """An fx-stage graph of ATen ops on tensors, run op by op with eager PyTorch."""
    values = {("input", i, 0): x for i, x in enumerate(inputs)}

    def read(value):
        return values[tuple(value["ref"])] if isinstance(value, dict) else value
    for index, node in enumerate(graph["nodes"]):
        op = fx_graph.resolve_op(node["op"])
        values[("node", index, 0)] = op(*map(read, node["args"]))
    return [read(o) for o in graph["outputs"]]


def test_a_segment_never_runs_a_plan_split_for_another_graph(small_segments):
    """A segment's plan is its graph compiled whole, even where a graph equal to it ran
    on its own before and was split (a graph a little over the limit, or run under a
    smaller one): the big graph's plan stays compiled code only, which runs in the
    background, rather than a split plan inside a split plan."""
    settings = lazymlir.config.settings()
    big = _blocks(12)  # periodic: its two segments of 60 nodes are equal graphs
    settings.segment_nodes = 60
    segment = executor._split(session.current(), big).segments()[1]
    settings.segment_nodes = 20
    alone, _ = executor.prepare(segment)
    assert isinstance(alone, partition.Partitioned) and len(alone.plans) == 3
    settings.segment_nodes = 60
    plan, _ = executor.prepare(big)
    assert [type(p) for p in plan.plans] == [executor.Compiled] * 2
    assert executor.in_background(plan) == lazymlir.targets.active().runs_in_background
    target = lazymlir.targets.active()
    torch.manual_seed(0)
    inputs = [torch.randn(3), torch.randn(3)]
    (result,) = executor.run(plan, [target.upload(t) for t in inputs], [])
    assert_same(target.download(result, torch.empty(3, device="meta")),
                _evaluate(big, inputs)[0])
    assert_no_fallback()
