"""The session: one owner for the state that lives as long as the process.

Settings, metrics, the active target, the graph caches (memory, disk), probe verdicts (keyed
by target), the fallback warnings already given and the compile worker all
hang off one `Session`; the live lazy tensors are tracked per session by
the C++ dispatch entry (tracing/native_entry.cpp: weak references, a new list
when `_current` changes). Pure memo tables keyed by op (the tracer's routes and
shape caches) are process-wide: they hold no state a reset should clear. Layers fill the fields
they own on first use (`execution` the cache and worker, `targets` the
target); nothing else in the package keeps module-level mutable state.
`reset()` closes the compile worker and starts a fresh session (the tests use
it between cases instead of poking private state).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from .support.metrics_store import Metrics
from .support.rng_state import RngState
from .support.settings import Settings, from_env


class Session:
    def __init__(self, settings: Settings | None = None):
        self.settings: Settings = settings or from_env()
        self.metrics = Metrics()
        self.rng = RngState()                 # the device's Philox seed and offset
        self.target: Any = None               # targets.Target, resolved on first use
        self.graph_cache: Any = None          # execution.graph_cache.GraphCache
        self.dynamic_policy: Any = None       # execution.dynamic_policy.Policy
        self.disk_cache: Any = None           # (cache folder, execution.disk_cache.DiskCache)
        self.worker: Any = None               # execution.worker_pool.WorkerPool
        # Compiles the program does not wait for (torch.compile's eager_while_compiling):
        # workers at low CPU priority (executor._worker)
        self.background_worker: Any = None
        # plan key -> (compile request, Future of its reply): executor.compile_ahead
        self.compiles_ahead: dict[str, tuple] = {}
        self.diagnostics: Any = None          # execution.diagnostics.Diagnostics
        self.runs: Any = None                 # execution.runs.Runner: graphs run in the background
        self.verdicts: dict[tuple, str | None] = {}  # (target, op signature) -> why not / None
        self.static_scalar_ops: set[str] = set()  # ops whose scalars must stay constants
        self.warned: set[str] = set()         # fallback ops already warned about
        self.dump_dirs: list[str] = []        # stack of lazymlir.dump_to() folders
        # Tracing is per thread; graph building and execution take this lock.
        self.lock = threading.RLock()
        self.scratch: str | None = None       # compile outputs of this process (removed at exit)

    def scratch_dir(self) -> str:
        if self.scratch is None:
            self.scratch = tempfile.mkdtemp(prefix="lazymlir-")
        return self.scratch

    def close(self) -> None:
        if self.runs is not None:  # first: a run in flight may still use the scratch folder
            self.runs.close()
            self.runs = None
        for pool in (self.worker, self.background_worker):
            if pool is not None:
                pool.close()
        self.worker = self.background_worker = None
        self.compiles_ahead.clear()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


_current = Session()


@atexit.register
def _close_at_exit() -> None:
    _current.close()


def current() -> Session:
    return _current


def runtime_library(build) -> Path:
    """One of lazymlir's runtime libraries (`build(folder)` compiles it if it is not
    there): next to the disk cache (once per machine) when there is one, else in the
    session's scratch folder (once per process)."""
    cache_dir = _current.settings.cache_dir
    directory = Path(cache_dir) / "runtime" if cache_dir else Path(_current.scratch_dir())
    try:
        return build(directory)
    except OSError:  # an unwritable cache folder: build privately instead
        return build(_current.scratch_dir())


def reset(settings: Settings | None = None) -> Session:
    """Close the current session and start a fresh one (new settings read from the env)."""
    global _current
    _current.close()
    _current = Session(settings)
    return _current
