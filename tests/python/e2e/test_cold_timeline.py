"""benchmarks/cold_timeline.py: its hooks on lazymlir's private functions still see every event."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _timeline(*args: str) -> str:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, LAZYMLIR_FALLBACK="error")
    done = subprocess.run([sys.executable, "-m", "benchmarks.cold_timeline", "mlp", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("args, waits, last", [
    ((), 3, "first call returned"),
    pytest.param(("--eager-while-compiling",), 0, "every compile ended",
                 marks=pytest.mark.slow),  # the loop case below covers the flag in CI
    # a training loop: the second step waits for every compile (dynamo.py: only a
    # graph's first run goes without it)
    (("--eager-while-compiling", "--loop"), 3,
     "step 2 ran every graph compiled (3 eager runs before)"),
])
def test_the_cold_timeline_of_an_mlp_step(args, waits, last):
    out = _timeline(*args)
    # Dynamo's two graphs (the model step, the optimizer step); AOTAutograd's three
    # (forward, backward, SGD), each compiled once, in a worker.
    assert out.count("Dynamo hands the backend a graph") == 2, out
    assert out.count("AOTAutograd hands over a graph") == 3, out
    assert out.count("ended (ms: torch ") == 3, out
    assert "package" in out and "first call returned" in out
    assert out.count("a run waits for compile") == waits, out
    assert out.rstrip().endswith(f"{last} |"), out


# Two fresh processes with cold compiles (about 36 s of CI): run with the slow tests.
@pytest.mark.slow
def test_first_call_measures_cold_and_warm_first_calls():
    """benchmarks/first_call.py: one round of the MLP step, the cold lazymlir first call
    and the warm one (a second process on the first one's disk cache)."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, LAZYMLIR_FALLBACK="error")
    done = subprocess.run([sys.executable, "-m", "benchmarks.first_call", "--only", "mlp",
                           "--rounds", "1", "--backends", "lazymlir,lazymlir-warm"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| lazymlir | " in done.stdout and "| lazymlir-warm | " in done.stdout, done.stdout
