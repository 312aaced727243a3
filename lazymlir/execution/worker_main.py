"""Entry point of the compile worker process (`python -m lazymlir.execution.worker_main`).

Reads (kind, payload) requests from stdin and answers on stdout (framing in
worker_protocol.py); native output is redirected to stderr (a log file the parent
reads after a crash). Replies: ("stage", name) progress messages, then
("ok", result) or ("error", exception). Exits when stdin closes.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from . import compiler
from .worker_protocol import NICENESS_VARIABLE, read_message, write_message


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


# A tiny graph (matmul, relu, mean) for _warm_up to lower.
_WARM_UP_GRAPH = json.dumps({
    "format": "lazymlir-fx", "version": 2, "scalars": [],
    "inputs": [{"shape": [8, 8], "dtype": "float32"}] * 2,
    "nodes": [
        {"op": "aten.mm.default", "args": [{"ref": ["input", 0, 0]}, {"ref": ["input", 1, 0]}],
         "kwargs": {}, "outputs": [{"shape": [8, 8], "dtype": "float32"}]},
        {"op": "aten.relu.default", "args": [{"ref": ["node", 0, 0]}], "kwargs": {},
         "outputs": [{"shape": [8, 8], "dtype": "float32"}]},
        {"op": "aten.mean.default", "args": [{"ref": ["node", 1, 0]}], "kwargs": {},
         "outputs": [{"shape": [], "dtype": "float32"}]}],
    "outputs": [{"ref": ["node", 1, 0]}, {"ref": ["node", 2, 0]}]})


def _warm_up() -> None:
    """Import both MLIR builds and torch-mlir's importer, and lower a tiny graph up to
    the `linalg` stage (the stages every target shares), before the first request
    arrives: the worker is started early (executor.prestart_worker), so this
    overlaps with the user's tracing instead of delaying the first compile.

    Why the tiny graph: without it a forked worker's first compile spends ~0.25 s
    more in the `torch` stage and ~0.13 s more in `linalg` than its later ones (the
    MLP step's forward graph: 286 and 141 ms, against 36 and 15 ms for the next
    graph) on one-time work: torch-mlir's first import of a graph, pass registration.
    A failure here is only logged: the first request then pays that work itself."""
    import mlir.ir  # noqa: F401
    import mlir.passmanager  # noqa: F401
    import torch_mlir.extras.fx_importer  # noqa: F401
    import torch_mlir.ir  # noqa: F401

    from ..lowering import stages

    try:
        stages.run_stages(_WARM_UP_GRAPH, stages.Options(target="cpu"), start="fx",
                          stop="linalg")
    except Exception as error:  # noqa: BLE001
        print(f"lazymlir compile worker: warm-up failed: {error}", file=sys.stderr)


def main() -> None:
    # Ctrl-C in the terminal reaches the whole process group: it is the user's program's
    # to handle (the client kills this worker); here it would become a
    # KeyboardInterrupt reply, read later as some compile's result.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    niceness = int(os.environ.pop(NICENESS_VARIABLE, "0"))
    if niceness:  # a background worker (worker_pool.py); its opt and llc inherit it
        os.nice(niceness)
    # Keep the protocol stream to ourselves: anything native code prints to
    # fd 1 goes to stderr (the log file) instead.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _warm_up()
    _serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
