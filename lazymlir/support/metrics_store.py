"""Counters and timers, named as PyTorch/XLA and torch._lazy users know them.

Counters: UncachedCompile, CachedCompile, MarkStep, Sync, DiskCacheHit,
FallbackOps, CompileWorkerStart, CompilerCrash, and `aten::<op>` for each op
that ran with eager fallback. Timers: CompileTime, ExecuteTime, TraceTime
(seconds, with sample counts). One `Metrics` per session (lazymlir/session.py);
`lazymlir.metrics` is the public view of the current one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import contextmanager


class Metrics:
    """Thread-safe counters and timers."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counters: Counter[str] = Counter()
        self._timers: dict[str, list] = {}  # name -> [count, seconds]

    def inc(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counters[name] += amount

    def add_time(self, name: str, seconds: float) -> None:
        with self._lock:
            entry = self._timers.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += seconds

    @contextmanager
    def timed(self, name: str):
        began = time.perf_counter()
        try:
            yield
        finally:
            self.add_time(name, time.perf_counter() - began)

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)

    def counter(self, name: str) -> int:
        with self._lock:
            return self._counters.get(name, 0)

    def timers(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {k: {"count": v[0], "total_s": v[1]} for k, v in self._timers.items()}

    def fallback_ops(self) -> dict[str, int]:
        """The ops that ran with eager fallback, with counts ({'aten::nonzero': 2})."""
        return {k: v for k, v in self.counters().items() if k.startswith("aten::")}

    def reset(self) -> None:
        with self._lock:
            self._counters.clear()
            self._timers.clear()

    def report(self) -> str:
        lines = ["Counters:"]
        for name, value in sorted(self.counters().items()):
            lines.append(f"  {name:<24} {value}")
        lines.append("Timers:")
        for name, entry in sorted(self.timers().items()):
            count, total = entry["count"], entry["total_s"]
            mean_ms = 1e3 * total / count if count else 0.0
            lines.append(f"  {name:<24} count={count:<6} total={total * 1e3:9.1f} ms  "
                         f"mean={mean_ms:8.3f} ms")
        return "\n".join(lines)
