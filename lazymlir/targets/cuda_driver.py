"""ctypes binding of the lazymlir CUDA runtime (cuda_runtime/, C API in
cuda_runtime/include/lazymlir_runtime.h).

The native library loads libcuda.so.1 itself at run time, so importing this
module works everywhere; only ``CudaRuntime.create()`` needs a driver.
``CudaRuntime.create(fake=True)`` runs on the fake driver (host memory,
recorded launches) for tests without a GPU; ``CudaRuntime.create(emulator=True)``
on the emulator driver, which runs emulator images of the kernels
(lowering/gpu/emulator.py) on the CPU.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import site
import struct
import sysconfig
from pathlib import Path

import numpy as np

_LIB_NAME = "liblazymlir_cuda_runtime.so"
# Every buffer a plan gets must start at a multiple of this: kernel pointer arguments
# carry `.align 16` (lowering/gpu/kernels/vectorize.py ALIGN). cuMemAlloc gives 256.
KERNEL_ARG_ALIGN = 16
_u64 = ctypes.c_uint64
_vp = ctypes.c_void_p


class CudaError(RuntimeError):
    """A failure reported by the native runtime or the CUDA driver."""


class DeviceInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("ordinal", ctypes.c_int),
                ("device_count", ctypes.c_int), ("cc_major", ctypes.c_int),
                ("cc_minor", ctypes.c_int), ("multiprocessor_count", ctypes.c_int),
                ("fake", ctypes.c_int)]


class AllocatorStats(ctypes.Structure):
    _fields_ = [(n, _u64) for n in ("bytes_in_use", "bytes_cached", "driver_allocs",
                                     "driver_frees", "cache_hits", "cache_misses",
                                     "oom_retries", "retained_refs",
                                     "external_buffers")]

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name, _ in self._fields_}


class PlanInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("num_buffers", "num_args", "num_modules",
                                             "num_launches", "num_ops")]


def _candidates(explicit: str | None = None) -> list[Path]:
    """Where the library may be, in search order (see docs/cuda_runtime.md).

    `explicit` is LAZYMLIR_RUNTIME_LIB (a file or its folder), read by the settings.
    """
    found = []
    if explicit:
        p = Path(explicit)
        found.append(p / _LIB_NAME if p.is_dir() else p)
    pkg = Path(__file__).resolve().parent.parent  # the lazymlir package
    found.append(pkg / "_lib" / _LIB_NAME)
    # Editable installs put the .so in site-packages while the .py files stay
    # in the source tree.
    for sp in [*site.getsitepackages(), sysconfig.get_paths()["platlib"]]:
        found.append(Path(sp) / "lazymlir" / "_lib" / _LIB_NAME)
    found += [Path(p) for p in sorted(glob.glob(str(pkg.parent / "build" / "*" /
                                                    "cuda_runtime" / _LIB_NAME)))]
    return list(dict.fromkeys(found))


def _declare(lib: ctypes.CDLL) -> None:
    P = ctypes.POINTER
    sigs = {
        "lzrt_runtime_create": [ctypes.c_int, ctypes.c_int, P(_vp)],
        "lzrt_runtime_destroy": [_vp], "lzrt_device_count": [P(ctypes.c_int)],
        "lzrt_runtime_set_sync": [_vp, ctypes.c_int],
        "lzrt_device_info_get": [_vp, P(DeviceInfo)], "lzrt_synchronize": [_vp],
        "lzrt_malloc": [_vp, ctypes.c_size_t, P(_u64)], "lzrt_free": [_vp, _u64],
        "lzrt_memcpy_htod": [_vp, _u64, _vp, ctypes.c_size_t],
        "lzrt_memcpy_dtoh": [_vp, _vp, _u64, ctypes.c_size_t],
        "lzrt_memcpy_dtod": [_vp, _u64, _u64, ctypes.c_size_t],
        "lzrt_memset": [_vp, _u64, ctypes.c_int, ctypes.c_size_t],
        "lzrt_allocator_stats_get": [_vp, P(AllocatorStats)], "lzrt_empty_cache": [_vp],
        "lzrt_module_load": [_vp, ctypes.c_char_p, ctypes.c_size_t, P(_vp)],
        "lzrt_module_unload": [_vp],
        "lzrt_plan_parse": [ctypes.c_char_p, P(_vp)], "lzrt_plan_destroy": [_vp],
        "lzrt_plan_info_get": [_vp, P(PlanInfo)],
        "lzrt_plan_run": [_vp, _vp, P(_vp), ctypes.c_size_t, P(_u64), ctypes.c_size_t],
        "lzrt_stream_get": [_vp, P(_u64)], "lzrt_retain": [_vp, _u64],
        "lzrt_adopt_external": [_vp, _u64, ctypes.c_size_t, _vp, _vp],
        "lzrt_dlpack_export": [_vp, _u64, _u64, ctypes.c_int, P(ctypes.c_int64),
                               P(ctypes.c_int64), ctypes.c_uint8, ctypes.c_uint8,
                               ctypes.c_int, _u64, _u64, P(_vp)],
        "lzrt_event_create": [_vp, P(_vp)], "lzrt_event_record": [_vp],
        "lzrt_event_elapsed_ms": [_vp, _vp, P(ctypes.c_float)], "lzrt_event_destroy": [_vp],
        "lzrt_fake_reset": [], "lzrt_fake_fail_call": [ctypes.c_char_p, ctypes.c_int,
                                                       ctypes.c_int],
        "lzrt_fake_set_memory_limit": [_u64],
        "lzrt_fake_launch_log": [ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)],
        "lzrt_fake_call_count": [ctypes.c_char_p, P(_u64)],
        "lzrt_fake_memory": [P(_u64), P(_u64)],
        "lzrt_emulator_set_reverse_blocks": [ctypes.c_int],
        "lzrt_emulator_stats": [P(_u64), P(_u64)],
    }
    for name, argtypes in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    lib.lzrt_last_error.argtypes, lib.lzrt_last_error.restype = [], ctypes.c_char_p


_lib: ctypes.CDLL | None = None
_lib_path: Path | None = None


def load_library(explicit: str | None = None) -> ctypes.CDLL:
    """Loads the native runtime once; raises CudaError naming the searched places."""
    global _lib
    if _lib is None:
        places = _candidates(explicit)
        path = next((p for p in places if p.is_file()), None)
        if path is None:
            raise CudaError(f"{_LIB_NAME} not found; searched: "
                            + ", ".join(map(str, places))
                            + " (build it with `pip install -e .` or set LAZYMLIR_RUNTIME_LIB)")
        lib = ctypes.CDLL(str(path))
        try:
            _declare(lib)
        except AttributeError as error:  # a library built from other sources
            raise CudaError(f"{path} is not the runtime this lazymlir needs ({error}); "
                            "reinstall lazymlir (pip install .) or point LAZYMLIR_RUNTIME_LIB "
                            "at a fresh build of cuda_runtime/") from None
        _lib = lib
        global _lib_path
        _lib_path = path
    return _lib


_digests: dict[Path, str] = {}


def library_digest() -> str:
    """A hash of the loaded runtime library: artifacts (launch plans, emulator kernel
    images) are read by it, so the disk cache keys on it (a rebuilt runtime is a miss)."""
    if _lib_path is None:
        return "none"
    if _lib_path not in _digests:
        try:
            _digests[_lib_path] = hashlib.sha256(_lib_path.read_bytes()).hexdigest()[:8]
        except OSError:
            return "none"
    return _digests[_lib_path]


def device_count() -> int:
    """Number of CUDA devices of the real driver; raises CudaError without one."""
    n = ctypes.c_int()
    _check(load_library().lzrt_device_count(ctypes.byref(n)))
    return n.value


def _check(rc: int) -> None:
    if rc != 0:
        raise CudaError(load_library().lzrt_last_error().decode(errors="replace"))


def _host_view(obj):
    """(address, nbytes, keepalive) of a contiguous CPU numpy array or torch tensor."""
    if hasattr(obj, "data_ptr"):  # torch.Tensor, without importing torch here
        if obj.device.type != "cpu":
            raise ValueError(f"expected a CPU tensor, got one on {obj.device}")
        t = obj.contiguous()
        return t.data_ptr(), t.numel() * t.element_size(), t
    a = np.ascontiguousarray(obj)
    return a.ctypes.data, a.nbytes, a


class CudaRuntime:
    """One device, its primary context, a stream and a caching allocator."""

    def __init__(self, handle: int, lib: ctypes.CDLL):
        self._handle, self._lib = handle, lib

    @classmethod
    def create(cls, fake: bool = False, ordinal: int = 0,
               library: str | None = None, emulator: bool = False) -> CudaRuntime:
        """`fake`: the fake driver; `emulator`: the emulator driver; else libcuda.so.1."""
        lib = load_library(library)
        if emulator:
            # Emulator images are CPU code built like the cpu target's graphs: they may
            # call compiler runtime functions the system lacks (__truncsfbf2), which the
            # cpu target's builtins library defines for every later dlopen.
            from .cpu import load_builtins

            load_builtins()
        h = _vp()
        kind = 2 if emulator else int(bool(fake))
        _check(lib.lzrt_runtime_create(kind, ordinal, ctypes.byref(h)))
        return cls(h.value, lib)

    def close(self) -> None:
        if self._handle:
            self._lib.lzrt_runtime_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    @property
    def handle(self) -> int:
        if not self._handle:
            raise CudaError("runtime is closed")
        return self._handle

    def device_info(self) -> dict:
        info = DeviceInfo()
        _check(self._lib.lzrt_device_info_get(self.handle, ctypes.byref(info)))
        return {"name": info.name.decode(), "ordinal": info.ordinal,
                "device_count": info.device_count,
                "compute_capability": (info.cc_major, info.cc_minor),
                "multiprocessors": info.multiprocessor_count, "fake": info.fake == 1,
                "emulator": info.fake == 2}

    def device_count(self) -> int:
        return self.device_info()["device_count"]

    def set_sync(self, sync: bool) -> None:
        """Synchronize after every launch of a plan, so that an asynchronous kernel
        failure names its kernel and plan line (slow; for debugging)."""
        _check(self._lib.lzrt_runtime_set_sync(self.handle, int(sync)))

    def synchronize(self) -> None:
        _check(self._lib.lzrt_synchronize(self.handle))

    def alloc(self, nbytes: int) -> DeviceBuffer:
        ptr = _u64()
        _check(self._lib.lzrt_malloc(self.handle, nbytes, ctypes.byref(ptr)))
        return DeviceBuffer(self, ptr.value, nbytes)

    def copy_in(self, src, dst: DeviceBuffer | None = None) -> DeviceBuffer:
        """Copies a CPU numpy array / torch tensor to `dst` (new buffer if None)."""
        addr, nbytes, keep = _host_view(src)
        dst = dst if dst is not None else self.alloc(nbytes)
        if nbytes > dst.nbytes:
            raise ValueError(f"{nbytes} bytes do not fit a {dst.nbytes}-byte buffer")
        _check(self._lib.lzrt_memcpy_htod(self.handle, dst.ptr, addr, nbytes))
        del keep  # the copy has staged the host bytes on return
        return dst

    def copy_out(self, src: DeviceBuffer, out=None, dtype=np.uint8, shape=None):
        """Copies device bytes into `out` (numpy/torch CPU), or a new numpy array."""
        if out is None:
            count = src.nbytes // np.dtype(dtype).itemsize
            out = np.empty(count if shape is None else shape, dtype=dtype)
        elif not (out.is_contiguous() if hasattr(out, "data_ptr")
                  else out.flags.c_contiguous):  # else we would fill a temporary copy
            raise ValueError("copy_out needs a contiguous output array or tensor")
        addr, nbytes, _ = _host_view(out)
        if nbytes > src.nbytes:
            raise ValueError(f"{nbytes} bytes requested from a {src.nbytes}-byte buffer")
        _check(self._lib.lzrt_memcpy_dtoh(self.handle, addr, src.ptr, nbytes))
        return out

    def copy(self, dst: DeviceBuffer, src: DeviceBuffer, nbytes: int | None = None) -> None:
        n = min(dst.nbytes, src.nbytes) if nbytes is None else nbytes
        _check(self._lib.lzrt_memcpy_dtod(self.handle, dst.ptr, src.ptr, n))

    def memset(self, buf: DeviceBuffer, byte: int, nbytes: int | None = None) -> None:
        n = buf.nbytes if nbytes is None else nbytes
        _check(self._lib.lzrt_memset(self.handle, buf.ptr, byte, n))

    def allocator_stats(self) -> dict:
        s = AllocatorStats()
        _check(self._lib.lzrt_allocator_stats_get(self.handle, ctypes.byref(s)))
        return s.as_dict()

    def empty_cache(self) -> None:
        _check(self._lib.lzrt_empty_cache(self.handle))

    def stream(self) -> int:
        """The runtime's CUstream handle (all its work runs in order on it)."""
        out = _u64()
        _check(self._lib.lzrt_stream_get(self.handle, ctypes.byref(out)))
        return out.value

    def adopt_external(self, ptr: int, nbytes: int, release: int, context: int) -> DeviceBuffer:
        """Device memory owned by someone else as a DeviceBuffer (DLPack import): plans
        may use it, the allocator never frees it, and the C function `release(context)`
        runs once when the last reference is dropped (after this runtime's stream is
        synchronized)."""
        _check(self._lib.lzrt_adopt_external(self.handle, ptr, nbytes, release, context))
        return DeviceBuffer(self, ptr, nbytes)

    def dlpack_export(self, buf: DeviceBuffer, shape, strides, dtype_code: int, dtype_bits: int,
                      byte_offset: int = 0, versioned: bool = False, flags: int = 0,
                      consumer_stream: int = 0) -> int:
        """Address of a new DLManagedTensor(Versioned) on kDLCUDA viewing `buf` (see
        lzrt_dlpack_export): it holds its own reference to the buffer, dropped by its
        deleter, so it outlives `buf`. `consumer_stream`: the CUstream the consumer reads
        on (ordered by events), or 0: unknown (the stream is synchronized, and the
        deleter waits for the context)."""
        n = len(shape)
        shp = (ctypes.c_int64 * max(n, 1))(*shape)
        std = (ctypes.c_int64 * max(n, 1))(*strides)
        out = _vp()
        _check(self._lib.lzrt_dlpack_export(self.handle, buf.ptr, byte_offset, n, shp, std,
                                            dtype_code, dtype_bits, int(versioned), flags,
                                            consumer_stream, ctypes.byref(out)))
        return out.value

    def load_module(self, image: bytes | str) -> Module:
        """Loads a cubin or PTX (str or bytes); the driver JIT-compiles PTX."""
        data = image.encode() if isinstance(image, str) else bytes(image)
        h = _vp()
        _check(self._lib.lzrt_module_load(self.handle, data, len(data), ctypes.byref(h)))
        return Module(self, h.value)

    def event(self) -> Event:
        h = _vp()
        _check(self._lib.lzrt_event_create(self.handle, ctypes.byref(h)))
        return Event(self, h.value)


class DeviceBuffer:
    """A device allocation; returned to the caching allocator when dropped."""

    def __init__(self, runtime: CudaRuntime, ptr: int, nbytes: int):
        self.runtime, self.ptr, self.nbytes = runtime, ptr, nbytes

    def free(self) -> None:
        if self.ptr and self.runtime._handle:
            _check(self.runtime._lib.lzrt_free(self.runtime._handle, self.ptr))
        self.ptr = 0

    def __del__(self):
        try:
            self.free()
        except CudaError:
            pass

    def __repr__(self) -> str:
        return f"DeviceBuffer(ptr=0x{self.ptr:x}, nbytes={self.nbytes})"


class Module:
    """A loaded cubin/PTX module; unloaded when dropped."""

    def __init__(self, runtime: CudaRuntime, handle: int):
        self.runtime, self.handle = runtime, handle

    def unload(self) -> None:
        if self.handle and self.runtime._handle:
            _check(self.runtime._lib.lzrt_module_unload(self.handle))
        self.handle = None

    def __del__(self):
        try:
            self.unload()
        except Exception:  # CudaError, or at interpreter exit: this module's globals gone
            pass


class LaunchPlan:
    """A parsed launch plan (format: docs/cuda_runtime.md)."""

    def __init__(self, text: str):
        self._lib = load_library()
        h = _vp()
        _check(self._lib.lzrt_plan_parse(text.encode(), ctypes.byref(h)))
        self._handle = h.value
        info = PlanInfo()
        _check(self._lib.lzrt_plan_info_get(self._handle, ctypes.byref(info)))
        self.info = {name: getattr(info, name) for name, _ in PlanInfo._fields_}

    parse = classmethod(lambda cls, text: cls(text))

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.lzrt_plan_destroy(self._handle)

    def run(self, modules, buffers, runtime: CudaRuntime | None = None) -> None:
        """Enqueues the plan; `buffers` are DeviceBuffers or raw device pointers."""
        owners = [m.runtime for m in modules] + [b.runtime for b in buffers
                                                 if isinstance(b, DeviceBuffer)]
        runtime = runtime or (owners[0] if owners else None)
        if runtime is None:
            raise ValueError("LaunchPlan.run needs a runtime, a module or a DeviceBuffer")
        mods = (_vp * max(len(modules), 1))(*[m.handle for m in modules])
        ptrs = [b.ptr if isinstance(b, DeviceBuffer) else int(b) for b in buffers]
        unaligned = [i for i, p in enumerate(ptrs) if p % KERNEL_ARG_ALIGN]
        if unaligned:
            raise ValueError(
                f"plan buffers {unaligned} are not {KERNEL_ARG_ALIGN}-byte aligned: kernels "
                f"assume it (lowering/gpu/kernels/vectorize.py); pass buffers of this runtime")
        args = (_u64 * max(len(ptrs), 1))(*ptrs)
        _check(self._lib.lzrt_plan_run(runtime.handle, self._handle, mods, len(modules),
                                       args, len(ptrs)))


class Event:
    """A CUDA event on the runtime's stream, for timing."""

    def __init__(self, runtime: CudaRuntime, handle: int):
        self.runtime, self.handle = runtime, handle

    def record(self) -> Event:
        _check(self.runtime._lib.lzrt_event_record(self.handle))
        return self

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to `end` (waits for `end`)."""
        ms = ctypes.c_float()
        _check(self.runtime._lib.lzrt_event_elapsed_ms(self.handle, end.handle,
                                                       ctypes.byref(ms)))
        return ms.value

    def __del__(self):
        if self.handle and self.runtime._handle:
            self.runtime._lib.lzrt_event_destroy(self.handle)


def time_ms(runtime: CudaRuntime, fn, repeat: int = 1) -> float:
    """Average device milliseconds of `fn()` (which enqueues work) over `repeat` runs."""
    start, end = runtime.event().record(), runtime.event()
    for _ in range(repeat):
        fn()
    return start.elapsed_ms(end.record()) / repeat


class fake:
    """Controls of the process-wide fake driver."""

    @staticmethod
    def reset() -> None:
        _check(load_library().lzrt_fake_reset())

    @staticmethod
    def fail_call(call: str | None, nth: int = 1, error: int = 999) -> None:
        """Makes the nth next call of `call` (None: any entry point) return `error`."""
        _check(load_library().lzrt_fake_fail_call(call and call.encode(), nth, error))

    @staticmethod
    def set_memory_limit(nbytes: int) -> None:
        _check(load_library().lzrt_fake_set_memory_limit(nbytes))

    @staticmethod
    def call_count(call: str) -> int:
        n = _u64()
        _check(load_library().lzrt_fake_call_count(call.encode(), ctypes.byref(n)))
        return n.value

    @staticmethod
    def memory() -> tuple[int, int]:
        """(live driver allocations, live bytes) of the fake device."""
        a, b = _u64(), _u64()
        _check(load_library().lzrt_fake_memory(ctypes.byref(a), ctypes.byref(b)))
        return a.value, b.value

    @staticmethod
    def launches() -> list[dict]:
        """The launch log; float arguments are decoded to Python floats."""
        lib, n = load_library(), ctypes.c_size_t()
        _check(lib.lzrt_fake_launch_log(None, 0, ctypes.byref(n)))
        buf = ctypes.create_string_buffer(n.value + 1)
        _check(lib.lzrt_fake_launch_log(buf, len(buf), ctypes.byref(n)))
        return [_parse_launch(line) for line in buf.value.decode().splitlines()]


class emulator:
    """Controls of the process-wide emulator driver."""

    @staticmethod
    def set_reverse_blocks(reverse: bool) -> None:
        """Run each grid's blocks last to first (exposes order dependence)."""
        _check(load_library().lzrt_emulator_set_reverse_blocks(int(reverse)))

    @staticmethod
    def stats() -> dict:
        """Kernel launches and blocks the emulator has run in this process."""
        a, b = _u64(), _u64()
        _check(load_library().lzrt_emulator_stats(ctypes.byref(a), ctypes.byref(b)))
        return {"launches": a.value, "blocks": b.value}


def _parse_launch(line: str) -> dict:
    name, grid, block, shared, args = line.split(" ")
    decoded = []
    for arg in filter(None, args[len("args="):].split(",")):
        kind, value = arg.split(":")
        if kind in ("f32", "f64"):
            fmt = "<f" if kind == "f32" else "<d"
            v = struct.unpack(fmt, int(value, 16).to_bytes(len(value) // 2, "little"))[0]
            decoded.append((kind, v))
        else:
            decoded.append((kind, int(value) if "[" not in kind else bytes.fromhex(value)))
    nums = lambda s: tuple(int(x) for x in s.split("=")[1].split(","))  # noqa: E731
    return {"kernel": name, "grid": nums(grid), "block": nums(block),
            "shared": int(shared.split("=")[1]), "args": decoded}
