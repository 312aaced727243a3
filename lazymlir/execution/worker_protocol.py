"""What the compile worker (worker.py) and its process (worker_main.py) share: the
message framing and the environment variables the parent passes to the child.

A message is any picklable value, sent as an 8-byte little-endian length followed by
its pickle. Both sides of the pipe import this module and nothing of each other, so
the parent never needs the child's entry point to talk to it and the child never
imports the parent's process management.
"""

from __future__ import annotations

import pickle
import struct

# How a worker started as `python -m module` learns its niceness (worker_main.main).
NICENESS_VARIABLE = "LAZYMLIR_WORKER_NICENESS"

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
