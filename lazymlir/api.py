"""The device's Python API, which `import lazymlir` re-exports. Importing this module
registers the `lazy_mlir` device with PyTorch, installs torch.distributed's support for it
and configures logging from the settings."""

from __future__ import annotations

import logging as _logging

from . import config, metrics, session, targets
from .buckets import bucket, pad_to_bucket
from .device import register as _register
from .distributed import install as _install_distributed
from .dlpack import from_dlpack, to_dlpack
from .execution import diagnostics as _diagnostics
from .execution.executor import dump_to, wait_for_compiles
from .support.errors import (
    CompileError,
    CompilerCrashError,
    ExecutionError,
    LazyMlirError,
    UnsupportedOperationError,
)
from .tracing.materialize import mark_step, wait

_register()
_install_distributed()


def target() -> str:
    """The resolved compile target: 'cpu' or 'cuda'."""
    return targets.active().name


def debug(enable: bool = True) -> None:
    """Log why each graph compiles (cause, hash, sizes, the sync's source line) and each
    eager fallback with its reason, to stderr; same as LAZYMLIR_DEBUG=1."""
    config.settings().debug = enable
    _diagnostics.enable(enable)


def _configure_logging() -> None:
    level = getattr(_logging, config.settings().log_level.upper(), _logging.WARNING)
    _logging.getLogger("lazymlir").setLevel(level)
    if config.settings().debug:
        _diagnostics.enable(True)


_configure_logging()

__all__ = ["mark_step", "wait", "debug", "to_dlpack", "from_dlpack", "metrics", "config", "session",
           "dump_to", "wait_for_compiles", "target", "bucket", "pad_to_bucket", "LazyMlirError",
           "CompileError", "CompilerCrashError", "ExecutionError", "UnsupportedOperationError"]
