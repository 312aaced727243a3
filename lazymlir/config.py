"""Every LAZYMLIR_* setting, declared once and typed.

Read from the environment when first needed; `lazymlir.config.settings()`
returns the current values, and tests or the API may override fields.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

_TARGETS = ("auto", "cpu", "cuda")
_LOG_LEVELS = ("debug", "info", "warning", "error")
_FALLBACK = ("warn", "silent", "error")


@dataclass
class Settings:
    target: str = "auto"          # LAZYMLIR_TARGET: auto (cuda where usable, else cpu), cpu, cuda
    dump_dir: str | None = None   # LAZYMLIR_DUMP_DIR: write <dir>/<graph-hash>/<NN>-<stage>.<ext>
    cache_dir: str | None = None  # LAZYMLIR_CACHE_DIR: on-disk cache of compiled executables
    log_level: str = "warning"    # LAZYMLIR_LOG_LEVEL: debug|info|warning|error
    fallback: str = "warn"        # LAZYMLIR_FALLBACK: warn (once per op) | silent | error
    cuda_chip: str = "sm_90"      # LAZYMLIR_CUDA_CHIP: PTX/cubin architecture
    graph_cache_size: int = 1024  # LAZYMLIR_GRAPH_CACHE_SIZE: compiled graphs kept in memory


_ENV = {
    "target": "LAZYMLIR_TARGET",
    "dump_dir": "LAZYMLIR_DUMP_DIR",
    "cache_dir": "LAZYMLIR_CACHE_DIR",
    "log_level": "LAZYMLIR_LOG_LEVEL",
    "fallback": "LAZYMLIR_FALLBACK",
    "cuda_chip": "LAZYMLIR_CUDA_CHIP",
    "graph_cache_size": "LAZYMLIR_GRAPH_CACHE_SIZE",
}
_CHOICES = {"target": _TARGETS, "log_level": _LOG_LEVELS, "fallback": _FALLBACK}

_current: Settings | None = None


def _from_env() -> Settings:
    values = {}
    for f in fields(Settings):
        raw = os.environ.get(_ENV[f.name])
        if raw is None or raw == "":
            continue
        if f.type == "int" or isinstance(f.default, int):
            try:
                values[f.name] = int(raw)
            except ValueError:
                raise ValueError(f"{_ENV[f.name]}={raw!r} is not an integer") from None
        else:
            values[f.name] = raw.lower() if f.name in _CHOICES else raw
        choices = _CHOICES.get(f.name)
        if choices and values[f.name] not in choices:
            raise ValueError(f"{_ENV[f.name]}={raw!r} is not one of: {', '.join(choices)}")
    return Settings(**values)


def settings() -> Settings:
    global _current
    if _current is None:
        _current = _from_env()
    return _current


def reload() -> Settings:
    """Re-read the environment (tests change it)."""
    global _current
    _current = None
    return settings()


def env_var(field_name: str) -> str:
    return _ENV[field_name]
