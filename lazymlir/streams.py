"""`torch.lazy_mlir.Stream` / `Event`: what stream-aware code (FSDP2, torch.accelerator
users) asks of a device module.

A lazy device has one order of work: ops are recorded in program order and every
sync point runs what is pending before it returns. So a stream is only a name for
that order: waiting on another stream or on an event has nothing to wait for, an
event is complete once recorded, and synchronizing runs what is pending
(`mark_step`) and waits for it (`lazymlir.wait`).
"""

from __future__ import annotations

import contextlib

import torch

from .tracing.materialize import mark_step
from .tracing.materialize import wait as wait_for_runs


class Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        self.enable_timing = enable_timing

    def record(self, stream=None) -> Event:
        return self

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        mark_step()
        wait_for_runs()

    def elapsed_time(self, end_event) -> float:
        raise RuntimeError("lazy_mlir events carry no timing: time with "
                           "lazymlir.metrics.timers() or around mark_step()")


class Stream:
    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.priority = priority

    @property
    def device(self) -> torch.device:
        return torch.device("lazy_mlir", 0)

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        return (event or Event()).record(self)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        mark_step()
        wait_for_runs()


_DEFAULT = Stream()


def current_stream(device=None) -> Stream:
    return _DEFAULT


def stream(s) -> contextlib.AbstractContextManager:
    """`with torch.lazy_mlir.stream(s):` -- one order of work, nothing to switch."""
    return contextlib.nullcontext(s)
