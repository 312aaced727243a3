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
    """Counters, timers (totals and percentiles), fallback ops per op, the graph cache's
    size and, on a device with its own memory, the memory in use."""
    current = session.current()
    lines = [current.metrics.report()]
    cache = current.graph_cache
    capacity = current.settings.graph_cache_size
    disk = current.settings.cache_dir or "off"
    opened = current.disk_cache  # (folder, cache or None if it could not be written)
    if opened is not None and opened[0] == current.settings.cache_dir and opened[1] is None \
            and opened[0] is not None:
        disk += " (not writable: off)"
    lines.append(f"Graph cache: {len(cache) if cache is not None else 0} of {capacity} "
                 f"plans in memory; disk cache: {disk}")
    lines.append(f"Device memory: {_device_memory(current.target)}")
    return "\n".join(lines)


def _device_memory(target) -> str:
    """The cuda target's caching allocator statistics; the cpu target's tensors are host
    memory (no device memory to report)."""
    stats = getattr(getattr(target, "runtime", None), "allocator_stats", None)
    if stats is None:
        name = getattr(target, "name", None) or "no target yet"
        if name != "cpu":
            return f"n/a ({name})"
        line = "n/a (cpu: values are host tensors)"
        temporaries = target.temporaries_stats()
        if temporaries is not None:
            line += (f"; compiled graphs' temporaries: "
                     f"{temporaries['bytes_cached'] / 2**20:.1f} MiB kept for reuse, "
                     f"{temporaries['hits']} reused and {temporaries['misses']} fresh blocks")
        return line
    values = stats()
    peak = values.get("bytes_peak")
    return (f"{values['bytes_in_use'] / 2**20:.1f} MiB in use, "
            f"{values['bytes_cached'] / 2**20:.1f} MiB cached by the allocator"
            + (f", peak {peak / 2**20:.1f} MiB" if peak is not None
               else " (the runtime keeps no peak)"))
