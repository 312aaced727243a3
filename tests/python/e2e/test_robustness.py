"""Bad input behaves as in eager PyTorch, and threads each trace their own programs.

Out-of-range indices and integer division by zero raise eager's error class and
message at the sync point (lowering/front/checks.py) instead of reading garbage, aborting
(SIGABRT in a compiled `cf.assert`) or killing the process (SIGFPE); the cases that
can crash run in a child process. A CPU tensor mixed into a device op raises eager's
device error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import lazymlir
from conftest import DEVICE, assert_no_fallback, assert_same, target_name

# Each case: a lambda of (T, D) building lazy tensors on device D; the eager run uses
# D="cpu". Unchecked, index/index_select read garbage, gather/embedding abort and
# remainder/floor division/fmod by a zero tensor die of SIGFPE.
BAD_CASES = {
    "index": "lambda T, D: T.arange(8.).reshape(4, 2).to(D)[T.tensor([0, 10]).to(D)]",
    "index_negative": "lambda T, D: T.arange(8.).reshape(4, 2).to(D)[T.tensor([0, -5]).to(D)]",
    "gather": "lambda T, D: T.gather(T.arange(8.).reshape(4, 2).to(D), 0, "
              "T.tensor([[0, 10]]).to(D))",
    "gather_negative": "lambda T, D: T.gather(T.arange(8.).reshape(4, 2).to(D), 1, "
                       "T.tensor([[0, -1]]).to(D))",
    "scatter": "lambda T, D: T.zeros(4, 2, device=D).scatter(0, T.tensor([[0, 10]]).to(D), 1.0)",
    "scatter_add": "lambda T, D: T.zeros(4, 2, device=D).scatter_add(0, "
                   "T.tensor([[0, 10]]).to(D), T.ones(1, 2, device=D))",
    "index_select": "lambda T, D: T.arange(8.).reshape(4, 2).to(D).index_select(0, "
                    "T.tensor([0, 10]).to(D))",
    "index_select_negative": "lambda T, D: T.arange(8.).reshape(4, 2).to(D).index_select(0, "
                             "T.tensor([-1]).to(D))",
    "embedding": "lambda T, D: T.nn.functional.embedding(T.tensor([0, 10]).to(D), "
                 "T.arange(8.).reshape(4, 2).to(D))",
    "index_put": "lambda T, D: T.arange(8.).reshape(4, 2).to(D).index_put_("
                 "(T.tensor([0, 10]).to(D),), T.tensor(1.).to(D))",
    # Recorded whole on the lazy device and decomposed after the checks
    # (lowering/front/late_decompositions.py): guarded as the index ops they become.
    "cross_entropy": "lambda T, D: T.nn.functional.cross_entropy(T.zeros(2, 3, device=D), "
                     "T.tensor([0, 10]).to(D))",
    "cross_entropy_negative": "lambda T, D: T.nn.functional.cross_entropy(T.zeros(2, 3, "
                              "device=D), T.tensor([0, -2]).to(D))",
    "cross_entropy_backward": "lambda T, D: (lambda x: (T.nn.functional.cross_entropy(x, "
                              "T.tensor([0, 10]).to(D)).backward(), x.grad)[1])(T.zeros(2, 3, "
                              "device=D, requires_grad=True))",
    "embedding_backward": "lambda T, D: (lambda w: (T.nn.functional.embedding(T.tensor([0, 10])"
                          ".to(D), w).sum().backward(), w.grad)[1])(T.ones(4, 2, device=D, "
                          "requires_grad=True))",
    "remainder_scalar": "lambda T, D: T.tensor([1, 2]).to(D) % 0",
    "remainder_tensor": "lambda T, D: T.tensor([1, 2]).to(D) % T.tensor([0, 1]).to(D)",
    "floor_divide_scalar": "lambda T, D: T.tensor([1, 2]).to(D) // 0",
    "floor_divide_tensor": "lambda T, D: T.tensor([1, 2]).to(D) // T.tensor([0, 1]).to(D)",
    "trunc_divide": "lambda T, D: T.div(T.tensor([1, 2]).to(D), T.tensor([0, 1]).to(D), "
                    "rounding_mode='trunc')",
    "fmod_tensor": "lambda T, D: T.fmod(T.tensor([5, 2], dtype=T.int32).to(D), "
                   "T.tensor([1, 0], dtype=T.int32).to(D))",
    "int8_remainder": "lambda T, D: T.tensor([5, 2], dtype=T.int8).to(D) % "
                      "T.tensor([0, 1], dtype=T.int8).to(D)",
}

CHILD = textwrap.dedent("""
    import json, sys, torch, lazymlir
    cases = json.loads(sys.argv[1])
    def outcome(fn, device):
        try:
            result = fn(torch, device)
            return ["ok", result.cpu().tolist()]
        except Exception as error:
            return [type(error).__name__, str(error).splitlines()[0]]
    for name, source in cases.items():
        fn = eval(source)
        print(json.dumps([name, outcome(fn, "cpu"), outcome(fn, "lazy_mlir"),
                          lazymlir.metrics.fallback_ops()]), flush=True)
""")


def _run_child(cases: dict, **env) -> list:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    full_env.update(LAZYMLIR_TARGET="cpu", **env)
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cases)], env=full_env,
                          capture_output=True, text=True, timeout=600)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    finished = {row[0] for row in rows}
    crashed = [name for name in cases if name not in finished]
    assert done.returncode == 0 and not crashed, \
        f"rc={done.returncode}, died at {crashed[:1]}: {done.stderr[-2000:]}"
    return rows


def test_out_of_range_indices_and_zero_divisors_raise_eagers_error():
    rows = _run_child(BAD_CASES)
    for name, eager, lazy, fallbacks in rows:
        assert eager[0] != "ok", (name, eager)  # the case is an error in eager
        assert lazy == eager, name
        assert fallbacks == {}, (name, fallbacks)


# Valid indices, including negative ones where eager accepts them, still compile
# (no fallback) and give eager's values.
@pytest.mark.parametrize("fn", [
    lambda x, i: x[i],
    lambda x, i: x[-i - 1],
    lambda x, i: torch.gather(x, 0, i.reshape(2, 1).expand(2, 3)),
    lambda x, i: x.index_select(1, i),
    lambda x, i: torch.nn.functional.embedding(i, x),
    lambda x, i: x.clone().index_put_((i,), torch.ones(3), accumulate=True),
    lambda x, i: torch.zeros(4, 3, device=x.device).scatter_add(0, i.reshape(2, 1).expand(2, 3),
                                                                x[:2]),
    lambda x, i: (x[:, :2] * 10).long() % (i + 1),
    lambda x, i: (x[:, :2] * 10).long() // (i - 5),
    lambda x, i: torch.nn.functional.cross_entropy(x[:2], i),
    lambda x, i: torch.nn.functional.cross_entropy(x[:2], torch.where(i == 0, -100, i)),
    lambda x, i: torch.nn.functional.cross_entropy(x[:2], i, ignore_index=2),
], ids=["index", "negative_index", "gather", "index_select", "embedding", "index_put",
        "scatter_add", "remainder", "floor_divide", "cross_entropy", "ignored_target",
        "ignored_in_range_target"])
def test_valid_indices_and_divisors_compile_and_match_eager(fn):
    x, i = torch.randn(4, 3), torch.tensor([2, 0])
    assert_same(fn(x.to(DEVICE), i.to(DEVICE)).cpu(), fn(x, i))
    assert_no_fallback()


def test_failed_check_marks_the_values_and_later_work_runs():
    x = torch.arange(8.).reshape(4, 2).to(DEVICE)
    bad = x[torch.tensor([0, 10]).to(DEVICE)] * 2
    with pytest.raises(IndexError, match="index 10 is out of bounds"):
        bad.cpu()
    with pytest.raises(IndexError, match="index 10 is out of bounds"):
        bad.cpu()  # the value stays failed, with the same error
    lazymlir.mark_step()
    good = x[torch.tensor([3, -1]).to(DEVICE)]
    assert good.cpu().tolist() == [[6.0, 7.0], [6.0, 7.0]]


def test_failed_asserts_in_compiled_code_raise_eagers_error_without_checks():
    """With the fx-level checks off, torch-mlir's own bounds asserts in gather and
    embedding are what fails: they set the library's flag (lowering/cpu/asserts.py) and
    the graph reruns eagerly, where they aborted the process before."""
    cases = {name: BAD_CASES[name] for name in ("gather", "gather_negative", "embedding")}
    rows = _run_child(cases, LAZYMLIR_BOUNDS_CHECKS="0")
    for name, eager, lazy, fallbacks in rows:
        assert eager[0] != "ok", (name, eager)
        assert lazy == eager, name
        assert fallbacks == {}, (name, fallbacks)


@pytest.mark.skipif(target_name() != "cpu",
                    reason="patches the cpu target's executable (in-place outputs)")
def test_a_failed_check_reruns_an_in_place_graph_on_its_inputs_as_they_were(monkeypatch):
    """torch.compile's in-place input updates are written by the compiled code before
    its checks are read: the eager rerun after a failed one must start from the
    inputs' old values (here the check's failure is simulated after a real run)."""
    from lazymlir.execution import executor
    from lazymlir.targets import CompiledCheckFailed

    def update(buf, x):
        buf.add_(1)
        return x * 2

    buf, x = torch.zeros(3), torch.arange(3.)
    compiled = torch.compile(update, backend="lazymlir", dynamic=False)
    compiled(buf, x)  # compiles; buf is now 1
    failed = []
    real_run = executor.Compiled.run

    def run(self, target, inputs, scalars):
        if self.executable.in_place and not failed:
            real = self.executable.run

            def run_then_fail(*args):
                real(*args)  # writes buf + 1 into buf
                failed.append(True)
                raise CompiledCheckFailed("simulated")
            monkeypatch.setattr(self.executable, "checks_at_run_time", True, raising=False)
            monkeypatch.setattr(self.executable, "run", run_then_fail, raising=False)
        return real_run(self, target, inputs, scalars)

    monkeypatch.setattr(executor.Compiled, "run", run)
    out = compiled(buf, x)
    assert failed, "the in-place graph did not run"
    assert buf.tolist() == [2.0, 2.0, 2.0]  # eager's: 1 + 1, not 1 + 1 + 1
    assert out.tolist() == [0.0, 2.0, 4.0]


def test_checks_can_be_turned_off():
    from lazymlir import config

    x, i = torch.randn(4, 3), torch.tensor([3, 1])
    saved = config.settings().bounds_checks
    try:
        config.settings().bounds_checks = False
        assert_same(x.to(DEVICE)[i.to(DEVICE)].cpu(), x[i])
    finally:
        config.settings().bounds_checks = saved


# ---------------------------------------------------------------- device rules

def test_mixing_a_cpu_tensor_raises_the_same_device_error():
    x = torch.ones(3, 4).to(DEVICE)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x + torch.ones(3, 4)  # not a silent upload of the CPU tensor
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.matmul(x, torch.ones(4, 2))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x.index_select(0, torch.tensor([0, 2]))  # as eager CUDA: index_select takes no CPU index


def test_zero_dim_cpu_tensors_and_cpu_indices_mix_as_in_eager_cuda():
    base = torch.arange(12.).reshape(3, 4)
    x = base.to(DEVICE)
    assert_same((x * torch.tensor(2.)).cpu(), base * 2)
    assert_same(x[torch.tensor([2, 0])].cpu(), base[torch.tensor([2, 0])])
    y, expected = x.clone(), base.clone()
    y[torch.tensor([1])] = 5.0
    expected[torch.tensor([1])] = 5.0
    assert_same(y.cpu(), expected)
    assert_no_fallback()


def test_bool_plus_true_is_logical_or():
    b = torch.tensor([True, False])
    # gave [False, True]: i1 addition wrapped
    assert_same((b.to(DEVICE) + True).cpu(), b + True)
    assert_same((b.to(DEVICE) + b.to(DEVICE)).cpu(), b + b)
    assert_no_fallback()


def test_save_and_load_with_map_location(tmp_path):
    x = torch.randn(3, 4)
    path = tmp_path / "t.pt"
    torch.save({"w": x.to(DEVICE) * 2, "plain": [x]}, path)  # "invalid python storage" before
    loaded = torch.load(path, map_location=DEVICE)
    assert loaded["w"].device.type == DEVICE and loaded["plain"][0].device.type == DEVICE
    assert_same(loaded["w"].cpu(), x * 2)
    assert_same(torch.load(path, map_location="cpu")["plain"][0], x)
    model = torch.nn.Linear(4, 2)
    torch.save(model.to(DEVICE).state_dict(), path)
    state = torch.load(path, map_location=DEVICE)
    assert_same(state["weight"].cpu(), model.weight.detach().cpu())


DEEPCOPY_CHILD = textwrap.dedent("""
    import copy, torch, lazymlir

    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6),
                                    torch.nn.Linear(6, 2)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(5, 4)
        model(x.to(device)).square().mean().backward()
        opt.step()  # no sync: parameters, grads and BatchNorm buffers are pending
        plain = model[1].running_mean * 1
        ema = copy.deepcopy(model)  # an EMA model / a best-checkpoint copy
        copied = copy.deepcopy({"t": plain, "again": plain})
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.5)  # the copies must not see this
        assert copied["t"] is copied["again"]  # the memo: one copy of one tensor
        return [t.detach().cpu() for t in [*ema.state_dict().values(), copied["t"],
                                           *model.state_dict().values()]]

    got, want = run("lazy_mlir"), run("cpu")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    # Device memory that does not exist: an error, not a null allocator (SIGSEGV).
    for make in (lambda: torch.arange(3.0).to("lazy_mlir").untyped_storage().clone(),
                 lambda: torch.UntypedStorage(8, device="lazy_mlir")):
        try:
            make()
            raise AssertionError("no error")
        except RuntimeError as error:
            assert "no device memory" in str(error) and ".cpu()" in str(error), error
    print("OK")
""")


def test_deepcopy_of_a_model_with_pending_buffers():
    # A lazy tensor's deepcopy took PyTorch's storage path and cloned a null data pointer:
    # the process died with SIGSEGV (and so did any storage made on the device). In a
    # subprocess, so a crash is a failure, not an abort.
    done = subprocess.run([sys.executable, "-c", DEEPCOPY_CHILD], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), \
        (done.returncode, done.stdout[-2000:], done.stderr[-3000:])


def test_a_tensor_built_from_lazy_scalars():
    # torch.tensor([...]) reads each 0-d tensor with the Functionalize key excluded:
    # "Could not run 'aten::_local_scalar_dense' ... 'lazy_mlir' backend" before.
    def build(t, i):
        t = t * 2
        t.add_(1)  # an in-place update the read must see
        return torch.tensor([t[0], t[2], i[1]]), torch.tensor([[t[1]], [i[0]]])

    t, i = torch.arange(3.0), torch.tensor([4, 5])
    want = build(t, i)
    got = build(t.to(DEVICE), i.to(DEVICE))
    assert_same(list(got), list(want))
    assert_no_fallback()


@pytest.mark.parametrize("make, what", [
    (lambda: torch.eye(3).to_sparse(), "sparse_coo"),
    (lambda: torch.ones(3, dtype=torch.float8_e4m3fn), "float8_e4m3fn"),
    (lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8), "qint8"),
])
def test_unsupported_layouts_and_dtypes_are_refused_by_name(make, what):
    with pytest.raises(TypeError, match=f"lazy_mlir does not support .*{what}"):
        make().to(DEVICE)


def test_float8_conversion_on_the_device_is_refused():
    with pytest.raises(TypeError, match=r"float8_e5m2 \(aten._to_copy"):
        torch.ones(3, device=DEVICE).to(torch.float8_e5m2)


# ---------------------------------------------------------------- threads

THREADS_CHILD = textwrap.dedent("""
    import sys, threading, traceback, torch, lazymlir
    D = "lazy_mlir"
    seeding = threading.Lock()  # the global generator is shared by the threads

    def train(device, seed, steps=4):
        with seeding:
            torch.manual_seed(seed)
            model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.LayerNorm(16),
                                        torch.nn.GELU(), torch.nn.Linear(16, 3))
            x, y = torch.randn(10, 6), torch.randint(0, 3, (10,))
        model = model.to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for step in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            if device == D and step % 2:
                lazymlir.mark_step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in model.parameters()]

    expected = {i: train("cpu", i) for i in range(2)}
    got, errors = {}, []
    def work(i):
        try:
            got[i] = train(D, i)
        except Exception:
            errors.append(traceback.format_exc())
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads: t.start()
    for t in threads: t.join()
    for e in errors: print("ERROR", e)
    for i in range(2):
        losses, params = got[i]
        same = all(abs(a - b) < 1e-4 for a, b in zip(losses, expected[i][0])) and all(
            torch.allclose(a, b, atol=1e-4) for a, b in zip(params, expected[i][1]))
        print("THREAD", i, "OK" if same else f"MISMATCH {losses} {expected[i][0]}")
""")


def test_two_threads_training_their_own_models_match_eager():
    """Each thread traces and syncs its own tensors (trace state is per thread; graph
    building, the caches and execution are under the session lock); a race there shows
    as one thread failing, e.g. with an IndexError in lowering/front/fx_graph.py."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    env.update(LAZYMLIR_TARGET="cpu")
    done = subprocess.run([sys.executable, "-c", THREADS_CHILD], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["THREAD 0 OK", "THREAD 1 OK"], \
        done.stdout + done.stderr[-2000:]


def test_instrument_clamps_indices_guards_divisors_and_adds_one_flag():
    from lazymlir.lowering.front import checks, fx_graph

    ref = lambda kind, i: {"ref": [kind, i, 0]}  # noqa: E731
    graph = {"format": fx_graph.FORMAT, "version": fx_graph.VERSION, "scalars": [],
             "inputs": [{"shape": [4, 2], "dtype": "float32"}, {"shape": [3], "dtype": "int64"}],
             "nodes": [{"op": "aten.index.Tensor", "args": [ref("input", 0), [ref("input", 1)]],
                        "kwargs": {}, "outputs": [{"shape": [3, 2], "dtype": "float32"}]},
                       {"op": "aten.remainder.Tensor", "args": [ref("input", 1), ref("input", 1)],
                        "kwargs": {}, "outputs": [{"shape": [3], "dtype": "int64"}]}],
             "outputs": [ref("node", 0), ref("node", 1)]}
    done = checks.instrument(graph)
    ops = [n["op"] for n in done.graph["nodes"]]
    # (the flag or-ed where each check is: it holds the verdict of the checks so far)
    assert ops == ["aten.clamp.default", "aten.ne.Tensor", "aten.any.default", "aten.index.Tensor",
                   "aten.eq.Scalar", "aten.any.default", "aten.logical_or.default",
                   "aten.add.Tensor", "aten.remainder.Tensor"]
    assert done.graph["nodes"][0]["args"][1:] == [-4, 3]  # x[i] takes -4..3
    assert done.graph["nodes"][3]["args"][1] == [ref("node", 0)]  # reads the clamped index
    assert done.graph["outputs"] == [ref("node", 3), ref("node", 8), ref("node", 6)]
    assert fx_graph.output_metas(done.graph)[-1] == ([], torch.bool)
    assert done.checks == 2 and not done.static_error
    plain = {**graph, "nodes": graph["nodes"][:0], "outputs": [ref("input", 0)]}
    assert checks.instrument(plain).graph is plain


def test_instrument_guards_late_index_ops_and_keeps_a_static_error():
    """nll_loss's target (a target equal to ignore_index kept as it is) and
    embedding_dense_backward's indices are guarded like the index ops they become at the
    torch stage (lowering/front/late_decompositions.py); a constant zero divisor stays a
    static error whatever flags come after it."""
    from lazymlir.lowering.front import checks, fx_graph

    ref = lambda kind, i: {"ref": [kind, i, 0]}  # noqa: E731
    graph = {"format": fx_graph.FORMAT, "version": fx_graph.VERSION, "scalars": [],
             "inputs": [{"shape": [4, 3], "dtype": "float32"}, {"shape": [4], "dtype": "int64"},
                        {"shape": [4, 2], "dtype": "float32"}],
             "nodes": [{"op": "aten.remainder.Scalar", "args": [ref("input", 1), 0],
                        "kwargs": {}, "outputs": [{"shape": [4], "dtype": "int64"}]},
                       {"op": "aten.nll_loss_forward.default",
                        "args": [ref("input", 0), ref("input", 1), None, 1, -100], "kwargs": {},
                        "outputs": [{"shape": [], "dtype": "float32"},
                                    {"shape": [], "dtype": "float32"}]},
                       {"op": "aten.embedding_dense_backward.default",
                        "args": [ref("input", 2), ref("input", 1), 10, -1, False], "kwargs": {},
                        "outputs": [{"shape": [10, 2], "dtype": "float32"}]}],
             "outputs": [ref("node", 0), ref("node", 1), ref("node", 2)]}
    done = checks.instrument(graph)
    ops = [n["op"] for n in done.graph["nodes"]]
    assert ops == ["aten.remainder.Scalar",
                   "aten.clamp.default", "aten.eq.Scalar", "aten.where.self", "aten.ne.Tensor",
                   "aten.any.default", "aten.nll_loss_forward.default",
                   "aten.clamp.default", "aten.ne.Tensor", "aten.any.default",
                   "aten.logical_or.default", "aten.embedding_dense_backward.default"]
    nodes = done.graph["nodes"]
    assert nodes[1]["args"][1:] == [0, 2] and nodes[2]["args"][1] == -100  # 3 classes
    assert nodes[6]["args"][1] == ref("node", 3)  # the loss reads the guarded target
    assert nodes[7]["args"][1:] == [0, 9] and nodes[11]["args"][1] == ref("node", 7)
    assert done.graph["outputs"][-1] == ref("node", 10)
    assert done.checks == 2 and done.static_error
