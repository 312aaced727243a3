"""Run PyTorch's OpInfo database on lazy_mlir against eager CPU and classify each entry.

An entry is (op name, variant test name, dtype). Each is run on its first
SAMPLES_PER_DTYPE sample inputs and classified as

    lowered   every sample matches eager and no op ran with eager fallback
    fallback  every sample matches eager, but some op ran eagerly (lazymlir.metrics)
    wrong     a value, dtype or shape differs from eager
    error     lazy_mlir raises where eager does not (or a different exception type)
    crash     the process running it died (or hung past TASK_TIMEOUT_S)

The sweep runs in worker subprocesses (this file with --worker), so a crash is
recorded, not fatal. A worker runs all dtypes of one op as one graph (one
mark_step, one compile); only an op whose dtypes do not all lower is rerun
dtype by dtype to attribute fallbacks and errors. A worker that dies is
restarted; its op is retried dtype by dtype, and the dtype it dies on again is
marked crash.

    python tests/python/cases/opinfo_sweep.py            # sweep, print counts and differences
    python tests/python/cases/opinfo_sweep.py --write    # also regenerate opinfo_expectations.py
                                                   # and docs/opinfo-coverage.md
    python tests/python/cases/opinfo_sweep.py --ops add,mul --dtypes float32   # a subset, verbose

test_opinfo.py runs the sweep and compares it with opinfo_expectations.py.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
EXPECTATIONS = HERE / "opinfo_expectations.py"
DOC = ROOT / "docs" / "opinfo-coverage.md"

DTYPES = ("float32", "int64", "bool", "float16", "bfloat16")
SAMPLES_PER_DTYPE = 3
TASK_TIMEOUT_S = 240          # one op, all dtypes; a hang past this counts as a crash
STATUSES = ("lowered", "fallback", "wrong", "error", "crash")
MARKS = {"lowered": "✓", "fallback": "F", "wrong": "W", "error": "E", "crash": "C"}

# Ops whose result is not a function of their inputs: random sampling, and
# uninitialized memory. They are not part of the sweep (eager CPU is no reference).
NONDETERMINISTIC = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial",
    "normal", "normal.in_place", "normal.number_mean", "uniform", "rand_like", "randint_like",
    "randn_like", "randint", "randn", "rand", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
    "nn.functional.rrelu", "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d", "nn.functional.gumbel_softmax",
    "torch._refs.nn.functional.dropout", "nn.functional.multi_head_attention_forward",
    "new_empty", "new_empty_strided", "empty", "empty_like", "empty_strided", "empty_permuted",
    "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.empty_permuted",
    "nn.functional.scaled_dot_product_attention",   # dropout_p samples
}


def entry_key(name: str, variant: str, dtype: str) -> str:
    return f"{name}{'/' + variant if variant else ''}:{dtype}"


# ----------------------------------------------------------------------------- worker side


def _ops():
    from torch.testing._internal.common_methods_invocations import op_db
    _fast_test_fn_lookup()
    return {(op.name, op.variant_test_name): op for op in op_db}


def _fast_test_fn_lookup() -> None:
    """`op.sample_inputs` looks for the running unittest test (to tag samples for
    debugging) with `inspect.stack()`, which reads the source of every frame: 0.1-0.2 s
    per call, a third of a worker's time on ops that lower. The same search over
    frames without reading source gives the same answer (None here: no TestCase runs)."""
    import unittest

    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    def extract_test_fn():
        try:
            frame = sys._getframe(1)
            while frame is not None:
                self_val = frame.f_locals.get("self")
                if isinstance(self_val, unittest.TestCase):
                    *_, cls_name, test_name = self_val.id().rsplit(".", 2)
                    if cls_name == type(self_val).__name__ and test_name.startswith("test"):
                        return getattr(self_val, test_name).__func__
                frame = frame.f_back
        except Exception:  # noqa: BLE001 - as the original: no test found
            pass
        return None

    for module in (common_utils, core):
        if hasattr(module, "extract_test_fn"):
            module.extract_test_fn = extract_test_fn


def op_dtypes(op) -> list[str]:
    import torch
    supported = op.supported_dtypes("cpu")
    return [d for d in DTYPES if getattr(torch, d) in supported]


def _map(x, fn):
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return fn(x)


def _to_lazy(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x.to("lazy_mlir")
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device("lazy_mlir")
    return x


def _lazy_kwargs(kwargs):
    out = _map(kwargs, _to_lazy)
    if out.get("device") == "cpu":
        out["device"] = "lazy_mlir"
    return out


def _samples(op, dtype: str):
    import torch
    torch.manual_seed(0)
    samples = []
    for s in op.sample_inputs("cpu", getattr(torch, dtype), requires_grad=False):
        samples.append(s)
        if len(samples) == SAMPLES_PER_DTYPE:
            break
    return samples


# Ops whose result depends on the input's storage, not only its elements: their input
# goes to the device with its whole storage, viewed as on the CPU (as a sample made on
# the device would be; `.to` would copy only the view's elements).
STORAGE_OPS = {"as_strided"}
# Ops whose tensor arguments after the input must be host tensors (eager on any device
# requires the indices of tensor_split on the CPU): they stay there.
HOST_ARGUMENT_OPS = {"tensor_split"}


def _storage_view_to_lazy(x):
    import torch
    if not isinstance(x, torch.Tensor) or x._base is None:
        return _to_lazy(x)
    storage = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage())
    return storage.to("lazy_mlir").as_strided(x.shape, x.stride(), x.storage_offset())


def _call(op, s, lazy: bool):
    import torch
    inp, args, kwargs = s.input, s.args, s.kwargs
    if lazy:
        inp = (_storage_view_to_lazy if op.name in STORAGE_OPS else _to_lazy)(inp)
        if op.name not in HOST_ARGUMENT_OPS:
            args = _map(args, _to_lazy)
        kwargs = _lazy_kwargs(kwargs)
    torch.manual_seed(0)
    return op(inp, *args, **kwargs)


def _fresh(x):
    import torch
    if isinstance(x, torch.Tensor) and x.device.type == "lazy_mlir":
        return x.clone()
    return x


def _tolerance(dtype) -> dict:
    import torch
    if dtype in (torch.float16,):
        return {"rtol": 1e-3, "atol": 1e-3}
    if dtype == torch.bfloat16:
        return {"rtol": 1.6e-2, "atol": 1e-2}
    if dtype.is_floating_point or dtype.is_complex:
        return {"rtol": 1e-5, "atol": 1e-5}
    return {"rtol": 0, "atol": 0}


def _to_host(x):
    import torch
    return _map(x, lambda v: v.cpu() if isinstance(v, torch.Tensor) else v)


def _compare(actual, expected, what="result") -> str | None:
    """None when `actual` (on the CPU) matches `expected`, else why not."""
    import torch
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"{what}: {type(actual).__name__} instead of a tensor"
        if actual.dtype != expected.dtype:
            return f"{what}: dtype {actual.dtype} != {expected.dtype}"
        if actual.shape != expected.shape:
            return f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True,
                                       **_tolerance(expected.dtype))
        except AssertionError as e:
            return f"{what}: " + " ".join(str(e).split())[:300]
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            return f"{what}: {type(actual).__name__} of another length"
        for i, (a, e) in enumerate(zip(actual, expected)):
            why = _compare(a, e, f"{what}[{i}]")
            if why:
                return why
        return None
    try:
        same = actual == expected or (actual != actual and expected != expected)
    except Exception:  # noqa: BLE001 - an uncomparable result is a mismatch
        same = False
    return None if same else f"{what}: {actual!r} != {expected!r}"


# Ops that return (values, indices) where eager's index among equal values is
# an implementation detail (a quickselect, an unstable sort): indices are right
# when they point at the values, in some dim, and the values match eager.
TIED_INDICES = {"kthvalue", "median", "nanmedian", "mode", "topk", "sort", "argsort"}


def _compare_tied(name: str, inp, actual, expected) -> str | None:
    why = _compare(actual, expected)
    import torch
    if why is None or name not in TIED_INDICES or not isinstance(inp, torch.Tensor):
        return why
    if name == "argsort":
        e_idx, a_idx = expected, actual
    elif isinstance(expected, tuple) and len(expected) == 2 and isinstance(actual, tuple):
        if _compare(actual[0], expected[0]) is not None:
            return why
        e_idx, a_idx = expected[1], actual[1]
    else:
        return why
    if (not isinstance(a_idx, torch.Tensor) or a_idx.shape != e_idx.shape
            or a_idx.dtype != e_idx.dtype):
        return why
    if inp.dim() == 0:
        return None if bool(a_idx.eq(0).all()) else why
    for d in range(inp.dim()):
        try:
            a, e = _pick(inp, d, a_idx), _pick(inp, d, e_idx)
        except (RuntimeError, IndexError):
            continue
        if _compare(a, e) is None:
            return None
    return why


def _closer_than_eager(op, sample, actual, expected) -> bool:
    """Floating results that differ from eager but are no further than eager's own
    from the float64 result (eager rounds differently: a half op computed step
    by step in half, or a float op in another order). Values only: the
    structure, dtypes, shapes and NaNs must match as they are."""
    import torch

    def wide(x):
        if isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16,
                                                      torch.float32):
            return x.to(torch.float64)
        return x
    try:
        torch.manual_seed(0)
        ref = op(_map(sample.input, wide), *_map(sample.args, wide),
                 **_map(sample.kwargs, wide))
    except Exception:  # noqa: BLE001 - no float64 version: no judgement
        return False
    return _no_further(actual, expected, ref)


def _no_further(actual, expected, ref) -> bool:
    import torch
    if isinstance(expected, torch.Tensor):
        if not (isinstance(ref, torch.Tensor) and expected.dtype.is_floating_point
                and ref.shape == expected.shape and actual.shape == expected.shape
                and actual.dtype == expected.dtype):
            return _compare(actual, expected) is None
        a, e, r = actual.double(), expected.double(), ref.double()
        if not torch.equal(a.isnan(), e.isnan()):
            return False
        tol = _tolerance(expected.dtype)
        ok = (a - r).abs() <= (e - r).abs() + tol["atol"] + tol["rtol"] * r.abs()
        return bool((ok | a.isnan() | (a == e)).all())
    if isinstance(expected, (list, tuple)):
        return (isinstance(actual, (list, tuple)) and isinstance(ref, (list, tuple))
                and len(actual) == len(expected) == len(ref)
                and all(_no_further(a, e, r) for a, e, r in zip(actual, expected, ref)))
    return _compare(actual, expected) is None


def _pick(inp, d: int, idx):
    return inp.gather(d, idx if idx.dim() == inp.dim() else idx.unsqueeze(d))


def _short(e: BaseException) -> str:
    first = next((ln for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {first.strip()[:240]}"


def _random_output(op, samples) -> bool:
    """Eager output changes with the RNG seed: not deterministic."""
    import torch
    for s in samples:
        try:
            torch.manual_seed(0)
            a = op(s.input, *s.args, **s.kwargs)
            torch.manual_seed(1)
            b = op(s.input, *s.args, **s.kwargs)
        except Exception:  # noqa: BLE001 - eager errors are compared later
            continue
        if _compare(b, a) is not None:
            return True
    return False




def _trace(op, dtypes: list[str]) -> dict[str, list]:
    """Eager results and (not yet computed) lazy results of `op`'s samples, per dtype."""
    per_dtype = {}
    for dt in dtypes:
        cases = []
        for s in _samples(op, dt):
            try:
                expected = ("ok", _call(op, s, lazy=False))
            except Exception as e:  # noqa: BLE001 - lazy must raise the same type
                expected = ("raise", e)
            try:
                # A fresh copy of every lazy result: reading a view after the
                # mark_step would replay it as a graph of its own.
                actual = ("ok", _map(_call(op, s, lazy=True), _fresh))
            except Exception as e:  # noqa: BLE001 - classified below
                actual = ("raise", e)
            cases.append((expected, actual, s))
        per_dtype[dt] = cases
    return per_dtype


def run_task(op, dtypes: list[str]) -> dict[str, dict]:
    """Run `op` on every dtype in `dtypes` as one lazy graph; a result per dtype.
    (Several ops in one graph do not pay: LLVM's time grows faster than the module.)"""
    import lazymlir
    lazymlir.metrics.reset()
    per_dtype = _trace(op, dtypes)
    sync_error = None
    try:
        lazymlir.mark_step()
    except Exception as e:  # noqa: BLE001 - reading the values raises it again, per dtype
        sync_error = e
    fallbacks = sorted(lazymlir.metrics.fallback_ops())
    if not fallbacks and lazymlir.metrics.counters().get("FallbackOps", 0):
        fallbacks = ["(unnamed)"]
    return _classify(op, per_dtype, fallbacks, sync_error)


def _classify(op, per_dtype: dict[str, list], fallbacks: list[str],
              sync_error) -> dict[str, dict]:
    results = {}
    for dt, cases in per_dtype.items():
        wrong = error = None
        for (ek, ev), (ak, av), sample in cases:
            if ak == "ok":
                try:
                    av = _to_host(av)
                except Exception as e:  # noqa: BLE001 - a failed value
                    ak, av = "raise", e
            if ek == "raise" and ak == "raise":
                if type(ev) is not type(av) and error is None:
                    error = f"{_short(av)} (eager: {_short(ev)})"
            elif ek == "raise":
                error = error or f"no error (eager: {_short(ev)})"
            elif ak == "raise":
                error = error or _short(av)
            else:
                why = _compare_tied(op.name, sample.input, av, ev)
                if why is not None and _closer_than_eager(op, sample, av, ev):
                    why = None
                wrong = wrong or why
        if wrong:
            results[dt] = {"status": "wrong", "cause": wrong}
        elif error:
            results[dt] = {"status": "error", "cause": error}
        elif fallbacks:
            results[dt] = {"status": "fallback", "cause": "falls back: " + ", ".join(fallbacks)}
        else:
            results[dt] = {"status": "lowered", "cause": ""}
        if sync_error is not None and results[dt]["status"] == "lowered":
            results[dt] = {"status": "error", "cause": _short(sync_error)}
    return results


def worker_main() -> None:
    """Read tasks (JSON lines: name, variant, dtypes) on stdin; one JSON reply line each."""
    import warnings
    warnings.simplefilter("ignore")
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)                 # ops and the compiler may print: keep replies clean
    import torch  # noqa: F401
    import lazymlir  # noqa: F401
    ops = _ops()
    for line in sys.stdin:
        name, variant, dtypes = json.loads(line)
        op = ops[(name, variant)]
        if os.environ.get("OPINFO_SWEEP_CRASH_ON") == name:  # test_opinfo.py's crash test
            os.abort()
        results = run_task(op, dtypes)
        if len(dtypes) > 1 and any(r["status"] != "lowered" for r in results.values()):
            # Not conclusive for all dtypes at once: attribute dtype by dtype.
            results = {}
            for dt in dtypes:
                results.update(run_task(op, [dt]))
        replies.write(json.dumps(results) + "\n")
        replies.flush()


# ----------------------------------------------------------------------------- parent side


def sweep_tasks(names: set[str] | None = None, dtypes: set[str] | None = None, select=None):
    """(name, variant, [dtypes]) for every deterministic op, with the dtypes it supports;
    with `select`, only the ops for which select(name, variant, dtypes) is true (asked
    before the op's samples are made: making them is most of this function's time)."""
    tasks, skipped = [], []
    for (name, variant), op in _ops().items():
        if names is not None and name not in names:
            continue
        if name in NONDETERMINISTIC:
            skipped.append(entry_key(name, variant, "*"))
            continue
        dts = [d for d in op_dtypes(op) if dtypes is None or d in dtypes]
        if select is not None and not select(name, variant, dts):
            continue
        if dts and _random_output(op, _samples(op, "float32")):
            skipped.append(entry_key(name, variant, "*"))
            continue
        if dts:
            tasks.append((name, variant, dts))
    return tasks, skipped


class _Worker:
    def __init__(self, env):
        self.env = env
        self.proc = None

    def run(self, task, timeout: float) -> dict | None:
        """The task's results, or None when the worker died or hung (then it is restarted)."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__)), "--worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self.env)
        reply: list[str] = []
        reader = threading.Thread(target=lambda: reply.append(self.proc.stdout.readline()))
        try:
            self.proc.stdin.write(json.dumps(task) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        reader.start()
        reader.join(timeout)
        if reply and reply[0]:
            return json.loads(reply[0])
        self.close()
        return None

    def close(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None


# The CI tier (test_opinfo.py runs it by default; the full sweep takes ~30 min on 2
# cores): the ops picked below, all their dtypes and all SAMPLES_PER_DTYPE samples, so
# every entry it runs has exactly the status the full sweep records. CI_LOWERING_SHARE
# of the ops the table expects to lower in every dtype (an op costs ~0.7 s there:
# one compile per op; half of them, since all of them took 5.6 of CI's 30 minutes),
# and CI_OTHER_SHARE of the rest (~10 s an op, most of the tier's time: a graph per dtype,
# compiler crashes restart the compile worker), so fallback and error classification
# run in CI too. A share (a, b) takes the ops whose crc32("name/variant") % b < a: fixed,
# and not by name or speed.
CI_LOWERING_SHARE = (1, 2)
CI_OTHER_SHARE = (1, 50)
# How the recorded table was made, beyond the last full --write, for
# docs/opinfo-coverage.md (by hand: clear it after a full --write).
SWEEP_NOTES = (
    "The table is one complete full sweep (2026-11-22, load average 4-8 on the shared"
    " 2-core machine), except `reciprocal`, `__rdiv__`, `var_mean`, `std_mean` and"
    " `nn.functional.bilinear` (all variants), re-swept with `--ops ... --write` after"
    " the fixes that the full sweep found them needing (reciprocal crashed, var_mean and"
    " bilinear were wrong in half types).")

# The CI tier's last measurement, for docs/opinfo-coverage.md (update it by hand when
# you measure again: timings are not asserted anywhere).
CI_TIER_MEASURED = (
    "Measured 2026-11-27 on the 2-core dev machine (load average 3 to 4.7, other jobs"
    " running), with `python tests/python/cases/opinfo_sweep.py --ci` and 1 in 25 of the"
    " other ops: 229 s; 920 lowered, 21 fallback, 0 wrong, 1 error, 0 crash. With every"
    " lowering op (share 1 in 1) it took 256 s on 2026-11-22 at load 1.3-3.1, and 339 s"
    " in a clean-clone CI run under load.")


def _in_share(name: str, variant: str, share: tuple[int, int]) -> bool:
    return zlib.crc32(f"{name}/{variant}".encode()) % share[1] < share[0]


def in_ci_tier(name: str, variant: str, dtypes, expected: dict[str, tuple[str, str]]) -> bool:
    """Whether the CI tier runs this op (see CI_LOWERING_SHARE); a select for sweep_tasks."""
    lowering = all(entry_key(name, variant, dt) not in expected for dt in dtypes)
    return _in_share(name, variant, CI_LOWERING_SHARE if lowering else CI_OTHER_SHARE)


def ci_tier_tasks():
    """sweep_tasks() of the CI tier."""
    expected = expected_statuses()
    return sweep_tasks(select=lambda name, variant, dts: in_ci_tier(name, variant, dts,
                                                                    expected))


def plan(tasks, expected: dict[str, tuple[str, str]] | None = None) -> list[tuple]:
    """The tasks in the order and split the workers get them. An op the table expects
    not to lower in some dtype runs dtype by dtype straight away (all its dtypes as
    one graph would not be conclusive and be rerun that way anyway), and first: those
    are the slow ones, and starting them early balances the workers. Statuses do
    not depend on this (a task that does not all lower is split the same way)."""
    expected = expected_statuses() if expected is None else expected
    lowering, others = [], []
    for name, variant, dtypes in tasks:
        if all(expected.get(entry_key(name, variant, dt), ("lowered",))[0] == "lowered"
               for dt in dtypes):
            lowering.append((name, variant, list(dtypes)))
        else:
            others += [(name, variant, [dt]) for dt in dtypes]
    return others + lowering


def run_sweep(tasks, jobs: int = 2, progress=None,
              expected: dict[str, tuple[str, str]] | None = None) -> dict[str, dict]:
    """Run the tasks in `jobs` worker processes; {entry key: {"status", "cause"}}."""
    env = dict(os.environ, LAZYMLIR_FALLBACK="silent", LAZYMLIR_TARGET="cpu")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (env.get("PYTHONPATH", ""), str(HERE)) if p)
    todo: queue.Queue = queue.Queue()
    for t in plan(tasks, expected):
        todo.put(t)
    results: dict[str, dict] = {}
    lock = threading.Lock()

    def loop():
        worker = _Worker(env)
        while True:
            try:
                name, variant, dtypes = todo.get_nowait()
            except queue.Empty:
                break
            began = time.monotonic()
            out = worker.run([name, variant, dtypes], TASK_TIMEOUT_S)
            if out is None and len(dtypes) > 1:
                for dt in dtypes:          # retry one dtype at a time to find the crash
                    todo.put((name, variant, [dt]))
                continue
            if out is None:
                out = {dtypes[0]: {"status": "crash", "cause": "worker died or hung"}}
            with lock:
                for dt, r in out.items():
                    results[entry_key(name, variant, dt)] = r
                if progress:
                    progress(name, variant, out, time.monotonic() - began)
        worker.close()

    threads = [threading.Thread(target=loop) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def counts(results: dict[str, dict]) -> Counter:
    c = Counter(r["status"] for r in results.values())
    return Counter({s: c.get(s, 0) for s in STATUSES})


def expected_statuses() -> dict[str, tuple[str, str]]:
    """{entry key: (status, cause)} from opinfo_expectations.py; unlisted entries lower."""
    sys.path.insert(0, str(HERE))
    import importlib
    import opinfo_expectations as ex
    importlib.reload(ex)
    out = {}
    for status, table in (("fallback", ex.FALLBACK), ("error", ex.ERROR), ("crash", ex.CRASH)):
        for cause, keys in table.items():
            for k in keys:
                out[k] = (status, cause)
    return out


def differences(results: dict[str, dict], ops: set[str] | None = None) -> list[str]:
    """Every way `results` differs from the expectations table (empty when it matches);
    with `ops` ("name/variant" keys), only the table's entries of those ops count."""
    expected = expected_statuses()
    if ops is not None:
        expected = {k: v for k, v in expected.items() if k.rsplit(":", 1)[0] in ops}
    lines = []
    for key in sorted(results):
        got = results[key]["status"]
        want = expected.get(key, ("lowered", ""))[0]
        if got == "wrong":
            lines.append(f"WRONG      {key}: {results[key]['cause']}")
        elif got != want:
            what = "NEWLY LOWERS" if got == "lowered" else "REGRESSION" if want == "lowered" \
                else "CHANGED"
            lines.append(f"{what:<10} {key}: expected {want}, got {got}"
                         f" {results[key]['cause']}".rstrip())
    for key in sorted(set(expected) - set(results)):
        lines.append(f"STALE      {key}: listed in opinfo_expectations.py but not swept")
    return lines


_CAUSE_NOISE = [
    (re.compile(r"0x[0-9a-f]+"), "0x…"),
    (re.compile(r"/tmp/\S+"), "/tmp/…"),
    (re.compile(r"\b[0-9a-f]{16,}\b"), "…"),
]


def _cause_key(cause: str) -> str:
    for pat, rep in _CAUSE_NOISE:
        cause = pat.sub(rep, cause)
    return cause[:160]


def write_expectations(results: dict[str, dict]) -> None:
    groups: dict[str, dict[str, list[str]]] = {"fallback": {}, "error": {}, "crash": {}}
    for key, r in sorted(results.items()):
        if r["status"] in groups:
            cause = _cause_key(r["cause"]) or "(cause not recorded: the sweep was cut short)"
            groups[r["status"]].setdefault(cause, []).append(key)
    parts = [
        "# ruff: noqa: E501  (causes are quoted whole)\n"
        '"""OpInfo entries (op/variant:dtype) that do not lower, grouped by cause.\n\n'
        "Generated by `python tests/python/cases/opinfo_sweep.py --write`; test_opinfo.py fails\n"
        "when the sweep differs from it (a regression, or an entry that newly lowers:\n"
        "then regenerate). Every entry not listed here must lower with no eager fallback;\n"
        'no entry may be wrong. CRASH: the sweep worker died (or hung) running it.\n"""\n',
    ]
    for status in ("fallback", "error", "crash"):
        parts.append(f"\n{status.upper()}: dict[str, set[str]] = {{")
        for cause in sorted(groups[status], key=lambda c: (-len(groups[status][c]), c)):
            parts.append(f"    {cause!r}: {{")
            for key in groups[status][cause]:
                parts.append(f"        {key!r},")
            parts.append("    },")
        parts.append("}\n")
    EXPECTATIONS.write_text("\n".join(parts))


def _share_text(share: tuple[int, int]) -> str:
    return "all the" if share[0] >= share[1] else f"{share[0]} in {share[1]} of the"


def _counts_row(label: str, c: Counter, ops: int) -> str:
    return (f"| {label} | {c['lowered']} | {c['fallback']} | {c['wrong']} | {c['error']}"
            f" | {c['crash']} | {sum(c.values())} | {ops} |")


def write_doc(results: dict[str, dict], skipped: list[str], seconds: float, jobs: int,
              unswept: list[str] = ()) -> None:
    c = counts(results)
    expected = {k: (r["status"], r["cause"]) for k, r in results.items()
                if r["status"] in ("fallback", "error", "crash")}
    dtypes_of: dict[str, list[str]] = {}
    for key in results:
        op, dt = key.rsplit(":", 1)
        dtypes_of.setdefault(op, []).append(dt)
    ci_ops = {op for op, dts in dtypes_of.items()
              if in_ci_tier(*(op.split("/", 1) + [""])[:2], dts, expected)}
    ci_counts = counts({k: r for k, r in results.items() if k.rsplit(":", 1)[0] in ci_ops})
    by_op: dict[str, dict[str, str]] = {}
    for key, r in results.items():
        op, dt = key.rsplit(":", 1)
        by_op.setdefault(op, {})[dt] = r["status"]
    lines = [
        "# OpInfo coverage",
        "",
        "PyTorch's OpInfo database (`torch.testing._internal.common_methods_invocations.op_db`)",
        "run on `lazy_mlir` (cpu target) against eager CPU. Regenerate this page and",
        "`tests/python/cases/opinfo_expectations.py` with",
        "",
        "    PYTHONPATH=. python tests/python/cases/opinfo_sweep.py --write",
        "",
        "`tests/python/e2e/test_opinfo.py` runs the sweep and fails on any wrong entry, any",
        "crash, and any entry whose status differs from the table (a regression, or one",
        "that newly lowers: regenerate). By default (CI) it runs the CI tier below; with",
        "`LAZYMLIR_OPINFO_SWEEP=1` the full sweep this page records.",
        "",
        "## CI tier",
        "",
        "The full sweep takes far longer than CI's budget on 2 cores, so CI runs",
        f"{_share_text(CI_LOWERING_SHARE)} ops this table records as lowered in every",
        f"dtype (one compile per op) and {_share_text(CI_OTHER_SHARE)} other ops (a graph"
        " per",
        "dtype, and compiler crashes restart the compile worker); a share is picked by a",
        "stable hash (crc32) of `name/variant`, not by name or speed. Every dtype and all",
        f"{SAMPLES_PER_DTYPE} samples, so each of its entries has exactly the status"
        " recorded here",
        "(`opinfo_sweep.in_ci_tier`).",
        "The share is taken of this table: regenerating it can move an op in or out.",
        "",
        "| | lowered | fallback | wrong | error | crash | entries | ops |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        _counts_row("CI tier (as recorded here)", ci_counts, len(ci_ops)),
        "",
        CI_TIER_MEASURED,
        "",
        "## What counts",
        "",
        "- An **entry** is (op name, variant test name, dtype); dtypes are float32, int64,",
        "  bool, float16 and bfloat16 where the OpInfo says the op supports them on CPU.",
        f"- Each entry runs the op's first {SAMPLES_PER_DTYPE} sample inputs"
        " (`op.sample_inputs('cpu', dtype)`),",
        "  inputs moved with `.to('lazy_mlir')` (a `device='cpu'` argument becomes `lazy_mlir`),",
        "  results read back with `.cpu()`; the function variant only (`op(...)`), no grad.",
        "- **lowered**: every sample matches eager (dtype, shape, values: float32 rtol=atol=1e-5,",
        "  float16 1e-3, bfloat16 1.6e-2/1e-2, integers and bools exact, NaN equal NaN) and",
        "  `lazymlir.metrics.fallback_ops()` is empty. **fallback**: right, but some op ran",
        "  eagerly (at trace time, or split out of the graph because it does not compile).",
        "  **wrong**: a value, dtype or shape differs. **error**: lazy_mlir raises where eager",
        "  does not, or a different exception type. **crash**: the worker process died or hung.",
        "  A sample on which eager raises counts as matching when lazy_mlir raises the same type.",
        "- Floating values outside those tolerances still count as right when every element is",
        "  no further from the float64 result (the op run on float64 copies of the inputs) than",
        "  eager's, plus the tolerance: eager CPU rounds some half ops step by step, and a",
        "  different but no less exact rounding is not wrong. Dtypes, shapes and NaN positions",
        "  must match exactly.",
        "- (values, indices) ops whose eager index among equal values is an implementation",
        f"  detail ({', '.join(sorted(TIED_INDICES))}): indices are right when the values match",
        "  and the input at lazy_mlir's indices equals the input at eager's.",
        "- Each op runs all its dtypes as one graph (one mark_step, one compile); an op whose",
        "  dtypes do not all lower is rerun dtype by dtype, so fallbacks and errors are",
        "  attributed to the right dtype (an op the table already lists runs dtype by dtype",
        "  from the start). Results are `.clone()`d before the mark_step (reading",
        "  a view of a graph input afterwards would compile a graph of its own).",
        "- Not swept: ops whose result depends on the RNG (eager output changes with the seed)",
        "  or on uninitialized memory (`empty*`), listed below.",
        "",
        "## Counts",
        "",
        "| lowered | fallback | wrong | error | crash | entries |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {c['lowered']} | {c['fallback']} | {c['wrong']} | {c['error']} | {c['crash']}"
        f" | {sum(c.values())} |",
        "",
        (f"Sweep time: {seconds:.0f} s with {jobs} worker processes (cold compile cache)."
         if seconds else "Sweep time: not recorded (no full sweep has been written yet)."),
        "",
        *([SWEEP_NOTES, ""] if SWEEP_NOTES else []),
        "## Per op",
        "",
        "✓ lowered, F fallback, W wrong, E error, C crash, · dtype not supported.",
        "Causes per entry: `tests/python/cases/opinfo_expectations.py`.",
        "",
        "| op | " + " | ".join(DTYPES) + " |",
        "| --- | " + " | ".join("---" for _ in DTYPES) + " |",
    ]
    for op in sorted(by_op):
        cells = [MARKS[by_op[op][d]] if d in by_op[op] else "·" for d in DTYPES]
        lines.append(f"| `{op}` | " + " | ".join(cells) + " |")
    if unswept:
        lines += ["", "## Not recorded yet", "",
                  "The last sweep did not reach these ops; test_opinfo.py sweeps only the ops",
                  "recorded above until a full `--write` run records them:", "",
                  ", ".join(f"`{k}`" for k in sorted(unswept))]
    lines += ["", "## Not swept (nondeterministic)", "",
              ", ".join(f"`{k.rsplit(':', 1)[0]}`" for k in sorted(skipped)), ""]
    DOC.write_text("\n".join(lines))


def recorded_sweep():
    """The last full sweep as written: (results, skipped, seconds, jobs), read back
    from docs/opinfo-coverage.md (every entry's status) and opinfo_expectations.py
    (the causes)."""
    names = {v: k for k, v in MARKS.items()}
    causes = expected_statuses()
    results, skipped, seconds, jobs = {}, [], 0.0, 2
    text = DOC.read_text()
    for line in text.splitlines():
        m = re.match(r"\| `(.+)` \| (.+) \|$", line)
        if m:
            for dt, cell in zip(DTYPES, m.group(2).split(" | ")):
                if cell in names:
                    key = f"{m.group(1)}:{dt}"
                    results[key] = {"status": names[cell],
                                    "cause": causes.get(key, ("", ""))[1]}
        m = re.match(r"Sweep time: (\d+) s with (\d+)", line)
        if m:
            seconds, jobs = float(m.group(1)), int(m.group(2))
    unswept = []
    if "## Not recorded yet" in text:
        part = text.split("## Not recorded yet")[1].split("## Not swept")[0]
        unswept = re.findall(r"`([^`]+)`", part.split(":\n", 1)[-1])
    not_swept = text.split("## Not swept (nondeterministic)")[-1]
    skipped = [k + ":*" for k in re.findall(r"`([^`]+)`", not_swept)]
    return results, skipped, seconds, jobs, unswept


def main(argv=None) -> int:
    import warnings
    warnings.simplefilter("ignore")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--write", action="store_true",
                   help="regenerate opinfo_expectations.py and docs/opinfo-coverage.md")
    p.add_argument("--ops", help="comma-separated op names (default: all)")
    p.add_argument("--dtypes", help="comma-separated dtypes (default: all)")
    p.add_argument("-v", "--verbose", action="store_true", help="a line per op, to stderr")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--ci", action="store_true", help="only the CI tier's ops (test_opinfo.py)")
    p.add_argument("--record", help="append each op's results to this file as JSON lines"
                                    " as they come (what a run cut short leaves)")
    args = p.parse_args(argv)
    if args.worker:
        worker_main()
        return 0
    names = set(args.ops.split(",")) if args.ops else None
    dtypes = set(args.dtypes.split(",")) if args.dtypes else None
    start = time.monotonic()
    if args.ci:
        tasks, skipped = ci_tier_tasks()
    else:
        tasks, skipped = sweep_tasks(names, dtypes)
    record = open(args.record, "a") if args.record else None

    def progress(name, variant, out, seconds):
        if record:
            record.write(json.dumps({"op": entry_key(name, variant, "")[:-1], "results": out,
                                     "seconds": round(seconds, 1)}) + "\n")
            record.flush()
        if args.verbose:
            states = " ".join(f"{dt}={r['status']}" for dt, r in out.items())
            print(f"{seconds:6.1f}s {entry_key(name, variant, '')} {states}",
                  file=sys.stderr, flush=True)

    results = run_sweep(tasks, args.jobs, progress)
    seconds = time.monotonic() - start
    print("counts:", dict(counts(results)), f"({seconds:.0f} s)")
    if names is not None:
        for key in sorted(results):
            print(f"{results[key]['status']:<9} {key} {results[key]['cause']}")
    subset = names is not None or dtypes is not None or args.ci
    if args.write:
        if subset:
            # A subset: update its entries in the recorded sweep.
            recorded, skipped, seconds, jobs, unswept = recorded_sweep()
            recorded.update(results)
            results = recorded
            args.jobs = jobs
            done = {k.rsplit(":", 1)[0] for k in results}
            unswept = [k for k in unswept if k not in done]
        else:
            unswept = []
        write_expectations(results)
        write_doc(results, skipped, seconds, args.jobs, unswept)
        return 0
    if names is None and dtypes is None:
        diff = differences(results, {entry_key(n, v, "")[:-1] for n, v, _ in tasks}
                           if args.ci else None)
        print("\n".join(diff) or "matches opinfo_expectations.py")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
