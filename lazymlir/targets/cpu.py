"""The cpu target: lazy values are dense CPU tensors; graphs are shared objects.

The artifact folder holds `executable.so` (built by lowering/cpu/codegen.py
through mlir-translate + llc + cc, not MLIR's ExecutionEngine, which
miscompiled here: docs/known-issues.md). Its entry
`_mlir_ciface_main(void **buffers)` takes one array of memref descriptor pointers,
inputs then outputs (results became out-parameters; one packed argument, so a
graph's arity has no limit: ctypes calls take at most 1024 arguments), and the
runtime owns every buffer: it allocates the outputs as CPU tensors.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import platform
import threading
import types
from functools import cache
from pathlib import Path

import torch
# torch's own contiguous strides (zero-size dims count as 1, as torch.empty's do).
from torch._prims_common import make_contiguous_strides_for

from .. import session
from ..support import host_isa
from . import cpu_alloc, cpu_background, cpu_builtins, cpu_threads
from . import dlpack_abi
from .base import CompiledCheckFailed, Executable, OutputMetas, Target

SO_NAME = "executable.so"
log = logging.getLogger("lazymlir.targets.cpu")


@cache
def _allocator() -> ctypes.CDLL:
    """targets/cpu_alloc.py's caching allocator, loaded once per process with
    RTLD_GLOBAL: every graph's `_mlir_memref_to_llvm_*` calls bind to it, so all
    graphs share one cache."""
    lib = ctypes.CDLL(str(session.runtime_library(cpu_alloc.build)), mode=ctypes.RTLD_GLOBAL)
    lib.lazymlir_cpu_alloc_stats.argtypes = [ctypes.POINTER(ctypes.c_uint64 * 4)]
    lib.lazymlir_cpu_alloc_stats.restype = None
    lib.lazymlir_cpu_alloc_trim.restype = None
    lib.lazymlir_cpu_alloc_set_cap_mb.argtypes = [ctypes.c_uint64]
    lib.lazymlir_cpu_alloc_set_cap_mb.restype = None
    lib.lazymlir_cpu_alloc_set_cap_mb(session.current().settings.cpu_alloc_cache_mb)
    return lib


@cache
def load_builtins() -> ctypes.CDLL:
    """targets/cpu_builtins.py's compiler runtime functions (`__truncsfbf2`), loaded once
    per process with RTLD_GLOBAL before any CPU code that may call them: the cpu
    target's graphs, and the cuda emulator driver's kernel images (cuda_driver.py)."""
    return ctypes.CDLL(str(session.runtime_library(cpu_builtins.build)), mode=ctypes.RTLD_GLOBAL)


@cache
def _threads() -> tuple[ctypes.CDLL, str | None]:
    """targets/cpu_threads.py's OpenMP entry points, bound to PyTorch's OpenMP pool,
    loaded once per process with RTLD_GLOBAL before any graph (whose parallel loops
    call them); with the libgomp they run on, or None (then on the calling thread)."""
    lib, gomp = cpu_threads.load(session.runtime_library(cpu_threads.build))
    if gomp is None:
        log.warning("no GNU OpenMP runtime (libgomp) is loaded in this process: the "
                    "parallel loops of compiled CPU graphs run on one thread")
    return lib, gomp


@cache
def _background() -> ctypes.CDLL:
    """targets/cpu_background.py's thread for compiled calls launched by mark_step()."""
    return cpu_background.load(session.runtime_library(cpu_background.build), _threads()[0])


def _wait_for_background() -> None:
    """Wait until the background thread has no call left (the GIL released), returning
    to Python between slices of the wait so that an interrupt is handled."""
    wait = _background().lazymlir_background_wait
    while not wait(cpu_background.WAIT_SLICE_NS):
        pass


def background_library() -> ctypes.CDLL:
    """targets/cpu_background.py's library as loaded (its counters, for tests)."""
    return _background()


def threads_library() -> ctypes.CDLL:
    """targets/cpu_threads.py's library as loaded for the graphs (its counters and
    `lazymlir_threads_tune`, for tests and benchmarks)."""
    return _threads()[0]


def threads_stats() -> dict[str, object] | None:
    """Parallel regions run by compiled graphs and the OpenMP runtime they ran on (None
    before the first graph is loaded)."""
    if _threads.cache_info().currsize == 0:
        return None
    lib, gomp = _threads()
    return {"forks": lib.lazymlir_threads_forks(),
            "inline_forks": lib.lazymlir_threads_inline_forks(),
            "late_forks": lib.lazymlir_threads_late_forks(),
            "alone_forks": lib.lazymlir_threads_alone_forks(),
            "shrunk_forks": lib.lazymlir_threads_shrunk_forks(), "runtime": gomp,
            "threads": torch.get_num_threads() if gomp else 1}


def temporaries_stats() -> dict[str, int] | None:
    """The caching allocator's counters for compiled graphs' temporaries (None before
    the first graph is loaded): block reuses, fresh allocations, bytes kept for reuse,
    bytes of cached-size blocks in use."""
    if _allocator.cache_info().currsize == 0:
        return None
    out = (ctypes.c_uint64 * 4)()
    _allocator().lazymlir_cpu_alloc_stats(ctypes.byref(out))
    return dict(zip(("hits", "misses", "bytes_cached", "bytes_in_use"), out))


@cache
def _descriptor_type(rank: int):
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
              ("offset", ctypes.c_int64)]
    if rank:
        fields += [("shape", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


# Copies between host tensors and lazy values are copy-on-write (torch._lazy_clone):
# both share memory until one of them is written, so `.cpu()` and `.to("lazy_mlir")`
# cost nothing unless the user later writes one side (then PyTorch copies for the
# writer). Measured: `.cpu()` of a (4096, 1024) float32 result took 1.8 ms of a 5 ms
# layer_norm call as a clone. Compiled graphs never write their inputs and read them
# through const_data_ptr, which keeps the sharing.
_copy_on_write = getattr(torch, "_lazy_clone", torch.clone)
# PyTorch before 2.12 has no const_data_ptr in Python: data_ptr() is right there too,
# and materializes a copy-on-write input's copy (the sharing is lost, not a value).
_read_pointer = getattr(torch.Tensor, "const_data_ptr", torch.Tensor.data_ptr)

# Output allocation: the helper inductor's generated code calls (no argument parsing:
# 0.67 us a call against 1.45 for torch.empty_strided and 2.9 for torch.empty), where
# this PyTorch has it.
try:
    from torch._C._dynamo.guards import _empty_strided_cpu as _empty_strided
except ImportError:  # pragma: no cover - other PyTorch versions
    def _empty_strided(shape, strides, dtype):
        return torch.empty_strided(shape, strides, dtype=dtype)


def _descriptor(tensor: torch.Tensor, written: bool):
    desc = _descriptor_type(tensor.dim())()
    # data_ptr() of a copy-on-write tensor materializes its copy: only outputs need it.
    desc.allocated = desc.aligned = tensor.data_ptr() if written else _read_pointer(tensor)
    desc.offset = 0
    if tensor.dim():
        desc.shape[:] = list(tensor.shape)
        desc.strides[:] = list(tensor.stride())
    return desc


def _scalar_descriptor(address: int):
    """A 0-d memref descriptor of the float64 at `address`."""
    desc = _descriptor_type(0)()
    desc.allocated = desc.aligned = address
    desc.offset = 0
    return desc


# The function lowering/cpu/asserts.py adds to code that holds run-time checks (the
# name is the contract: targets do not import the compiler).
_FAILED_CHECKS = "lazymlir_failed_asserts"
_PEEK_CHECKS = "lazymlir_peek_asserts"


class CpuExecutable(Executable):
    """A compiled graph: run(list of input CPU tensors) -> list of output CPU tensors."""

    takes_scalars = True
    starts_natively = True

    def __init__(self, so_path: Path, output_metas: OutputMetas,
                 in_place: tuple[tuple[int, int], ...] = (), symbols: dict | None = None):
        self.so_path = Path(so_path)
        self.output_metas = output_metas
        # A graph with symbolic sizes (lowering/front/symbolic.py): its output shapes are
        # computed per call from its inputs' sizes, and its descriptors carry the sizes.
        self._sizes = _OutputSizes(symbols, output_metas) if symbols else None
        # Outputs written into their inputs: the compiled function has no out-parameter
        # for them (lowering/bufferize/graph_inputs.py) and writes those inputs.
        self.in_place = tuple(in_place)
        self._in_place_outputs = {output: input for input, output in self.in_place}
        self._written = [input for input, _ in self.in_place]
        # Output k's position among the out-parameters (those not written into inputs):
        # the index of its flag in lazymlir_output_ready (cpu_background.py).
        self.out_parameter = {k: p for p, k in enumerate(
            k for k in range(len(output_metas)) if k not in self._in_place_outputs)}
        # Shapes and strides as tuples, for _empty_strided (an MLP training step
        # allocates 13 outputs).
        self._allocations = [] if self._sizes else \
            [(tuple(shape), tuple(make_contiguous_strides_for(shape)), dtype)
             for k, (shape, dtype) in enumerate(output_metas) if k not in self._in_place_outputs]
        _allocator()  # defines the buffer functions the graph calls...
        _threads()  # ...the OpenMP entry points of its parallel loops...
        _background()  # ...the signal of its final outputs (lazymlir_output_ready)...
        load_builtins()  # ...and the compiler runtime functions the system may lack
        self._lib = ctypes.CDLL(str(self.so_path))
        self._entry = self._lib._mlir_ciface_main
        self._entry.restype = None
        self._entry.argtypes = [ctypes.c_void_p]
        # The entry's address, for calls on the background thread (taken once: tools
        # that wrap `_entry` to time it leave it intact).
        self._entry_address = ctypes.cast(self._entry, ctypes.c_void_p).value
        # Present when the code holds run-time checks (lowering/cpu/asserts.py): returns
        # whether one failed since the last call, and clears that.
        self._failed_checks = getattr(self._lib, _FAILED_CHECKS, None)
        self.checks_at_run_time = self._failed_checks is not None
        if self._failed_checks is not None:
            self._failed_checks.restype = ctypes.c_int32
            self._failed_checks.argtypes = []
        # ...and whether one failed so far, without clearing that (an early read).
        self._peek_checks = getattr(self._lib, _PEEK_CHECKS, None)
        if self._peek_checks is not None:
            self._peek_checks.restype = ctypes.c_int32
            self._peek_checks.argtypes = []
        # Per calling thread: the argument descriptors of the last call, reused when the
        # shapes repeat (a graph's shapes are static: only the data pointers change).
        # Building them afresh cost ~2 us per argument, 30 us of an MLP step's 3 graphs.
        self._frames = threading.local()
        # The frame of calls run on the background thread (one at a time: see `start`).
        self._background_frame = types.SimpleNamespace(frame=None)

    def run(self, inputs: list[torch.Tensor], scalars=()) -> list[torch.Tensor]:
        """`scalars`: the graph's scalar inputs (0-d float64 memrefs after `inputs`) as
        Python floats: they are written into a float64 array the call's argument frame
        keeps, not made into tensors (one tensor and its views per call cost 13 us of an
        MLP step's sync, more with cold caches after the code ran, ~0.5 ms of a GPT step
        with 214 scalars)."""
        dense, outputs, frame = self._prepare(inputs, scalars, self._frames)
        self._entry(ctypes.addressof(frame[1]))
        return self._finish(dense, outputs)

    def start(self, inputs: list[torch.Tensor], scalars=()) -> BackgroundCall:
        """Run as `run` does, on the background thread (targets/cpu_background.py): the
        call is prepared here, and `BackgroundCall.result()` waits for it. One call at a
        time in the process: the caller waits for the previous one first."""
        call = self.prepare(inputs, scalars)
        return BackgroundCall(call, start_calls([call], ready=len(call.buffers)))

    def prepare(self, inputs: list[torch.Tensor], scalars=(), frames=None,
                pool=None) -> PreparedCall:
        """A call made ready for the background thread (`start_calls`): inputs made dense,
        outputs allocated, the argument frame filled. `frames`: where its frame is kept
        for the next call (one per place in a chain: a graph may come twice in one; the
        executable's own by default). `pool`: memory free for the outputs, whose
        `take(shape, strides, dtype)` gives a tensor to write or None (then a fresh one
        is allocated): a chain's later calls reuse what earlier values no longer need."""
        if frames is None:
            frames = self._background_frame
        dense, outputs, frame = self._prepare(inputs, scalars, frames, pool)
        return PreparedCall(self, dense, outputs, frame)

    def _prepare(self, inputs: list[torch.Tensor], scalars, frames, pool=None) -> tuple:
        """(inputs made dense, fresh outputs, the argument frame: descriptors, their
        pointer array, the scalars' array), the frame reused from `frames.frame`; outputs
        taken from `pool` where it has memory for them (`prepare`)."""
        empty = _empty_strided
        dense = [t if t.is_contiguous() else t.contiguous() for t in inputs]  # kept alive
        allocations = self._allocations if self._sizes is None else \
            self._sizes.allocations(dense, self._in_place_outputs)
        if pool is None:
            outputs = [empty(shape, strides, dtype) for shape, strides, dtype in allocations]
        else:
            outputs = []
            for shape, strides, dtype in allocations:
                taken = pool.take(shape, strides, dtype)
                outputs.append(empty(shape, strides, dtype) if taken is None else taken)
        written = self._written
        count = len(dense) + len(scalars) + len(outputs)
        # (symbolic sizes: the descriptors' sizes are read, so they are made per call)
        frame = None if self._sizes is not None else getattr(frames, "frame", None)
        # The compiled code has static shapes: only the data pointers of its arguments
        # change from call to call (the descriptors' sizes and strides are not read).
        if frame is None or frame[3] != (len(dense), len(scalars), len(outputs)):
            values = (ctypes.c_double * max(len(scalars), 1))(*scalars)
            base, width = ctypes.addressof(values), ctypes.sizeof(ctypes.c_double)
            descriptors = [_descriptor(t, i in written) for i, t in enumerate(dense)] + \
                [_scalar_descriptor(base + width * k) for k in range(len(scalars))] + \
                [_descriptor(t, True) for t in outputs]
            pointers = (ctypes.c_void_p * max(count, 1))(
                *[ctypes.addressof(d) for d in descriptors])
            frame = (descriptors, pointers, values, (len(dense), len(scalars), len(outputs)))
            if self._sizes is None:
                frames.frame = frame
        else:
            descriptors = frame[0]
            for desc, t in zip(descriptors, dense):
                desc.allocated = desc.aligned = _read_pointer(t)
            if scalars:
                frame[2][:len(scalars)] = scalars
            for desc, t in zip(descriptors[len(dense) + len(scalars):], outputs):
                desc.allocated = desc.aligned = t.data_ptr()
            for i in written:  # data_ptr(): a copy-on-write input gets its own memory first
                descriptors[i].allocated = descriptors[i].aligned = dense[i].data_ptr()
        return dense, outputs, frame

    def _finish(self, dense: list, outputs: list) -> list:
        if self._failed_checks is not None and self._failed_checks():
            raise CompiledCheckFailed(f"a run-time check in {self.so_path.name} failed")
        return self._outputs(dense, outputs)

    def _outputs(self, dense: list, outputs: list) -> list:
        """The call's outputs, in the graph's order (known before it runs)."""
        if not self.in_place:
            return outputs
        # An updated input's output is the buffer written: the input itself, or the dense
        # copy of a strided one, which the caller copies back (lazymlir/dynamo.py).
        fresh = iter(outputs)
        return [dense[self._in_place_outputs[k]] if k in self._in_place_outputs
                else next(fresh) for k in range(len(self.output_metas))]


class PreparedCall:
    """A call `CpuExecutable.prepare` made ready: its entry, its argument frame, and the
    buffers it reads and writes, kept alive until it has run."""

    __slots__ = ("executable", "dense", "buffers", "frame")

    def __init__(self, executable: CpuExecutable, dense: list, buffers: list, frame):
        self.executable, self.dense, self.buffers, self.frame = \
            executable, dense, buffers, frame

    def outputs(self) -> list:
        """Its outputs as `run` returns them (not computed until it has run; with the
        check flag of an instrumented graph last)."""
        return self.executable._outputs(self.dense, self.buffers)

    def finish(self) -> list:
        """Once it has run: `outputs()`, or CompiledCheckFailed if a check in its code
        failed (read once: the code's flag is cleared)."""
        return self.executable._finish(self.dense, self.buffers)


def start_calls(calls: list[PreparedCall], ready: int = 0) -> BackgroundCalls:
    """Hand `calls` to the background thread, which runs them in order (a call's outputs
    may be a later one's inputs); first waits for a submission still running (another
    session's). `ready`: one call's number of out-parameters, whose signals of final
    values (`BackgroundCalls.wait_output`) it keeps."""
    library = _background()
    count = len(calls)
    entries = (ctypes.c_void_p * count)(*[c.executable._entry_address for c in calls])
    arguments = (ctypes.c_void_p * count)(*[ctypes.addressof(c.frame[1]) for c in calls])
    flags = (ctypes.c_uint8 * ready)() if ready and count == 1 else None
    seq = ctypes.c_uint64()
    threads = torch.get_num_threads()

    def submit() -> int:
        return library.lazymlir_background_submit(entries, arguments, count, threads, flags,
                                                  ready if flags else 0, ctypes.byref(seq))
    error = submit()
    while error == errno.EBUSY:  # another session's call: it runs first
        _wait_for_background()
        error = submit()
    if error:
        raise RuntimeError(f"the background thread for compiled graphs did not take the "
                           f"call: {os.strerror(error)}")
    return BackgroundCalls(calls, (entries, arguments), flags, seq.value)


class BackgroundCalls:
    """Calls `start_calls` handed to the background thread; holds them (their buffers
    and frames) and the arrays naming them until they have run."""

    __slots__ = ("calls", "_arrays", "_flags", "_seq")

    def __init__(self, calls: list[PreparedCall], arrays, flags=None, seq: int = 0):
        self.calls, self._arrays, self._flags, self._seq = calls, arrays, flags, seq

    def wait_output(self, position: int) -> bool:
        """Wait (the GIL released) until the one call's out-parameter `position` holds its
        final value (its code's signal: True) or the call has run (False: it sent none,
        the code of a graph compiled without signals)."""
        flags = self._flags
        if flags is None:
            return False
        if flags[position]:
            return True
        wait = _background().lazymlir_background_wait_output
        while True:
            state = wait(self._seq, flags, position, cpu_background.WAIT_SLICE_NS)
            if state:
                return state == 1

    @staticmethod
    def wait() -> None:
        """Wait (the GIL released) until the calls have run."""
        _wait_for_background()

    @staticmethod
    def seconds() -> float:
        """How long the compiled code of the last finished submission ran."""
        return _background().lazymlir_background_last_ns() * 1e-9


class BackgroundCall:
    """One call `CpuExecutable.start` handed to the background thread."""

    __slots__ = ("_call", "_started")

    def __init__(self, call: PreparedCall, started: BackgroundCalls):
        self._call, self._started = call, started

    def result(self) -> list:
        """Wait (the GIL released) until the call has run; its outputs, as `run`'s."""
        self._started.wait()
        return self._call.finish()

    def early_output(self, k: int) -> torch.Tensor | None:
        """Output `k` (the graph's numbering) once the code has signaled it final, waiting
        for that, while the rest of the call may still run; None for an output written
        into an input, if the call ended without the signal, or if a run-time assert of
        the code has failed by then (the graph then runs again eagerly at its end)."""
        executable = self._call.executable
        position = executable.out_parameter.get(k)
        if position is None or not self._started.wait_output(position):
            return None
        if executable.checks_at_run_time and (executable._peek_checks is None
                                              or executable._peek_checks()):
            return None
        return self._call.buffers[position]

    @staticmethod
    def seconds() -> float:
        """How long the compiled code of the last finished call ran."""
        return BackgroundCalls.seconds()


class _OutputSizes:
    """Output shapes of a graph with symbolic sizes: each shape entry, an int or a Python
    expression over the symbols (lowering/front/symbolic.py), becomes one function of
    the input sizes, compiled once."""

    def __init__(self, symbols: dict, output_metas: OutputMetas):
        names = sorted(symbols)
        self._sources = [tuple(symbols[name]) for name in names]
        self._shapes = []
        for shape, dtype in output_metas:
            text = ", ".join(str(d) for d in shape)
            function = eval(f"lambda {', '.join(names)}: ({text}{',' if shape else ''})",  # noqa: S307
                            {"__builtins__": {}, "max": max, "min": min})
            self._shapes.append((function, dtype))

    def allocations(self, inputs: list[torch.Tensor], skipped) -> list:
        values = [inputs[s[0]].shape[s[1]] if len(s) == 2 else
                  (inputs[s[0]].shape[s[1]] - s[3]) // s[2] for s in self._sources]
        result = []
        for k, (function, dtype) in enumerate(self._shapes):
            if k not in skipped:
                shape = function(*values)
                result.append((shape, tuple(make_contiguous_strides_for(shape)), dtype))
        return result


@cache
def _host_cpu() -> str:
    """The host CPU's identity: code is generated for it (-mcpu=native), so a disk
    cache shared by different machines must not hand one machine's code to another."""
    lines = []
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith(("model name", "flags", "Features", "CPU part")):
                    lines.append(line.strip())
                if len(lines) >= 3:
                    break
    except OSError:
        pass
    identity = "\n".join([platform.machine(), *lines])
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


class CpuTarget(Target):
    name = "cpu"
    plain_cpu_tensors = True  # CpuExecutable.run makes strided inputs dense itself
    runs_in_background = True  # per-thread argument frames; OpenMP team of the caller

    @staticmethod
    def temporaries_stats() -> dict[str, int] | None:
        return temporaries_stats()

    def fingerprint(self) -> str:
        # The schedule's tile sizes follow the vector ISA, which LAZYMLIR_CPU_VECTOR_ISA
        # may override: another choice is another artifact.
        return f"cpu-{_host_cpu()}-{host_isa.vector_isa()}"

    def upload(self, cpu: torch.Tensor) -> torch.Tensor:
        return _copy_on_write(cpu.contiguous())

    def download(self, data: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
        return _copy_on_write(data)

    def borrow(self, cpu: torch.Tensor) -> torch.Tensor:
        # Compiled graphs never write their inputs (no copy needed) and take only their
        # memory (no detach needed: it cost ~1 us per input per call).
        return cpu if cpu.is_contiguous() else cpu.contiguous()

    def give_back(self, data: torch.Tensor, meta, device=None) -> torch.Tensor:
        return data  # a fresh tensor the executable wrote

    def dlpack_device(self) -> tuple[int, int]:
        return (dlpack_abi.KDLCPU, 0)

    def export_dlpack(self, data: torch.Tensor, meta, *, versioned: bool = False, stream=-1):
        # Values are dense CPU tensors: PyTorch's own exporter shares their memory.
        return data.__dlpack__(max_version=(1, 0) if versioned else None)

    def import_dlpack(self, source):
        """kDLCPU memory is used in place when it is compact row-major (else copied
        into a dense tensor); other devices need their target."""
        device = dlpack_abi.source_device(source)
        if device[0] != dlpack_abi.KDLCPU:
            raise ValueError(
                f"a DLPack tensor on {dlpack_abi.device_name(device)} cannot be used by the "
                f"cpu target (LAZYMLIR_TARGET=cpu takes kDLCPU tensors; kDLCUDA needs "
                f"LAZYMLIR_TARGET=cuda)")
        tensor = torch.from_dlpack(source).contiguous()
        return tensor, tuple(tensor.shape), tensor.dtype

    @staticmethod
    def start_calls(calls: list[PreparedCall]) -> BackgroundCalls:
        return start_calls(calls)

    def load(self, artifact: Path, output_metas: OutputMetas, in_place=(),
             symbols: dict | None = None) -> CpuExecutable:
        return CpuExecutable(Path(artifact) / SO_NAME, output_metas, in_place, symbols)
