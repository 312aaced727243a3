"""A big graph's segments launched by mark_step() run as one chain of calls on the native
thread (execution/segment_chain.py), as a graph compiled whole does: never on the Python
execution thread.

The segment threshold is made tiny, so small graphs split into several segments.
"""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, assert_no_fallback, assert_same, target_name

import lazymlir
from lazymlir.execution import executor, partition, run_observers, runs
from lazymlir.execution.compiled_plan import Compiled

pytestmark = pytest.mark.skipif(target_name() != "cpu",
                                reason="the native thread is the cpu target's")

SEGMENT_NODES = 8


@pytest.fixture
def small_segments():
    settings = lazymlir.config.settings()
    saved = settings.segment_nodes, settings.async_execution
    settings.segment_nodes, settings.async_execution = SEGMENT_NODES, True
    yield
    lazymlir.wait()
    settings.segment_nodes, settings.async_execution = saved


@pytest.fixture
def launches(monkeypatch):
    """{"plans": the plans mark_step() launched, "python": runs given to the Python
    execution thread}."""
    seen = {"plans": [], "python": 0}
    launch, python_launch = executor.launch, runs.Runner.launch

    def spy_launch(plan, *args):
        seen["plans"].append(plan)
        return launch(plan, *args)

    def spy_python_launch(self, *args):
        seen["python"] += 1
        return python_launch(self, *args)

    monkeypatch.setattr(executor, "launch", spy_launch)
    monkeypatch.setattr(runs.Runner, "launch", spy_python_launch)
    return seen


def _native_calls() -> int:
    from lazymlir.targets import cpu

    return cpu.background_library().lazymlir_background_calls()


def _models():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                                torch.nn.ReLU(), torch.nn.Linear(8, 2))
    lazy = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                               torch.nn.ReLU(), torch.nn.Linear(8, 2))
    lazy.load_state_dict(eager.state_dict())
    return eager, lazy.to(DEVICE)


def _train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def test_a_split_training_step_runs_its_segments_on_the_native_thread(small_segments,
                                                                      launches):
    eager, lazy = _models()
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    lazy_opt = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(1)
    x, y = torch.randn(5, 6), torch.randn(5, 2)
    xl, yl = x.to(DEVICE), y.to(DEVICE)
    losses, before = [], None
    for step in range(6):
        expected = _train_step(eager, eager_opt, x, y)
        loss = _train_step(lazy, lazy_opt, xl, yl)
        lazymlir.mark_step()
        if step == 1:  # the step's graph (with momentum buffers) is the same from here
            lazymlir.wait()
            before = _native_calls()
        losses.append((loss, expected))
    lazymlir.wait()
    for loss, expected in losses:  # read after the last launch: computed in the chain
        assert_same(loss.cpu(), expected.detach())
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        assert_same(pl.cpu(), pe.detach())
    assert_no_fallback()
    plan = launches["plans"][-1]
    assert isinstance(plan, partition.Partitioned) and not plan.eager
    assert len(plan.plans) >= 4, len(plan.plans)
    assert launches["python"] == 0  # nothing ran on the Python execution thread
    # Steps 2..5 ran the same plan: every segment a call on the native thread.
    assert launches["plans"][2:] == [plan] * 4
    assert _native_calls() - before == 4 * len(plan.plans)


def _blocks(x, count: int):
    """`count` identical blocks of four ops: segments of two blocks are the same graph."""
    for _ in range(count):
        x = torch.neg(torch.tanh(x * 1.5 + 0.25))
    return x


def test_a_chain_may_run_one_segment_graph_at_several_places(small_segments, launches):
    """Segments that are the same graph share one plan and executable: each place in the
    chain keeps its own argument frame."""
    x = torch.randn(7, 3, dtype=torch.float64)
    xl = x.to(DEVICE)
    for _ in range(2):  # the second run reuses the frames the first one made
        out = _blocks(xl, 8)
        lazymlir.mark_step()
        assert_same(out.cpu(), _blocks(x, 8))
    plan = launches["plans"][-1]
    assert isinstance(plan, partition.Partitioned)
    assert len({id(p) for p in plan.plans}) < len(plan.plans), plan.keys
    assert launches["python"] == 0
    assert_no_fallback()


def test_a_failed_check_in_a_launched_chain_raises_eagers_error(small_segments, launches):
    """A bounds check failing in one segment of a chain: the graph runs eagerly and
    eager's error reaches the read."""
    x = torch.randn(6, 5, dtype=torch.float64)
    xl = x.to(DEVICE)
    h = torch.tanh(xl * 2 + 1).sum(0) * 3 - 1
    picked = (h[torch.tensor([0, 7]).to(DEVICE)] * 2).exp() + h.sum()  # 7 is out of range
    lazymlir.mark_step()
    with pytest.raises(IndexError):
        picked.cpu()
    plan = launches["plans"][-1]
    assert isinstance(plan, partition.Partitioned) and len(plan.plans) >= 2
    assert launches["python"] == 0


def test_an_observer_sees_the_graph_and_each_segment_with_its_inputs(small_segments,
                                                                      launches):
    seen = []

    def observer(plan, inputs, scalars):
        record = {"plan": plan, "inputs": [t.clone() for t in inputs], "outputs": None}
        seen.append(record)
        return lambda outputs: record.update(outputs=[t.clone() for t in outputs])

    x = torch.randn(7, 3, dtype=torch.float64)
    run_observers.register(observer)
    try:
        out = _blocks(x.to(DEVICE), 6)
        lazymlir.mark_step()
        assert_same(out.cpu(), _blocks(x, 6))
    finally:
        run_observers.unregister(observer)
    plan = launches["plans"][-1]
    assert [type(r["plan"]) for r in seen] == \
        [partition.Partitioned] + [Compiled] * len(plan.plans)
    assert seen[0]["plan"] is plan and seen[0]["outputs"] is not None
    assert_same(seen[0]["outputs"][0], _blocks(x, 6))
    # Each segment was seen with its inputs computed: the previous segment's outputs.
    for earlier, later in zip(seen[1:], seen[2:]):
        assert any(torch.equal(i, o) for i in later["inputs"] for o in earlier["outputs"])
    assert launches["python"] == 0
    # Unregistered: the next run is not seen.
    count = len(seen)
    out = _blocks(x.to(DEVICE), 6)
    lazymlir.mark_step()
    out.cpu()
    assert len(seen) == count
    with pytest.raises(ValueError):
        run_observers.unregister(observer)


def test_free_memory_gives_the_smallest_storage_that_fits_at_most_twice_over():
    from lazymlir.execution.segment_chain import FreeMemory

    free = FreeMemory()
    small, big = torch.zeros(100), torch.zeros(1000)  # 400 and 4000 bytes
    free.give(big)
    free.give(small)
    assert free.take((10, 20), (20, 1), torch.int64) is None  # 1600 bytes: 4000 is > 2x
    taken = free.take((5, 10), (10, 1), torch.float64)  # 400 bytes: the small one
    assert taken.data_ptr() == small.data_ptr() and taken.shape == (5, 10)
    assert taken.dtype == torch.float64 and taken.is_contiguous()
    assert free.take((5, 10), (10, 1), torch.float64) is None  # taken already
    taken = free.take((30, 20), (20, 1), torch.int32)  # 2400 bytes: the big one
    assert taken.data_ptr() == big.data_ptr()
    assert free.take((0,), (1,), torch.float32) is None and not free.sizes
