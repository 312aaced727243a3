"""Counters and timers, named as PyTorch/XLA and torch._lazy users know them.

Counters: UncachedCompile, CachedCompile, MarkStep, Sync, DiskCacheHit,
FallbackOps, and `aten::<op>` for each op that ran with eager fallback.
Timers: CompileTime, ExecuteTime, TraceTime (seconds, with sample counts).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from contextlib import contextmanager

_lock = threading.Lock()
_counters: Counter[str] = Counter()
_timers: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])  # name -> [count, seconds]


def inc(name: str, amount: int = 1) -> None:
    with _lock:
        _counters[name] += amount


def add_time(name: str, seconds: float) -> None:
    with _lock:
        entry = _timers[name]
        entry[0] += 1
        entry[1] += seconds


@contextmanager
def timed(name: str):
    began = time.perf_counter()
    try:
        yield
    finally:
        add_time(name, time.perf_counter() - began)


def counters() -> dict[str, int]:
    with _lock:
        return dict(_counters)


def counter(name: str) -> int:
    with _lock:
        return _counters.get(name, 0)


def timers() -> dict[str, dict[str, float]]:
    with _lock:
        return {k: {"count": v[0], "total_s": v[1]} for k, v in _timers.items()}


def fallback_ops() -> dict[str, int]:
    """The ops that ran with eager fallback, with counts ({'aten::nonzero': 2})."""
    return {k: v for k, v in counters().items() if k.startswith("aten::")}


def reset() -> None:
    with _lock:
        _counters.clear()
        _timers.clear()


def report() -> str:
    lines = ["Counters:"]
    for name, value in sorted(counters().items()):
        lines.append(f"  {name:<24} {value}")
    lines.append("Timers:")
    for name, entry in sorted(timers().items()):
        count, total = entry["count"], entry["total_s"]
        mean_ms = 1e3 * total / count if count else 0.0
        lines.append(f"  {name:<24} count={count:<6} total={total * 1e3:9.1f} ms  "
                     f"mean={mean_ms:8.3f} ms")
    return "\n".join(lines)
