"""Buffer donation on the lazy device (tracing/donation.py): a graph writes an input's
new value into the input's buffer only where nothing else can read the old value.

Training loops match eager (and the same loop without donation, bit for bit) while their
parameters and optimizer state keep their buffers from step to step; every way to keep
reading an old value (a tensor sharing it, a DLPack export, a pending read outside the
graph, a second parameter on the same storage, an output read from the old value)
still reads it, with eager's values.
"""

from __future__ import annotations

import lazymlir
from lazymlir.tracing import donation, values
import pytest
import torch
from cases.optimizers import OPTIMIZERS
from conftest import DEVICE, assert_no_fallback, assert_same, target_name

pytestmark = pytest.mark.skipif(target_name() != "cpu", reason="donation is the cpu target's")


@pytest.fixture(params=[True, False], ids=["async", "sync"])
def donating(request):
    """Donation on, graphs run in the background (mark_step returns at once) or not."""
    settings = lazymlir.config.settings()
    before = settings.donate, settings.async_execution
    settings.donate, settings.async_execution = True, request.param
    yield
    lazymlir.wait()
    settings.donate, settings.async_execution = before


def _donated() -> int:
    return lazymlir.metrics.counter("DonatedInputs")


def _buffer(tensor: torch.Tensor):
    """The buffer of a lazy tensor's value (after its graph has run)."""
    lazymlir.wait()
    return values.value_of(values.inner(tensor)).data


def _models():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    lazy = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    lazy.load_state_dict(eager.state_dict())
    return eager, lazy.to(DEVICE)


def _step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def _train(optimizer: str, steps: int, donate: bool):
    """(eager parameters, lazy parameters on the CPU, lazy losses, the lazy parameters'
    buffer addresses per step)."""
    settings = lazymlir.config.settings()
    before, settings.donate = settings.donate, donate
    try:
        eager, lazy = _models()
        eager_opt, lazy_opt = OPTIMIZERS[optimizer](eager.parameters()), \
            OPTIMIZERS[optimizer](lazy.parameters())
        torch.manual_seed(1)
        x, y = torch.randn(5, 6), torch.randn(5, 3)
        losses, addresses = [], []
        for _ in range(steps):
            expected = _step(eager, eager_opt, x, y)
            loss = _step(lazy, lazy_opt, x.to(DEVICE), y.to(DEVICE))
            lazymlir.mark_step()
            assert_same(loss.cpu(), expected.detach(), "loss")
            losses.append(loss.cpu())
            addresses.append([_buffer(p).data_ptr() for p in lazy.parameters()])
        return list(eager.parameters()), [p.cpu() for p in lazy.parameters()], losses, \
            addresses
    finally:
        settings.donate = before


@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adamw"])
def test_training_matches_eager_and_updates_in_place(donating, optimizer):
    eager, lazy, losses, addresses = _train(optimizer, 5, donate=True)
    donated = _donated()
    for i, (actual, expected) in enumerate(zip(lazy, eager)):
        assert_same(actual, expected.detach(), f"parameter {i}")
    assert_no_fallback()
    # Parameters and their momentum (SGD) or two moments (AdamW) each step from the
    # second on (the first step's optimizer state is made by the step itself).
    state = {"sgd_momentum": 1, "adamw": 2}[optimizer]
    assert donated >= 4 + 4 * (1 + state) * 3, donated
    # The parameters stay in their buffers from the second step on (the first writes
    # the uploaded weights' copy-on-write buffers: they get their own memory then).
    assert addresses[1] == addresses[2] == addresses[3] == addresses[4]
    # The same loop without donation gives the same bits.
    _, without, plain_losses, plain_addresses = _train(optimizer, 5, donate=False)
    assert _donated() == donated
    assert all(torch.equal(a, b) for a, b in zip(lazy, without))
    assert all(torch.equal(a, b) for a, b in zip(losses, plain_losses))
    assert plain_addresses[3] != plain_addresses[4]  # (without, every step writes anew)


def test_donate_0_turns_it_off():
    settings = lazymlir.config.settings()
    assert settings.donate  # the default
    _train("sgd_momentum", 3, donate=False)
    assert _donated() == 0


def _weight_and_update():
    """A lazy tensor and an in-place update of it whose graph could take its buffer."""
    torch.manual_seed(0)
    w = torch.randn(4, 5)
    lazy = w.to(DEVICE)
    lazy.mul_(2)
    lazymlir.mark_step()
    lazymlir.wait()  # its value now has a buffer of its own (not the upload's)
    return w * 2, lazy


def test_a_lone_update_is_donated(donating):
    # The control for the cases below: the same update with nothing else reading.
    expected, w = _weight_and_update()
    before, start = _buffer(w).data_ptr(), _donated()
    w.add_(1)
    lazymlir.mark_step()
    assert _donated() == start + 1
    assert _buffer(w).data_ptr() == before
    assert_same(w.cpu(), expected + 1)


def test_a_tensor_sharing_the_old_value_keeps_it(donating):
    # clone() and detach() of a lazy tensor share its value (values.py): the clone must
    # still read the old values after the update's graph ran.
    expected, w = _weight_and_update()
    old, start = w.clone(), _donated()
    w.add_(1)
    lazymlir.mark_step()
    assert _donated() == start
    assert_same(old.cpu(), expected)
    assert_same(w.cpu(), expected + 1)


def test_a_detached_alias_follows_the_update(donating):
    # detach() of a lazy tensor is a view: eager's alias sees the update, and here too.
    expected, w = _weight_and_update()
    alias = w.detach()
    row = w[1]
    w.add_(1)
    lazymlir.mark_step()
    assert_same(alias.cpu(), expected + 1)
    assert_same(row.cpu(), expected[1] + 1)
    assert_same(w.cpu(), expected + 1)


def test_a_read_after_mark_step_of_a_value_computed_from_the_old_one(donating):
    # The old value read by another output of the same graph: the compiled code must read
    # it before writing the update into its buffer (donated: bufferization orders or
    # copies), and by a pending value outside the graph (not donated).
    expected, w = _weight_and_update()
    doubled = w * 2  # an output of the update's graph, from the old value
    w.add_(1)
    lazymlir.mark_step()
    assert_same(doubled.cpu(), expected * 2)
    assert_same(w.cpu(), expected + 1)

    later = w * 3  # pending: not part of the read below
    w.add_(1)
    assert_same(w.cpu(), expected + 2)  # a read computing only w
    assert_same(later.cpu(), (expected + 1) * 3)


def test_two_parameters_on_one_storage(donating):
    # Two parameters over the same memory: eager's updates of each land in both. (Per
    # parameter: the foreach route gives other values for aliased parameters, with or
    # without donation, on main at 07e270d.)
    def make(device):
        torch.manual_seed(0)
        base = torch.randn(3, 4).to(device)
        first = torch.nn.Parameter(base)
        second = torch.nn.Parameter(first.detach())
        return first, second

    results = []
    for device in ("cpu", DEVICE):
        first, second = make(device)
        opt = torch.optim.SGD([first, second], lr=0.1, momentum=0.9, foreach=False)
        x = torch.arange(12.0).reshape(3, 4).to(device)
        for _ in range(3):
            opt.zero_grad()
            ((first * x).sum() + (second * x * x).sum()).backward()
            opt.step()
            if device == DEVICE:
                lazymlir.mark_step()
        results.append([first.detach().cpu(), second.detach().cpu()])
    assert_same(results[1], results[0])
    assert_no_fallback()


def test_a_dlpack_export_keeps_its_memory(donating):
    expected, w = _weight_and_update()
    exported, start = torch.from_dlpack(lazymlir.to_dlpack(w)), _donated()
    w.add_(1)
    lazymlir.mark_step()
    assert _donated() == start
    assert_same(w.cpu(), expected + 1)
    assert_same(exported, expected)  # an export is for reading (lazymlir/dlpack.py)


def test_an_imported_buffer_is_never_written():
    # A value over a DLPack import uses the producer's memory in place (cpu target): a
    # graph must never write it.
    source = torch.arange(6.0)
    w = lazymlir.from_dlpack(source)
    w.add_(1)
    lazymlir.mark_step()
    assert_same(w.cpu(), torch.arange(6.0) + 1)
    assert_same(source, torch.arange(6.0))
    assert _donated() == 0


def test_a_host_copy_keeps_the_old_values(donating):
    # .cpu() shares the buffer copy-on-write: the graph's write gives the buffer its own
    # memory first.
    expected, w = _weight_and_update()
    host = w.cpu()
    w.add_(1)
    lazymlir.mark_step()
    assert_same(w.cpu(), expected + 1)
    assert_same(host, expected)


def test_a_retired_value_raises_if_read():
    # The safety net: a value whose buffer was taken raises rather than reading the
    # new value (nothing reaches one: this reads it through the value itself).
    expected, w = _weight_and_update()
    old, start = values.value_of(values.inner(w)), _donated()
    w.add_(1)
    old_ref = [old]  # a reference the rules see: not donated
    del old
    lazymlir.mark_step()
    lazymlir.wait()
    assert old_ref[0].error is None and _donated() == start
    donation.retire(old_ref)
    with pytest.raises(donation.DonatedError):
        old_ref[0].check()


def test_segmented_and_checked_graphs_stay_right(donating):
    # A big graph's segments and a graph with check flags write no input in place (their
    # plans return new buffers): the pairs the graph declares change nothing there.
    settings = lazymlir.config.settings()
    before, settings.segment_nodes = settings.segment_nodes, 12
    try:
        eager, lazy, _, _ = _train("adamw", 3, donate=True)
    finally:
        settings.segment_nodes = before
    for i, (actual, expected) in enumerate(zip(lazy, eager)):
        assert_same(actual, expected.detach(), f"parameter {i}")

    torch.manual_seed(0)
    table = torch.randn(10, 4)
    lazy_table = table.to(DEVICE)
    index = torch.tensor([1, 3, 3, 7])
    for _ in range(3):  # an embedding's gather: a checked graph
        update = torch.nn.functional.embedding(index, table).sum(0)
        table = table + update
        lazy_table = lazy_table + torch.nn.functional.embedding(index.to(DEVICE),
                                                                lazy_table).sum(0)
        lazymlir.mark_step()
    assert_same(lazy_table.cpu(), table)
    assert_no_fallback()


def test_a_failed_run_time_check_raises_eagers_error(donating):
    # Without bounds checks the cpu code's own gather asserts catch a bad index and the
    # graph reruns eagerly, on copies of the inputs it updates in place (compiled_plan.py).
    settings = lazymlir.config.settings()
    before, settings.bounds_checks = settings.bounds_checks, False
    try:
        torch.manual_seed(0)
        table = torch.randn(10, 4)
        lazy = table.to(DEVICE)
        for index in ([1, 3], [2, 2]):
            table = table + torch.nn.functional.embedding(torch.tensor(index), table)[0]
            lazy.add_(torch.nn.functional.embedding(torch.tensor(index).to(DEVICE), lazy)[0])
            lazymlir.mark_step()
        assert_same(lazy.cpu(), table)
        start = _donated()
        lazy.add_(torch.nn.functional.embedding(torch.tensor([1, 12]).to(DEVICE), lazy)[0])
        with pytest.raises(IndexError):  # at mark_step() without background runs
            lazymlir.mark_step()
            lazy.cpu()
        assert _donated() == start + 1
    finally:
        settings.bounds_checks = before


def test_repeated_outputs_next_to_updates_in_place(donating):
    # clip_grad_norm_ makes a step's graph return one value twice (MLIR merges equal
    # views): with in-place updates in the same graph, the cpu pipeline's
    # eliminate-empty-tensors crashed on the copy that gives each result its own buffer
    # (lowering/bufferize/unique_results.py).
    eager, lazy = _models()
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    lazy_opt = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(1)
    x, y = torch.randn(5, 6), torch.randn(5, 3)
    for model, opt, a, b in ((eager, eager_opt, x, y), (lazy, lazy_opt, x.to(DEVICE),
                                                        y.to(DEVICE))):
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(a), b).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            if model is lazy:
                lazymlir.mark_step()
    for i, (actual, expected) in enumerate(zip(lazy.parameters(), eager.parameters())):
        assert_same(actual.cpu(), expected.detach(), f"parameter {i}")
    assert _donated() > 0
    assert lazymlir.metrics.counter("CompileRetry") == 0
    assert_no_fallback()


def test_a_read_of_part_of_the_trace_donates_nothing(donating):
    # A read computes only what it asks for: the nodes of its graph that other pending
    # values still need stay in the trace, with their references to the graph's inputs.
    expected, w = _weight_and_update()
    shared = w * 3  # reads w's value; needed by both values below
    del w  # nothing but `shared`'s node holds the value now
    first, second = shared + 1, shared * 2
    start = _donated()
    assert_same(first.cpu(), expected * 3 + 1)
    assert_same(second.cpu(), expected * 6)
    assert _donated() == start
