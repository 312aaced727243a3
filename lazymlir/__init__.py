"""lazymlir: a lazy PyTorch device (`lazy_mlir`) compiled through MLIR.

    import torch, lazymlir
    x = torch.randn(4, 4).to("lazy_mlir")   # ops on x are recorded, not run
    y = (x @ x).relu().sum()
    lazymlir.mark_step()                     # one graph: compiled once, run
    print(y.item())

Pipeline stages are listed in one place: lazymlir.lowering.stages.
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

from . import config, metrics
from .compiler import dump_to
from .device import register as _register

__version__ = "0.1.0"

_register()


def mark_step() -> None:
    """Compile (cached) and run everything pending for live lazy_mlir tensors, as one graph."""
    from .sync import mark_step as _mark_step

    _mark_step()


def target() -> str:
    """The resolved compile target: 'cpu' or 'cuda'."""
    from . import backend

    return backend.target()


def _configure_logging() -> None:
    level = getattr(_logging, config.settings().log_level.upper(), _logging.WARNING)
    _logging.getLogger("lazymlir").setLevel(level)


_configure_logging()

__all__ = ["mark_step", "metrics", "config", "dump_to", "target", "__version__"]
