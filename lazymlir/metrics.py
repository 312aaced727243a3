"""Public view of the current session's counters and timers (PyTorch/XLA names).

    lazymlir.metrics.counters()   # {'UncachedCompile': 1, 'CachedCompile': 4, 'aten::nonzero': 1}
    lazymlir.metrics.report()     # a printable table
"""

from __future__ import annotations

from . import session


def counters() -> dict[str, int]:
    return session.current().metrics.counters()


def counter(name: str) -> int:
    return session.current().metrics.counter(name)


def timers() -> dict[str, dict[str, float]]:
    return session.current().metrics.timers()


def fallback_ops() -> dict[str, int]:
    """The ops that ran with eager fallback, with counts ({'aten::nonzero': 2})."""
    return session.current().metrics.fallback_ops()


def reset() -> None:
    session.current().metrics.reset()


def report() -> str:
    return session.current().metrics.report()
