"""lazymlir: a lazy PyTorch device (`lazy_mlir`) compiled through MLIR.

    import torch, lazymlir
    x = torch.randn(4, 4).to("lazy_mlir")   # ops on x are recorded, not run
    y = (x @ x).relu().sum()
    lazymlir.mark_step()                     # one graph: compiled once, run (in the background)
    print(y.item())

Layers (each imports only the ones below it; CI checks this with import-linter):

    device, opt, demo        user entry points
    distributed              torch.distributed on the device and in compiled graphs
    tracing                  lazy values, tracer, graph building, sync points
    execution                graph executor, graph cache, compiler driver, compile worker
    targets                  cpu / cuda behind one Target interface
    lowering                 the stage registry (lazymlir.lowering.stages)
    session, support         settings, metrics, errors
"""

from __future__ import annotations

import logging as _logging
from pathlib import Path as _Path

# In a source checkout lowering/ and dialects/ sit beside lazymlir/ (the wheel
# installs them inside it, and an editable install maps them): let
# `lazymlir.lowering` resolve when the checkout itself is on sys.path.
if not (_Path(__file__).parent / "lowering").exists():
    _root = _Path(__file__).resolve().parent.parent
    if (_root / "lowering" / "stages.py").exists() and str(_root) not in __path__:
        __path__.append(str(_root))

from . import config, metrics, session, targets  # noqa: E402
from .buckets import bucket, pad_to_bucket  # noqa: E402
from .device import register as _register  # noqa: E402
from .distributed import install as _install_distributed  # noqa: E402
from .dlpack import from_dlpack, to_dlpack  # noqa: E402
from .execution import diagnostics as _diagnostics  # noqa: E402
from .execution.executor import dump_to, wait_for_compiles  # noqa: E402
from .support.errors import (  # noqa: E402
    CompileError,
    CompilerCrashError,
    ExecutionError,
    LazyMlirError,
    UnsupportedOperationError,
)
from .tracing.materialize import mark_step, wait  # noqa: E402

__version__ = "0.2.0"

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
           "dump_to", "wait_for_compiles", "target", "__version__", "bucket", "pad_to_bucket",
           "LazyMlirError", "CompileError", "CompilerCrashError", "ExecutionError",
           "UnsupportedOperationError"]
