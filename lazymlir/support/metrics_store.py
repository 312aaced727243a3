"""Counters and timers, named as PyTorch/XLA and torch._lazy users know them.

Counters: UncachedCompile, CachedCompile, MarkStep, Sync, DiskCacheHit,
FallbackOps, CompileWorkerStart, CompilerCrash, CompileRetry (a graph compiled
again after its worker crashed), and `aten::<op>` for each op
that ran with eager fallback. Timers: CompileTime, ExecuteTime, TraceTime
(seconds, with sample counts, totals and percentiles over the last
`SAMPLES` samples). One `Metrics` per session (lazymlir/session.py);
`lazymlir.metrics` is the public view of the current one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from contextlib import contextmanager

SAMPLES = 4096  # per timer, the most recent samples kept for percentiles


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, nearest rank."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


class Metrics:
    """Thread-safe counters and timers."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counters: Counter[str] = Counter()
        self._timers: dict[str, list] = {}  # name -> [count, seconds, recent samples]

    def inc(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counters[name] += amount

    def add_time(self, name: str, seconds: float) -> None:
        with self._lock:
            entry = self._timers.get(name)
            if entry is None:
                entry = self._timers[name] = [0, 0.0, deque(maxlen=SAMPLES)]
            entry[0] += 1
            entry[1] += seconds
            entry[2].append(seconds)

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
        """Per timer: count, total_s, and p50_s/p90_s/p99_s/max_s of the recent samples."""
        with self._lock:
            entries = {k: (v[0], v[1], sorted(v[2])) for k, v in self._timers.items()}
        return {k: {"count": count, "total_s": total,
                    **{f"p{q}_s": percentile(samples, q) for q in (50, 90, 99)},
                    "max_s": samples[-1] if samples else 0.0}
                for k, (count, total, samples) in entries.items()}

    def fallback_ops(self) -> dict[str, int]:
        """The ops that ran with eager fallback, with counts ({'aten::nonzero': 2}): the
        counters named by an op's qualified name (`namespace::op`, custom ops too)."""
        return {k: v for k, v in self.counters().items() if "::" in k}

    def reset(self) -> None:
        with self._lock:
            self._counters.clear()
            self._timers.clear()

    def report(self) -> str:
        lines = ["Counters:"]
        for name, value in sorted(self.counters().items()):
            if "::" not in name:  # op counters (ns::op): under "Fallback ops" below
                lines.append(f"  {name:<24} {value}")
        lines.append(f"Timers (ms; percentiles over the last {SAMPLES} samples):")
        for name, entry in sorted(self.timers().items()):
            count, total = entry["count"], entry["total_s"]
            mean_ms = 1e3 * total / count if count else 0.0
            lines.append(f"  {name:<24} count={count:<6} total={total * 1e3:9.1f}  "
                         f"mean={mean_ms:8.3f}  p50={entry['p50_s'] * 1e3:8.3f}  "
                         f"p90={entry['p90_s'] * 1e3:8.3f}  p99={entry['p99_s'] * 1e3:8.3f}  "
                         f"max={entry['max_s'] * 1e3:8.3f}")
        fallbacks = self.fallback_ops()
        lines.append("Fallback ops (ran eagerly on CPU):" + ("" if fallbacks else " none"))
        for name, value in sorted(fallbacks.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {name:<24} {value}")
        return "\n".join(lines)
