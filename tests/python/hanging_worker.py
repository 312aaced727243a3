"""A stand-in compile worker that reports a stage, then hangs (test_core.py)."""

import os
import sys
import time

from lazymlir.execution.worker import read_message, write_message

replies = os.fdopen(os.dup(1), "wb")
message = read_message(sys.stdin.buffer)
write_message(replies, ("stage", "loops"))
time.sleep(3600)
