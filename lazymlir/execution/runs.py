"""Graph runs in the background: `mark_step()` launches a graph, a read waits for it.

One execution thread per session runs the graphs `mark_step()` launches, one at a
time, in launch order, so a graph whose inputs are outputs of an earlier launch
finds them computed (or failed) when its turn comes. The compiled code is called
through ctypes, which releases the GIL: the next step's tracing in Python overlaps
the previous step's run.

A graph the target can start on a native thread of its own (`launch_started`: one
compiled cpu graph, or a big graph's compiled segments as one chain of calls:
segment_chain.py) skips the execution thread: the user's thread prepares the calls
and hands them over, and the thread that next waits for them binds the outputs. The
execution thread needed the GIL before and after each call while the user's thread
held it to trace the next step, and CPython hands the GIL over every 5 ms: the two
threads stalled each other, and background runs bought nothing (targets/
cpu_background.py has the measurement).

At most `IN_FLIGHT` graphs are launched and not finished: a launch beyond that waits
for the oldest, which bounds memory (each run holds its inputs and outputs) and keeps
the tracer at most one step ahead.

Errors of a background run are kept on its values (the tracing layer's `done`
callback marks them failed: reading one raises the error) and also raised once by
the next wait point (`take_error`: any sync point, `lazymlir.wait()`), with a note
naming the graph, so an error nobody reads is not lost. A run whose input failed in
the background (`FailedInput`) fails with that input's error, which is not raised a
second time. Nothing here kills the process: the thread catches everything.

A thread that must wait for the run at the head of the queue while the execution
thread has not started it (not scheduled since the launch, on a busy machine) runs
it itself, in the same order: a read right after `mark_step()` costs no wake-up.

The execution thread's OpenMP team: compiled loops fork on the calling thread's
libgomp team (targets/cpu_threads.py); a thread that is not one of PyTorch's starts
with OpenMP's default thread count, so each run carries `torch.get_num_threads()`
of the thread that launched it.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from collections.abc import Callable

import torch

from .. import session

log = logging.getLogger("lazymlir.runs")

IN_FLIGHT = 1  # launched graphs not finished, at most (a launch beyond waits)
_STARTED = -1  # in a queued item's thread count: started on a native thread


class FailedInput(Exception):
    """Raised by a run's input resolver: an input's own graph failed (`error`)."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class Run:
    """One launched graph; `done()` once it has run and its outputs are bound (its
    runner's `wait_for` waits for that)."""

    # A flag the runner sets under its lock, not a threading.Event: an Event is a
    # Condition and a lock made in Python, ~26 us of a small graph's mark_step() with
    # the caches cold after tracing; the runner's condition already wakes waiters.
    __slots__ = ("label", "error", "finished", "early_output", "values")

    def __init__(self, label: str):
        self.label = label
        self.error: BaseException | None = None
        self.finished = False
        # Set by whoever starts and launches it: `early_output(k)`, output k once the
        # code has signaled it final (executor.py), and the values it binds, in output
        # order (tracing/materialize.py).
        self.early_output = None
        self.values: list = []

    def done(self) -> bool:
        return self.finished


class Runner:
    """The execution thread of a session and its queue of launched runs.

    The queue's head is the run in progress, or the next one. A thread that has to
    wait for the head while the execution thread has not taken it yet (it has not
    been scheduled since the launch: a busy machine) runs it itself instead
    (`_claim`): the same order, without waiting for a wake-up."""

    def __init__(self, in_flight: int = IN_FLIGHT, thread: bool = True):
        """`thread`: False starts no execution thread: runs happen on the threads that
        wait for them (tests use it to stand for a thread never scheduled)."""
        self.in_flight = in_flight
        self._start_thread = thread
        self._queue: collections.deque = collections.deque()
        self._claimed = False  # the head is being run (by the execution thread or not)
        # One lock, two conditions: `_changed` wakes the threads waiting for runs to
        # finish, `_work` the execution thread when there is a run it may take. Waking
        # the execution thread when a run ends and nothing is queued (a step's
        # `mark_step(); wait()`, whose run the waiting thread took) only made it sleep
        # again: two scheduler round trips per step on a busy machine.
        lock = threading.RLock()
        self._changed = threading.Condition(lock)
        self._work = threading.Condition(lock)
        self._thread: threading.Thread | None = None
        self._unreported: list[Run] = []
        self._threads = 0  # the OpenMP thread count set on the execution thread

    def launch(self, run: Run, job: Callable[[], list],
               done: Callable[[list | None, BaseException | None], None]) -> None:
        """Queue `job()` (-> outputs) as `run`, after every earlier launch; `done(outputs,
        error)` binds its outcome before the run counts as finished. Waits first while
        `in_flight` runs are unfinished."""
        threads = torch.get_num_threads()
        self._wait_until(lambda: len(self._queue) < self.in_flight)
        with self._changed:
            if self._thread is None and self._start_thread:
                self._thread = threading.Thread(target=self._loop, name="lazymlir-run",
                                                daemon=True)
                self._thread.start()
            self._queue.append((run, job, done, threads))
            self._work.notify()

    def launch_started(self, run: Run, start: Callable[[], Callable[[], list]],
                       done: Callable[[list | None, BaseException | None], None]) -> None:
        """Queue `run`, started here by `start()` on a native thread that never takes the
        GIL; `start` returns a function that waits for its outputs (with the GIL released).
        Every earlier launch finishes first (their outputs are its inputs, resolved by
        `start`). Whichever thread next waits for it (the next launch, a read, `drain`)
        binds its outcome, on that thread: the execution thread takes no part."""
        self._wait_until(lambda: not self._queue)
        try:
            finish = start()
        # Not BaseException: an interrupt leaves the run unqueued (its values pending).
        except Exception as error:  # an input's graph failed, or the call did not start
            def failed(error=error):
                raise error
            self._run(run, failed, done)
            with self._changed:
                run.finished = True
            return
        with self._changed:
            self._queue.append((run, finish, done, _STARTED))

    def wait_for(self, run: Run) -> None:
        """Return once `run` has finished."""
        if not run.done():
            self._wait_until(run.done)

    def drain(self) -> None:
        """Wait until every launched run has finished (errors stay for `take_error`)."""
        self._wait_until(lambda: not self._queue)

    def take_error(self) -> BaseException | None:
        """The error of the oldest failed run not reported yet (now reported), or None."""
        with self._changed:
            return self._unreported.pop(0).error if self._unreported else None

    def reported(self, error: BaseException) -> None:
        """`error` reached the user another way (a read of a failed value): not again."""
        with self._changed:
            self._unreported = [r for r in self._unreported if r.error is not error]

    def close(self) -> None:
        """Finish the launched runs and end the thread (an error nobody took is logged)."""
        self.drain()
        with self._changed:
            thread, self._thread = self._thread, None
            if thread is not None:
                self._queue.append(None)
                self._work.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        for run in self._unreported:
            log.warning("lazymlir: graph %s failed in the background and nothing read its "
                        "values: %s: %s", run.label, type(run.error).__name__, run.error)
        self._unreported = []

    def _wait_until(self, ready: Callable[[], bool]) -> None:
        while True:
            with self._changed:
                # (The head is None only while closing: the execution thread's to take.)
                while not ready() and (self._claimed or self._queue[0] is None):
                    self._changed.wait()
                if ready():
                    return
                item = self._claim()
            self._execute(item, on_user_thread=True)

    def _claim(self):
        """Take the head to run it (the lock held; the head is not claimed)."""
        self._claimed = True
        return self._queue[0]

    def _execute(self, item, on_user_thread: bool = False) -> None:
        run, job, done, threads = item
        try:
            self._run(run, job, done)
        finally:
            with self._changed:
                self._queue.popleft()
                self._claimed = False
                run.finished = True
                # A finished run may stay referenced a while: it lets go of its call (whose
                # output buffers donation.py must find held by their values alone).
                run.early_output, run.values = None, []
                self._changed.notify_all()
                if self._queue:  # the next run, for the execution thread
                    self._work.notify()
        if on_user_thread and run.error is not None and not isinstance(run.error, Exception):
            raise run.error  # an interrupt (Ctrl-C) of a run on the user's thread

    def _loop(self) -> None:
        while True:
            with self._changed:
                # (A run started on a native thread is bound by a thread waiting for it.)
                while not self._queue or self._claimed or \
                        (self._queue[0] is not None and self._queue[0][3] == _STARTED):
                    self._work.wait()
                item = self._claim()
            if item is None:
                with self._changed:
                    self._queue.popleft()
                    self._claimed = False
                    self._changed.notify_all()
                return
            threads = item[3]
            if threads != self._threads:
                torch.set_num_threads(threads)
                self._threads = threads
            self._execute(item)

    def _run(self, run: Run, job, done) -> None:
        outputs, error, fresh = None, None, True
        try:
            outputs = job()
        except FailedInput as failed:
            error, fresh = failed.error, False
        except BaseException as raised:  # noqa: BLE001  kept for the reader, never lost
            error = raised
        try:
            done(outputs, error)
        except BaseException as raised:  # noqa: BLE001
            log.exception("lazymlir: binding the outputs of graph %s failed", run.label)
            error = error or raised
        if error is not None:
            run.error = error
            if fresh:
                note = (f"lazymlir: raised by graph {run.label}, which ran in the background "
                        "after mark_step() (without LAZYMLIR_ASYNC=1 it runs at mark_step())")
                # add_note: Python 3.11+ (on 3.10 the error goes without the note).
                if hasattr(error, "add_note") and note not in getattr(error, "__notes__", ()):
                    error.add_note(note)
                with self._changed:
                    self._unreported.append(run)


def runner(current) -> Runner:
    """The session's runner (made on first use)."""
    if current.runs is None:
        current.runs = Runner()
    return current.runs


def _forget_in_child() -> None:
    # A forked child (a compile worker, a DataLoader worker) has no execution thread,
    # and may hold a copy of the queue's lock taken: it starts without a runner.
    session.current().runs = None


os.register_at_fork(after_in_child=_forget_in_child)
