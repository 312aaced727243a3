"""Shared fixtures and helpers for the lazy_mlir Python tests.

The device suites run on the target the environment selects, like any program:
LAZYMLIR_TARGET (cpu here by default: `auto` without a GPU) and, for cuda,
LAZYMLIR_CUDA_DRIVER. scripts/test.sh runs the tests marked `emulator` a second time
with `LAZYMLIR_TARGET=cuda LAZYMLIR_CUDA_DRIVER=emulator` (every kernel executed on the
CPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch

# Modules the test files share (graphs, models, the OpInfo sweep, stand-in workers and
# scripts run in child processes) live in cases/; test files in every folder import
# them by name.
TESTS_DIR = Path(__file__).resolve().parent
CASES_DIR = TESTS_DIR / "cases"
sys.path.insert(0, str(CASES_DIR))

# The suite never reads or writes the user's persistent compile cache. Tests in this
# process (and children that inherit its environment) run with it off: every graph a
# test builds really compiles, also after `session.reset()`; the disk cache's own tests
# (test_disk_cache.py, test_cache_robustness.py) name their folders. Children that drop
# the LAZYMLIR_* variables get the default location, which XDG_CACHE_HOME points into a
# private folder of this run.
PRIVATE_CACHES = tempfile.mkdtemp(prefix="lazymlir-tests-")
os.environ["XDG_CACHE_HOME"] = os.path.join(PRIVATE_CACHES, "xdg")
os.environ["LAZYMLIR_CACHE_DIR"] = "off"

import lazymlir  # noqa: E402

lazymlir.config.reload()  # in case a plugin imported lazymlir before the lines above

DEVICE = "lazy_mlir"


@pytest.fixture(autouse=True)
def _reset_metrics():
    """Every test starts with zeroed counters."""
    lazymlir.metrics.reset()
    yield


def pytest_unconfigure(config):
    shutil.rmtree(PRIVATE_CACHES, ignore_errors=True)


def pytest_report_header(config):
    settings = lazymlir.config.settings()
    return (f"lazymlir target: LAZYMLIR_TARGET={settings.target} "
            f"LAZYMLIR_CUDA_DRIVER={settings.cuda_driver}")


@pytest.fixture(scope="session", autouse=True)
def _runtime_library():
    """Tests that create CUDA runtimes directly use the library the device uses
    (LAZYMLIR_RUNTIME_LIB, e.g. a fresh build, before the installed one)."""
    explicit = lazymlir.config.settings().runtime_lib
    if explicit:
        from lazymlir.targets import cuda_driver

        cuda_driver.load_library(explicit)


def target_name() -> str:
    """The active target ("cpu" or "cuda"), resolved as the device resolves it."""
    return lazymlir.targets.active().name


# Ops a target cannot lower yet. There they run with eager fallback (counted, warned,
# right), and the no-fallback checks accept exactly these; any other fallback fails.
EXPECTED_FALLBACKS = {
    "cpu": {},
    "cuda": {},
}


def count_python_entries(monkeypatch) -> list[str]:
    """From now until `monkeypatch.undo()`, the names of the ops that reach the Python
    tracer's entry (`tracer._torch_dispatch`), in order, in the list returned."""
    from lazymlir.tracing import tracer

    entries: list[str] = []
    entry = tracer._torch_dispatch

    def counted(cls, func, types, args=(), kwargs=None):
        entries.append(str(func))
        return entry(cls, func, types, args, kwargs)
    monkeypatch.setattr(tracer, "_torch_dispatch", counted)
    return entries


def assert_no_fallback() -> None:
    """No op ran with eager fallback since the last metrics reset, except the ones the
    active target is known not to lower (EXPECTED_FALLBACKS)."""
    counters = lazymlir.metrics.counters()
    ops = lazymlir.metrics.fallback_ops()
    expected = EXPECTED_FALLBACKS[target_name()]
    unexpected = {op: n for op, n in ops.items() if op not in expected}
    assert unexpected == {}, (unexpected, counters)
    assert counters.get("FallbackOps", 0) == sum(ops.values()), counters


def tolerances(dtype: torch.dtype) -> dict:
    if dtype.is_floating_point or dtype.is_complex:
        if dtype == torch.float64:
            return {"rtol": 1e-7, "atol": 1e-7}
        return {"rtol": 1e-5, "atol": 1e-5}
    return {"rtol": 0, "atol": 0}  # ints and bools: exact


def to_lazy(x):
    if isinstance(x, torch.Tensor):
        return x.to(DEVICE)
    if isinstance(x, (list, tuple)):
        return type(x)(to_lazy(v) for v in x)
    if isinstance(x, dict):
        return {k: to_lazy(v) for k, v in x.items()}
    return x


def to_host(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_host(v) for v in x)
    if isinstance(x, dict):
        return {k: to_host(v) for k, v in x.items()}
    return x


def assert_same(actual, expected, what: str = "result") -> None:
    """Structure, shape, dtype and (dtype-aware) values of `actual` match `expected`."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what}: {type(actual)}"
        assert actual.device.type == "cpu", f"{what}: on {actual.device}"
        assert actual.dtype == expected.dtype, f"{what}: {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{what}: {actual.shape} != {expected.shape}"
        torch.testing.assert_close(actual, expected, equal_nan=True, **tolerances(expected.dtype),
                                   msg=lambda m: f"{what}: {m}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{what}: {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{what}[{i}]")
    else:
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"


def compare_with_eager(fn, *inputs, check_inputs: bool = True):
    """Run `fn` on CPU eager and on lazy_mlir (inputs moved with .to, results .cpu()).

    In-place effects on the inputs are compared too (when `check_inputs`).
    Returns the lazy results, on the CPU.
    """
    eager_inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    expected = fn(*eager_inputs)
    lazy_inputs = [to_lazy(x) for x in inputs]
    actual = to_host(fn(*lazy_inputs))
    assert_same(actual, expected)
    if check_inputs:
        for i, (lz, ea) in enumerate(zip(lazy_inputs, eager_inputs)):
            if isinstance(ea, torch.Tensor):
                assert_same(lz.cpu(), ea, f"input {i} after the call")
    return actual


def compare_factory(fn):
    """`fn(device)` on "cpu" and on lazy_mlir give the same tensors."""
    expected = fn("cpu")
    actual = to_host(fn(DEVICE))
    assert_same(actual, expected)
    return actual


@pytest.fixture
def background():
    """Background runs on (LAZYMLIR_ASYNC) for the test: mark_step() launches, reads
    wait; its runs are waited for and the setting restored after it."""
    settings = lazymlir.config.settings()
    before = settings.async_execution
    settings.async_execution = True
    yield
    lazymlir.wait()
    settings.async_execution = before


@pytest.fixture
def no_fallback():
    """Use in a test to assert, at its end, that nothing fell back to eager."""
    yield
    assert_no_fallback()


TINY_SCRIPT = textwrap.dedent("""
    import sys, warnings, torch, lazymlir
    warnings.simplefilter("always")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3).to("lazy_mlir")
    print((x * 3 + 1).relu().sum(1).cpu().tolist())
    c = lazymlir.metrics.counters()
    print("COUNTERS", c.get("DiskCacheHit", 0), c.get("UncachedCompile", 0))
    print("TORCH_MLIR", "torch_mlir" in sys.modules)
""")


def run_tiny_script(tmp_path, **env) -> tuple[list[str], str]:
    """Run a tiny lazy_mlir program in a fresh process with only the given LAZYMLIR_*
    settings (cpu target); returns its stdout lines after checking the result, and stderr."""
    script = tmp_path / "tiny.py"
    script.write_text(TINY_SCRIPT)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    full_env.update(LAZYMLIR_TARGET="cpu", **env)
    done = subprocess.run([sys.executable, str(script)], env=full_env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "[12.0, 39.0]", lines
    return lines, done.stderr
