"""The tracer's per-thread state and its TraceTime accounting.

Every route reads or updates `state`: how deep the current dispatch call is
nested (decompositions re-enter dispatch), whether a decomposition is being
captured as a template, and how many events a template could not replay.
TraceTime is added to the metrics in samples of >= 10 ms per thread
(`flush_trace_time` adds the rest): a locked metrics update per op would cost
more than a small op's recording.
"""

from __future__ import annotations

import threading
import time

from .. import session
from . import native

clock = time.perf_counter


class _State(threading.local):
    depth = 0           # nesting of dispatch calls (decompositions re-enter)
    unflushed = 0.0     # TraceTime seconds not yet added to the session's metrics
    capture_start = -1  # while a decomposition is captured: the node seq it began after
    impure = 0          # events a decomposition template cannot replay (decompose.py)


state = _State()
# TraceTime reaches the metrics in samples of at least this many seconds: a
# locked metrics update per op would cost more than a small op's recording.
TRACE_TIME_SAMPLE_S = 0.01


def depth() -> int:
    return state.depth


def flush_trace_time() -> None:
    """Add this thread's tracing time not yet counted to TraceTime, and the time the C++
    entry spent recording top-level ops itself (all threads)."""
    seconds, state.unflushed = state.unflushed, 0.0
    seconds += native.load().take_trace_time()
    if seconds:
        session.current().metrics.add_time("TraceTime", seconds)


def count_trace_time(thread_state, began: float) -> None:
    """Add a top-level op's tracing time; it reaches the metrics in samples of at
    least TRACE_TIME_SAMPLE_S (a locked update per op would cost more than the op)."""
    spent = thread_state.unflushed + (clock() - began)
    if spent < TRACE_TIME_SAMPLE_S:
        thread_state.unflushed = spent
    else:
        thread_state.unflushed = 0.0
        session.current().metrics.add_time("TraceTime", spent)
