"""The compile worker: MLIR stages run in a child process, so a native crash
(segfault, abort, LLVM fatal error) in torch-mlir/MLIR/LLVM cannot kill the
user's Python process.

One persistent worker per session, started on the first cache miss (cache hits
never touch it). Requests and replies are pickled, length-prefixed messages on
the worker's stdin/stdout; the worker's own stdout/stderr go to a log file, so
compiler noise never reaches the user's terminal and the tail of that log is
quoted when the worker dies. The worker reports each stage as it starts, so a
crash names the stage it happened in. After a crash the next request starts a
fresh worker. LAZYMLIR_COMPILE_WORKER=0 compiles in-process instead (for
debugging with gdb; a crash then kills the process).
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..support.errors import CompilerCrashError
from . import compiler

log = logging.getLogger("lazymlir.worker")

_HEADER = struct.Struct("<Q")


def write_message(stream, message) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:  # an unbuffered pipe may take part of it
        data = data[stream.write(data):]
    stream.flush()


def _read_exact(stream, size: int) -> bytes:
    """`size` bytes, fewer only at end of stream (an unbuffered pipe returns short reads)."""
    chunks, have = [], 0
    while have < size:
        chunk = stream.read(size - have)
        if not chunk:
            break
        chunks.append(chunk)
        have += len(chunk)
    return b"".join(chunks)


def read_message(stream):
    """The next message, or None at end of stream (the other side is gone)."""
    header = _read_exact(stream, _HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    payload = _read_exact(stream, size)
    if len(payload) < size:
        return None
    return pickle.loads(payload)


def _wait_readable(stream, deadline: float) -> bool:
    """Whether `stream` has data before `deadline` (time.monotonic())."""
    remaining = max(0.0, deadline - time.monotonic())
    ready, _, _ = select.select([stream], [], [], remaining)
    return bool(ready)


def _signal_name(returncode: int | None) -> str:
    if returncode is None:
        return "no exit status"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


class CompileWorker:
    """Client side of one worker process; thread-safe; restarts after a crash."""

    module = "lazymlir.execution.worker_main"  # what the child runs (`python -m module`)

    def __init__(self, metrics=None, timeout: float | None = None):
        self._metrics = metrics
        self.timeout = timeout  # seconds per request; None waits forever
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._log_path: Path | None = None
        self.starts = 0

    def _start(self) -> None:
        fd, log_path = tempfile.mkstemp(prefix="lazymlir-worker-", suffix=".log")
        self._log_path = Path(log_path)
        env = dict(os.environ)
        env["LAZYMLIR_COMPILE_WORKER"] = "0"  # the worker compiles in its own process
        with os.fdopen(fd, "wb") as log_file:
            # Unbuffered replies: the deadline wait selects on the pipe, which cannot see
            # messages already read ahead into a buffer (a reply stuck there hung the
            # client until the timeout while the worker waited for the next request).
            self._process = subprocess.Popen(
                [sys.executable, "-m", self.module], bufsize=0,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, env=env)
        self.starts += 1
        if self._metrics is not None:
            self._metrics.inc("CompileWorkerStart")

    def start(self) -> None:
        """Start the process now (it imports the compiler while the user traces)."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()

    def request(self, kind: str, payload: dict):
        """Send one request; returns the worker's result or raises its error.

        A worker that dies mid-request raises CompilerCrashError (stage, signal,
        log tail); the next request starts a new worker.
        """
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            process = self._process
            stage = None
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            try:
                write_message(process.stdin, (kind, payload))
                while True:
                    if deadline is not None and not _wait_readable(process.stdout, deadline):
                        process.kill()  # a hung pass: give up on this compile
                        process.wait()
                        self._process = None
                        raise self._crash_error(kind, payload, stage, None, timed_out=True)
                    message = read_message(process.stdout)
                    if message is None:
                        break
                    tag, body = message
                    if tag == "stage":
                        stage = body
                        continue
                    if tag == "ok":
                        return body
                    raise body  # an exception object pickled by the worker
            except (BrokenPipeError, OSError):
                pass
            # The worker died: collect its exit status and the tail of its log.
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            self._process = None
            if self._metrics is not None:
                self._metrics.inc("CompilerCrash")
            raise self._crash_error(kind, payload, stage, process.returncode)

    def _crash_error(self, kind, payload, stage, returncode,
                     timed_out: bool = False) -> CompilerCrashError:
        tail = ""
        if self._log_path is not None and self._log_path.exists():
            lines = self._log_path.read_text(errors="replace").strip().splitlines()
            tail = "\n".join(lines[-8:])
            self._log_path.unlink()
            self._log_path = None
        options = payload["options"]
        repro = compiler.save_repro_input(payload["fx_text"], options)
        command = f"lazymlir-opt --target={options.target} {repro}"
        where = f" in stage '{stage}'" if stage else ""
        what = (f"did not finish{where} within {self.timeout:g} s (LAZYMLIR_COMPILE_TIMEOUT)"
                if timed_out else f"crashed{where} ({_signal_name(returncode)})")
        message = (f"the MLIR compiler {what} while "
                   f"{'probing an op' if kind == 'probe' else 'compiling a graph'} for target "
                   f"{options.target}; your process is unaffected and the next compile starts "
                   f"a fresh compiler process.")
        if tail:
            message += "\ncompiler output:\n" + tail
        message += f"\nreproduce with: {command}"
        return CompilerCrashError(message, stage=stage, target=options.target,
                                  reproducer=command)

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is not None and process.poll() is None:
            try:
                process.stdin.close()
                process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None
