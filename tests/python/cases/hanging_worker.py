"""A stand-in compile worker that reports a stage, then hangs
(execution/test_compile_worker.py).

It speaks the worker protocol (lazymlir/execution/worker.py: a little-endian u64
length, then a pickle) by hand instead of importing lazymlir: importing torch can
take longer than the test's 5 s deadline on a loaded machine, and the stage
message must arrive before it.
"""

import os
import pickle
import struct
import sys
import time

HEADER = struct.Struct("<Q")

requests = sys.stdin.buffer
(size,) = HEADER.unpack(requests.read(HEADER.size))
requests.read(size)
payload = pickle.dumps(("stage", "loops"))
replies = os.fdopen(os.dup(1), "wb")
replies.write(HEADER.pack(len(payload)) + payload)
replies.flush()
time.sleep(3600)
