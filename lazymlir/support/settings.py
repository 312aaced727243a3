"""Every LAZYMLIR_* setting, declared once and typed.

`from_env()` reads them; the session (lazymlir/session.py) holds the current
values, `lazymlir.config.settings()` returns them, and tests or the API may
override fields.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

_TARGETS = ("auto", "cpu", "cuda")
_CUDA_DRIVERS = ("real", "emulator", "fake")
_LOG_LEVELS = ("debug", "info", "warning", "error")
_FALLBACK = ("warn", "silent", "error")
_CPU_VECTOR_ISAS = ("avx512", "avx2")


def default_compile_workers(cores: int | None = None, environ=os.environ) -> int:
    """Two: a training step's forward and backward. One on a one-core machine. The
    processes a launcher starts on one machine (torchrun's LOCAL_WORLD_SIZE, e.g. one
    per GPU) share its cores: each gets its part."""
    local = environ.get("LOCAL_WORLD_SIZE", "")
    ranks = int(local) if local.strip().isdigit() and int(local) > 0 else 1
    return max(1, min(2, (cores or os.cpu_count() or 1) // ranks))


_DEFAULT_COMPILE_WORKERS = default_compile_workers()
_BOOLS = {"1": True, "true": True, "yes": True, "on": True,
          "0": False, "false": False, "no": False, "off": False}


@dataclass
class Settings:
    target: str = "auto"          # LAZYMLIR_TARGET: auto (cuda where usable, else cpu), cpu, cuda
    dump_dir: str | None = None   # LAZYMLIR_DUMP_DIR: write <dir>/<graph-hash>/<NN>-<stage>.<ext>
    # LAZYMLIR_CACHE_DIR: the persistent compile cache (from_env: $XDG_CACHE_HOME/lazymlir or
    # ~/.cache/lazymlir when unset; `off`: None, no disk cache)
    cache_dir: str | None = None
    cache_max_mb: int = 2048      # LAZYMLIR_CACHE_MAX_MB: the disk cache's size cap (LRU pruning)
    log_level: str = "warning"    # LAZYMLIR_LOG_LEVEL: debug|info|warning|error
    fallback: str = "warn"        # LAZYMLIR_FALLBACK: warn (once per op) | silent | error
    cuda_chip: str = "sm_90"      # LAZYMLIR_CUDA_CHIP: PTX/cubin architecture
    graph_cache_size: int = 1024  # LAZYMLIR_GRAPH_CACHE_SIZE: compiled graphs kept in memory
    repro_dir: str | None = None  # LAZYMLIR_REPRO_DIR: where failing stage inputs go (default:
    # TMPDIR/lazymlir-repros-<uid>, the newest 100 kept)
    runtime_lib: str | None = None  # LAZYMLIR_RUNTIME_LIB: the CUDA runtime .so (or its folder)
    compile_worker: bool = True   # LAZYMLIR_COMPILE_WORKER: 0 compiles in-process (debugging)
    # LAZYMLIR_COMPILE_WORKERS: compile worker processes at most (graphs known together,
    # e.g. torch.compile's forward and backward, compile at once)
    compile_workers: int = _DEFAULT_COMPILE_WORKERS
    # LAZYMLIR_COMPILE_WORKER_FORK: 0 starts each worker as a fresh interpreter (~2 s more:
    # it imports torch again) instead of forking this process
    compile_worker_fork: bool = True
    compile_timeout: int = 900    # LAZYMLIR_COMPILE_TIMEOUT: seconds before a compile is abandoned
    # LAZYMLIR_EAGER_WHILE_COMPILING: torch.compile graphs whose compile is still running
    # run eagerly (counted as EagerWhileCompiling) instead of waiting for it
    eager_while_compiling: bool = False
    bounds_checks: bool = True    # LAZYMLIR_BOUNDS_CHECKS: 0 drops the index/zero-divisor checks
    # LAZYMLIR_DYNAMIC_AFTER: a graph that changed size after compiling for this many sizes
    # compiles once with symbolic sizes for the sizes to come (execution/dynamic_policy.py;
    # 0: off, one compile per size)
    dynamic_after: int = 0
    debug: bool = False           # LAZYMLIR_DEBUG: log each compile's cause and each fallback
    # LAZYMLIR_CUDA_DRIVER: what the cuda target runs on: real (libcuda.so.1), emulator
    # (every kernel runs on the CPU), fake (host memory, launches recorded, no kernel runs)
    cuda_driver: str = "real"
    cuda_sync: bool = False       # LAZYMLIR_CUDA_SYNC: synchronize after every kernel launch
    emulator_verify: bool = False  # LAZYMLIR_CUDA_EMULATOR_VERIFY: bounds-check every access
    emulator_reverse: bool = False  # LAZYMLIR_CUDA_EMULATOR_REVERSE: run blocks last to first
    # LAZYMLIR_CPU_VECTOR_ISA: avx512|avx2, the vector ISA the CPU schedule sizes its tiles
    # for instead of the host's (lazymlir/support/host_isa.py); the compiler reads it with
    # cpu_vector_isa_from_env(), as it runs where no session exists (the compile worker)
    cpu_vector_isa: str | None = None
    # LAZYMLIR_CPU_ALLOC_CACHE_MB: MiB of freed temporaries the cpu target's caching
    # allocator keeps for reuse (0: none); applied when the allocator loads
    cpu_alloc_cache_mb: int = 1024
    # LAZYMLIR_ASYNC (default on; 0 turns it off): mark_step() hands the graph to an
    # execution thread and returns (the next step's tracing overlaps the run; a read waits
    # for it). On a quiet 2-core machine it made steps that read their loss every 8 steps
    # 17-19% faster and ones that read it every step 2-5% slower
    # (benchmarks/results/2026-11-27/async-steps-quiet.md).
    async_execution: bool = True
    # LAZYMLIR_SEGMENT_NODES: a graph of more nodes is compiled as ceil(nodes / this)
    # segments at once in the compile workers, each cached on its own (0: never split;
    # execution/partition.py's cut_points)
    segment_nodes: int = 3000
    # LAZYMLIR_DONATE (default on; 0 turns it off): a lazy-device graph writes an input's
    # new value into the input's buffer where nothing can read the old value any more
    # (tracing/donation.py), as eager updates parameters and optimizer state in place
    donate: bool = True


_ENV = {
    "target": "LAZYMLIR_TARGET",
    "dump_dir": "LAZYMLIR_DUMP_DIR",
    "cache_dir": "LAZYMLIR_CACHE_DIR",
    "cache_max_mb": "LAZYMLIR_CACHE_MAX_MB",
    "log_level": "LAZYMLIR_LOG_LEVEL",
    "fallback": "LAZYMLIR_FALLBACK",
    "cuda_chip": "LAZYMLIR_CUDA_CHIP",
    "graph_cache_size": "LAZYMLIR_GRAPH_CACHE_SIZE",
    "repro_dir": "LAZYMLIR_REPRO_DIR",
    "runtime_lib": "LAZYMLIR_RUNTIME_LIB",
    "compile_worker": "LAZYMLIR_COMPILE_WORKER",
    "compile_workers": "LAZYMLIR_COMPILE_WORKERS",
    "compile_worker_fork": "LAZYMLIR_COMPILE_WORKER_FORK",
    "compile_timeout": "LAZYMLIR_COMPILE_TIMEOUT",
    "eager_while_compiling": "LAZYMLIR_EAGER_WHILE_COMPILING",
    "bounds_checks": "LAZYMLIR_BOUNDS_CHECKS",
    "dynamic_after": "LAZYMLIR_DYNAMIC_AFTER",
    "debug": "LAZYMLIR_DEBUG",
    "cuda_driver": "LAZYMLIR_CUDA_DRIVER",
    "cuda_sync": "LAZYMLIR_CUDA_SYNC",
    "emulator_verify": "LAZYMLIR_CUDA_EMULATOR_VERIFY",
    "emulator_reverse": "LAZYMLIR_CUDA_EMULATOR_REVERSE",
    "cpu_vector_isa": "LAZYMLIR_CPU_VECTOR_ISA",
    "cpu_alloc_cache_mb": "LAZYMLIR_CPU_ALLOC_CACHE_MB",
    "async_execution": "LAZYMLIR_ASYNC",
    "segment_nodes": "LAZYMLIR_SEGMENT_NODES",
    "donate": "LAZYMLIR_DONATE",
}
# Integer settings whose smallest value is 0 rather than 1.
_ZERO_ALLOWED = {"cpu_alloc_cache_mb", "dynamic_after", "segment_nodes"}
_CHOICES = {"target": _TARGETS, "log_level": _LOG_LEVELS, "fallback": _FALLBACK,
            "cuda_driver": _CUDA_DRIVERS, "cpu_vector_isa": _CPU_VECTOR_ISAS}

CACHE_OFF = "off"  # LAZYMLIR_CACHE_DIR=off: no disk cache (a folder named off: ./off)


def default_cache_dir() -> str | None:
    """`$XDG_CACHE_HOME/lazymlir`, or `~/.cache/lazymlir` (the XDG base directory rule:
    a relative XDG_CACHE_HOME is ignored); None if there is no home folder either."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return os.path.join(xdg, "lazymlir")
    home = os.path.expanduser("~")
    if not os.path.isabs(home):  # no HOME and no passwd entry: not a folder under cwd
        return None
    return os.path.join(home, ".cache", "lazymlir")


def cache_dir_from(raw: str | None) -> str | None:
    """LAZYMLIR_CACHE_DIR's value -> the cache folder, or None for `off` (or for the
    default location when the user has no home folder)."""
    if raw is None or raw.strip() == "":
        return default_cache_dir()
    if raw.strip().lower() == CACHE_OFF:
        return None
    return os.path.expanduser(raw)


def from_env() -> Settings:
    values = {"cache_dir": cache_dir_from(os.environ.get(_ENV["cache_dir"]))}
    for f in fields(Settings):
        raw = os.environ.get(_ENV[f.name])
        if raw is None or raw == "" or f.name == "cache_dir":
            continue
        if isinstance(f.default, bool):
            if raw.lower() not in _BOOLS:
                raise ValueError(f"{_ENV[f.name]}={raw!r} is not one of: 1, 0, true, false")
            values[f.name] = _BOOLS[raw.lower()]
        elif isinstance(f.default, int):
            try:
                values[f.name] = int(raw)
            except ValueError:
                raise ValueError(f"{_ENV[f.name]}={raw!r} is not an integer") from None
            least = 0 if f.name in _ZERO_ALLOWED else 1
            if values[f.name] < least:
                raise ValueError(f"{_ENV[f.name]}={raw!r} must be at least {least}")
        else:
            values[f.name] = raw.lower() if f.name in _CHOICES else raw
        choices = _CHOICES.get(f.name)
        if choices and values[f.name] not in choices:
            raise ValueError(f"{_ENV[f.name]}={raw!r} is not one of: {', '.join(choices)}")
    settings = Settings(**values)
    for name in ("emulator_verify", "emulator_reverse"):
        if getattr(settings, name) and settings.cuda_driver != "emulator":
            raise ValueError(f"{_ENV[name]}=1 needs LAZYMLIR_CUDA_DRIVER=emulator "
                             f"(it is {settings.cuda_driver!r})")
    return settings


def cpu_vector_isa_from_env() -> str | None:
    """LAZYMLIR_CPU_VECTOR_ISA (None when unset: the host's own ISA applies)."""
    raw = os.environ.get(_ENV["cpu_vector_isa"], "").strip().lower()
    if raw and raw not in _CPU_VECTOR_ISAS:
        raise ValueError(f"{_ENV['cpu_vector_isa']}={raw!r}: expected one of "
                         f"{', '.join(_CPU_VECTOR_ISAS)}")
    return raw or None
