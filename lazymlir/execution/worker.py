"""The compile worker: MLIR stages run in a child process, so a native crash
(segfault, abort, LLVM fatal error) in torch-mlir/MLIR/LLVM cannot kill the
user's Python process.

A session's workers (worker_pool.py) start on the first cache miss (cache hits
never touch them), forked from this process (LAZYMLIR_COMPILE_WORKER_FORK=0: a
fresh `python -m lazymlir.execution.worker_main`). Requests and replies are
pickled, length-prefixed messages on the worker's stdin/stdout; the worker's own
stdout/stderr go to a log file, so compiler noise never reaches the user's
terminal and the tail of that log is quoted when the worker dies. The worker
reports each stage as it starts, so a crash names the stage it happened in.
After a crash the next request starts a fresh worker. LAZYMLIR_COMPILE_WORKER=0
compiles in-process instead (for debugging with gdb; a crash then kills the
process).
"""

from __future__ import annotations

import gc
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from ..support.errors import CompilerCrashError
from . import compiler
from .worker_protocol import NICENESS_VARIABLE, read_message, write_message

log = logging.getLogger("lazymlir.worker")

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


class _ForkedProcess:
    """The subprocess.Popen surface CompileWorker uses, for a child made by os.fork()."""

    def __init__(self, pid: int, stdin, stdout):
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"compile worker {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _fork_worker(log_fd: int, niceness: int = 0) -> _ForkedProcess:
    """A worker forked from this process: it has torch and lazymlir imported already,
    so it is ready after importing the MLIR bindings (~0.3 s) instead of a fresh
    interpreter's ~2.4 s (torch, lazymlir, torch-mlir), which a short torch.compile
    run would otherwise wait for.

    The child keeps only its pipes and log (other inherited descriptors are closed:
    another worker's request pipe held open here would hide its end of input), runs
    torch on one thread (this process's OpenMP pool did not survive the fork), never
    collects objects inherited from the parent (a file object finalized here would
    close a descriptor number the child reuses), and leaves with os._exit: nothing
    of the parent (atexit hooks, finalizers) runs in it.
    """
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    try:
        with warnings.catch_warnings():
            # Python >= 3.12 warns on fork with threads alive (here PyTorch's OpenMP
            # pool); the child runs on one thread and enters no OpenMP region.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        for fd in (request_read, request_write, reply_read, reply_write):
            os.close(fd)
        raise
    if pid == 0:  # the child: never returns
        code = 1
        try:
            if niceness:  # first: the threads started below inherit it
                os.nice(niceness)
            gc.freeze()
            os.dup2(request_read, 0)
            os.dup2(reply_write, 1)
            os.dup2(log_fd, 2)
            os.closerange(3, _max_fd())
            os.environ["LAZYMLIR_COMPILE_WORKER"] = "0"
            import torch

            torch.set_num_threads(1)
            # Imported here, not at the top: `python -m ...worker_main` imports this
            # module through the package, and runpy warns when the module it is about
            # to run is already in sys.modules.
            from . import worker_main

            # The parent's sys streams may be anything (pytest's capture, a notebook's):
            # the child's are its descriptors 0 (requests) and 2 (the log).
            sys.stdin = open(0, closefd=False)  # noqa: SIM115  live as long as the child
            sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
            worker_main.main()
            code = 0
        except BaseException:  # noqa: BLE001  reported through the log; exit either way
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(request_read)
    os.close(reply_write)
    return _ForkedProcess(pid, os.fdopen(request_write, "wb", buffering=0),
                          os.fdopen(reply_read, "rb", buffering=0))


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        return 4096


class CompileWorker:
    """Client side of one worker process; thread-safe; restarts after a crash."""

    module = "lazymlir.execution.worker_main"  # what the child runs (`python -m module`)

    def __init__(self, metrics=None, timeout: float | None = None, fork: bool = False,
                 niceness: int = 0):
        self._metrics = metrics
        self.timeout = timeout  # seconds per request; None waits forever
        self.niceness = niceness  # added to the process's nice value (0: as this one)
        # Fork this process instead of starting `python -m module` (_fork_worker); only
        # for the real worker module (tests substitute crashing stand-ins by name).
        self.fork = fork and hasattr(os, "fork")
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._log_path: Path | None = None
        self.starts = 0
        self._abandoned = False

    def _start(self) -> None:
        fd, log_path = tempfile.mkstemp(prefix="lazymlir-worker-", suffix=".log")
        self._log_path = Path(log_path)
        env = dict(os.environ)
        env["LAZYMLIR_COMPILE_WORKER"] = "0"  # the worker compiles in its own process
        env[NICENESS_VARIABLE] = str(self.niceness)
        with os.fdopen(fd, "wb") as log_file:
            # Unbuffered replies: the deadline wait selects on the pipe, which cannot see
            # messages already read ahead into a buffer (a reply stuck there would hang
            # the client until the timeout while the worker waits for the next request).
            self._process = None
            if self.fork and self.module == CompileWorker.module:
                try:
                    self._process = _fork_worker(log_file.fileno(), self.niceness)
                except OSError as error:  # e.g. ENOMEM under strict overcommit
                    log.warning("cannot fork a compile worker (%s); starting a fresh "
                                "interpreter instead", error)
                    self.fork = False
            if self._process is None:
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
            except BaseException:
                # Ctrl-C (or any error) while waiting: the reply still to come would be
                # read as the next request's, so this worker goes and the next request
                # starts a fresh one.
                process.kill()
                process.wait()
                self._process = None
                raise
            if self._abandoned:
                raise RuntimeError("lazymlir: this compile was abandoned: the session closed")
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
        error = CompilerCrashError(message, stage=stage, target=options.target,
                                   reproducer=command)
        error.timed_out = timed_out
        return error

    def abandon(self) -> None:
        """Kill the process without waiting for the request in flight (which raises)."""
        self._abandoned = True
        process = self._process
        if process is not None:
            process.kill()

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
