"""Compile workers for one session: up to `size` worker processes, and compiles started ahead.

A training step captured by torch.compile hands over its forward and its backward
graph together (AOTAutograd), and the two compile independently: with two workers
they compile at once, on two cores, instead of one after the other. Each request
goes to an idle worker; the second worker process starts only when a request finds
the first one busy, so a process that never compiles two graphs at once never pays
for it (a forked worker costs ~0.3 s of CPU to import the MLIR bindings, and the
memory its compiles use; a fresh interpreter ~2.4 s).

`submit` runs a function making requests on a daemon thread and returns a Future; the
executor keeps the futures of compiles started ahead of their first run
(executor.compile_ahead). Closing the pool kills the workers still busy with those.
Crash isolation, timeouts and restarts are each worker's own (worker.py).

A pool made with `niceness` (19: executor's background pool) runs its workers, and
the `opt`/`llc` processes they start, at that lower CPU priority: they compile on
the cores the program leaves idle instead of sharing them with it.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

from .worker import CompileWorker


class WorkerPool:
    """Thread-safe; `request` blocks until a worker is free and its answer is back."""

    def __init__(self, metrics=None, timeout: float | None = None, size: int = 1,
                 fork: bool = False, niceness: int = 0):
        self._metrics = metrics
        self._timeout = timeout
        self._fork = fork
        self.niceness = niceness  # added to each worker's (and its tools') nice value
        self.size = max(1, size)
        self._workers: list[CompileWorker] = []
        self._idle: list[CompileWorker] = []
        self._changed = threading.Condition()
        self._closed = False

    def _new_worker(self) -> CompileWorker:
        worker = CompileWorker(self._metrics, self._timeout, fork=self._fork,
                               niceness=self.niceness)
        self._workers.append(worker)
        return worker

    @property
    def started(self) -> int:
        """Worker processes made so far (started, or starting at their first request)."""
        with self._changed:
            return len(self._workers)

    def start(self, count: int = 1) -> None:
        """Start the first `count` worker processes (at most `size`) now: they import
        the compiler and warm up meanwhile (worker_main._warm_up)."""
        with self._changed:
            while len(self._workers) < min(count, self.size):
                self._idle.append(self._new_worker())
            workers = self._workers[:min(count, self.size)]
        for worker in workers:
            worker.start()

    def _acquire(self) -> CompileWorker:
        with self._changed:
            while True:
                if self._closed:
                    raise RuntimeError("lazymlir: the compile workers were closed "
                                       "(lazymlir.reset() or interpreter exit)")
                if self._idle:
                    return self._idle.pop(0)  # the oldest: warm, imports done
                if len(self._workers) < self.size:
                    return self._new_worker()
                self._changed.wait()

    def _release(self, worker: CompileWorker) -> None:
        with self._changed:
            if not self._closed:
                self._idle.append(worker)
            self._changed.notify()

    def request(self, kind: str, payload: dict):
        worker = self._acquire()
        try:
            return worker.request(kind, payload)
        finally:
            self._release(worker)

    def submit(self, function, *args) -> Future:
        """Run `function(*args)` (which makes its requests through this pool) on a daemon
        thread: a compile started ahead must not hold up interpreter exit."""
        future: Future = Future()
        future.set_running_or_notify_cancel()

        def run() -> None:
            try:
                future.set_result(function(*args))
            except BaseException as error:  # noqa: BLE001  handed to whoever waits
                future.set_exception(error)

        threading.Thread(target=run, name="lazymlir-compile-ahead", daemon=True).start()
        return future

    def close(self) -> None:
        """Stop every worker. One still compiling (a graph compiled ahead that never ran,
        e.g. the backward of a forward-only program at exit) is killed, not waited for."""
        with self._changed:
            self._closed = True
            busy = [w for w in self._workers if w not in self._idle]
            workers, self._workers, self._idle = self._workers, [], []
            self._changed.notify_all()
        for worker in busy:
            worker.abandon()
        for worker in workers:
            worker.close()
