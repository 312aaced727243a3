"""DLPack in ctypes: the ABI structures, dtype codes, and capsules made and consumed.

The protocol (https://dmlc.github.io/dlpack/latest/python_spec.html): a producer
hands out a PyCapsule named "dltensor" (a DLManagedTensor) or, when the consumer
asked for `max_version >= (1, 0)`, "dltensor_versioned" (a
DLManagedTensorVersioned). The consumer renames the capsule to "used_dltensor"
("used_dltensor_versioned") when it takes ownership, so a capsule is consumed once,
and then calls the managed tensor's deleter when it is done. A capsule nobody
consumed calls the deleter itself when it is collected (`_capsule_destructor`).

This module knows the ABI only; what the memory is (runtime buffers, the cuda
target's device/ordinal checks) is the cuda target's business (targets/cuda.py).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

KDLCPU, KDLCUDA = 1, 2
DEVICE_NAMES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 4: "kDLOpenCL", 7: "kDLVulkan",
                8: "kDLMetal", 9: "kDLVPI", 10: "kDLROCM", 12: "kDLExtDev",
                13: "kDLCUDAManaged", 14: "kDLOneAPI"}
FLAG_READ_ONLY = 1

# torch dtype <-> (DLDataTypeCode, bits); lanes are always 1.
_CODES = {
    torch.bool: (6, 8), torch.uint8: (1, 8), torch.int8: (0, 8), torch.int16: (0, 16),
    torch.int32: (0, 32), torch.int64: (0, 64), torch.float16: (2, 16),
    torch.bfloat16: (4, 16), torch.float32: (2, 32), torch.float64: (2, 64),
    torch.complex64: (5, 64), torch.complex128: (5, 128),
}
_DTYPES = {code: dtype for dtype, code in _CODES.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


LEGACY, VERSIONED = b"dltensor", b"dltensor_versioned"
# PyCapsule_SetName keeps the pointer it is given, not a copy: names must live forever.
_USED = {LEGACY: b"used_dltensor", VERSIONED: b"used_dltensor_versioned"}

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
# The capsule destructor gets a borrowed PyObject*: the raw pointer variants.
_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))


def call_deleter(managed: int, versioned: bool) -> None:
    """Run the deleter of the managed tensor at `managed` (a NULL deleter is allowed)."""
    struct = DLManagedTensorVersioned if versioned else DLManagedTensor
    deleter = struct.from_address(managed).deleter
    if deleter:
        DELETER(deleter)(managed)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: int) -> None:
    # Only an unconsumed capsule still owns its tensor; a consumer renamed it.
    for name, versioned in ((LEGACY, False), (VERSIONED, True)):
        if _is_valid_raw(capsule, name):
            call_deleter(_get_pointer_raw(capsule, name), versioned)
            return


def make_capsule(managed: int, versioned: bool):
    """A PyCapsule owning the managed tensor at `managed` (deleted if never consumed)."""
    name = VERSIONED if versioned else LEGACY
    return _api.PyCapsule_New(managed, name, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def cuda_stream(stream) -> int:
    """The CUstream a DLPack `stream` argument names for kDLCUDA, or 0 when it names
    none. The protocol: None and 1 are the legacy default stream (CU_STREAM_LEGACY is
    the handle 1), 2 the per-thread default stream (CU_STREAM_PER_THREAD, 2), -1 "no
    synchronization wanted", 0 is disallowed; other values are stream handles."""
    if stream is None:
        return 1
    if not isinstance(stream, int) or isinstance(stream, bool):
        raise TypeError(f"a DLPack stream is an int or None, got {type(stream).__name__}")
    return stream if stream > 0 else 0


def dtype_code(dtype: torch.dtype) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of a torch dtype; TypeError for dtypes DLPack cannot carry."""
    try:
        return _CODES[dtype]
    except KeyError:
        raise TypeError(f"DLPack cannot carry {dtype}") from None


@dataclass
class Tensor:
    """What a consumed capsule describes. `managed` is owned by the caller now: call
    `release()` (the producer's deleter) exactly once when done with the memory."""

    managed: int
    versioned: bool
    data: int               # address of the first element (data + byte_offset)
    device: tuple[int, int]
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None: compact row-major
    dtype: torch.dtype
    read_only: bool

    @property
    def deleter(self) -> int:
        struct = DLManagedTensorVersioned if self.versioned else DLManagedTensor
        return struct.from_address(self.managed).deleter or 0

    def release(self) -> None:
        call_deleter(self.managed, self.versioned)

    @property
    def nbytes(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count * torch.empty((), dtype=self.dtype).element_size()

    def is_compact(self) -> bool:
        """Row-major without gaps (strides of size-1 dimensions do not matter)."""
        if self.strides is None:
            return True
        expected = 1
        for size, stride in reversed(list(zip(self.shape, self.strides))):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


def consume(capsule) -> Tensor:
    """Take ownership of a DLPack capsule (renames it "used_..."); ValueError if it was
    consumed before or is not a DLPack capsule, TypeError for element types torch lacks
    (the capsule is then released, not leaked)."""
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"expected a DLPack capsule, got {type(capsule).__name__}")
    name = _api.PyCapsule_GetName(capsule)
    if name in _USED.values():
        raise ValueError("this DLPack capsule was consumed already (a capsule can be "
                         "consumed once; ask the producer's __dlpack__ for a new one)")
    if name not in (LEGACY, VERSIONED):
        raise ValueError(f"not a DLPack capsule (its name is {name!r})")
    versioned = name == VERSIONED
    managed = _api.PyCapsule_GetPointer(capsule, name)
    _api.PyCapsule_SetName(capsule, _USED[name])
    if versioned:
        m = DLManagedTensorVersioned.from_address(managed)
        if m.version.major != 1:
            call_deleter(managed, True)
            raise ValueError(f"DLPack version {m.version.major}.{m.version.minor} is not "
                             f"supported (1.x is)")
        flags, t = m.flags, m.dl_tensor
    else:
        flags, t = 0, DLManagedTensor.from_address(managed).dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    key = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1 or key not in _DTYPES:
        call_deleter(managed, versioned)
        raise TypeError(f"DLPack element type code={t.dtype.code} bits={t.dtype.bits} "
                        f"lanes={t.dtype.lanes} has no torch dtype lazymlir supports")
    return Tensor(managed, versioned, (t.data or 0) + t.byte_offset,
                  (t.device.device_type, t.device.device_id), shape, strides, _DTYPES[key],
                  bool(flags & FLAG_READ_ONLY))


def device_name(device: tuple[int, int]) -> str:
    kind, index = device
    return f"{DEVICE_NAMES.get(kind, f'device type {kind}')}:{index}"


def peek_device(capsule) -> tuple[int, int]:
    """The device of an unconsumed capsule, without consuming it."""
    name = _api.PyCapsule_GetName(capsule) if type(capsule).__name__ == "PyCapsule" else None
    if name not in (LEGACY, VERSIONED):
        consume(capsule)  # raises the right error (consumed already / not DLPack)
    managed = _api.PyCapsule_GetPointer(capsule, name)
    struct = DLManagedTensorVersioned if name == VERSIONED else DLManagedTensor
    device = struct.from_address(managed).dl_tensor.device
    return device.device_type, device.device_id


def source_device(source) -> tuple[int, int]:
    """The DLPack device of an object with `__dlpack_device__` or of a capsule."""
    if hasattr(source, "__dlpack_device__"):
        kind, index = source.__dlpack_device__()
        return int(kind), int(index)
    return peek_device(source)


def capsule_of(source, stream: int | None):
    """`source` itself if it is a capsule, else `source.__dlpack__(stream=...)` asking for
    DLPack 1.0 (older producers: without max_version)."""
    if not hasattr(source, "__dlpack__"):
        return source
    try:
        return source.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:
        return source.__dlpack__(stream=stream)
