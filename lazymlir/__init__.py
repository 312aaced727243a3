"""lazymlir: a lazy PyTorch device (`lazy_mlir`) compiled through MLIR.

    import torch, lazymlir
    x = torch.randn(4, 4).to("lazy_mlir")   # ops on x are recorded, not run
    y = (x @ x).relu().sum()
    lazymlir.mark_step()                     # one graph: compiled once, run (in the background)
    print(y.item())

Layers (each imports only the ones below it; CI checks this with import-linter):

    api, device, opt, demo   user entry points (api: what `import lazymlir` exports)
    distributed              torch.distributed on the device and in compiled graphs
    tracing                  lazy values, tracer, graph building, sync points
    execution                graph executor, graph cache, compiler driver, compile worker
    targets                  cpu / cuda behind one Target interface
    lowering                 the stage registry (lazymlir.lowering.stages)
    session, support         settings, metrics, errors
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

# In a source checkout lowering/ and dialects/ sit beside lazymlir/ (the wheel
# installs them inside it, and an editable install maps them): let
# `lazymlir.lowering` resolve when the checkout itself is on sys.path.
if not (_Path(__file__).parent / "lowering").exists():
    _root = _Path(__file__).resolve().parent.parent
    if (_root / "lowering" / "stages.py").exists() and str(_root) not in __path__:
        __path__.append(str(_root))

__version__ = "0.2.0"


def _process_is_the_opt_tool() -> bool:
    """This process runs `lazymlir-opt` (its console script, or `python -m lazymlir.opt`).

    The tool runs lowering stages on stage files and needs neither the device nor torch
    (except for an fx graph, whose stage imports torch itself); registering the device
    imports torch and the tracer, ~3 s per process, which lit pays at every RUN line."""
    args = list(getattr(_sys, "orig_argv", ()))[1:]
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args = args[2:] if args[0] in ("-X", "-W") else args[1:]  # interpreter options
    return args[:2] == ["-m", "lazymlir.opt"] or (bool(args) and
                                                  _Path(args[0]).name == "lazymlir-opt")


if not _process_is_the_opt_tool():
    from . import config, metrics, session, targets  # noqa: E402, F401
    from .api import (  # noqa: E402
        CompileError,
        CompilerCrashError,
        ExecutionError,
        LazyMlirError,
        UnsupportedOperationError,
        bucket,
        debug,
        dump_to,
        from_dlpack,
        mark_step,
        pad_to_bucket,
        target,
        to_dlpack,
        wait,
        wait_for_compiles,
    )

__all__ = ["mark_step", "wait", "debug", "to_dlpack", "from_dlpack", "metrics", "config", "session",
           "dump_to", "wait_for_compiles", "target", "__version__", "bucket", "pad_to_bucket",
           "LazyMlirError", "CompileError", "CompilerCrashError", "ExecutionError",
           "UnsupportedOperationError"]
