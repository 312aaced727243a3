"""A stand-in compile worker that reports a stage, then dies of SIGSEGV
(execution/test_compile_worker.py)."""

import os
import signal
import sys

from lazymlir.execution.worker import read_message, write_message

replies = os.fdopen(os.dup(1), "wb")
message = read_message(sys.stdin.buffer)
write_message(replies, ("stage", "bufferized"))
print("LLVM ERROR: simulated native crash", file=sys.stderr, flush=True)
os.kill(os.getpid(), signal.SIGSEGV)
