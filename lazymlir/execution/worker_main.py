"""Entry point of the compile worker process (`python -m lazymlir.execution.worker_main`).

Reads (kind, payload) requests from stdin and answers on stdout (framing in
worker.py); native output is redirected to stderr (a log file the parent
reads after a crash). Replies: ("stage", name) progress messages, then
("ok", result) or ("error", exception). Exits when stdin closes.
"""

from __future__ import annotations

import os
import sys

from . import compiler
from .worker import read_message, write_message


def _serve(requests, replies) -> None:
    while True:
        message = read_message(requests)
        if message is None:
            return
        kind, payload = message

        def on_start(stage: str) -> None:
            write_message(replies, ("stage", stage))

        try:
            if kind == "compile":
                result = compiler.compile_graph(payload["fx_text"], payload["key"],
                                                payload["options"], payload["out_dir"],
                                                on_start=on_start)
            elif kind == "probe":
                result = compiler.probe(payload["fx_text"], payload["options"],
                                        on_start=on_start)
            else:
                raise ValueError(f"unknown compile worker request '{kind}'")
        except Exception as error:  # noqa: BLE001  every error goes back to the parent
            try:
                write_message(replies, ("error", error.with_traceback(None)))
            except Exception:  # noqa: BLE001  an exception that does not pickle
                write_message(replies, ("error", RuntimeError(f"{type(error).__name__}: {error}")))
            continue
        write_message(replies, ("ok", result))


def _warm_up() -> None:
    """Import both MLIR builds and torch-mlir's importer before the first request
    arrives: the worker is started early (executor.prestart_worker), so this
    overlaps with the user's tracing instead of delaying the first compile."""
    import mlir.ir  # noqa: F401
    import mlir.passmanager  # noqa: F401
    import torch_mlir.extras.fx_importer  # noqa: F401
    import torch_mlir.ir  # noqa: F401


def main() -> None:
    # Keep the protocol stream to ourselves: anything native code prints to
    # fd 1 goes to stderr (the log file) instead.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _warm_up()
    _serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
