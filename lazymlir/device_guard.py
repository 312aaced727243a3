"""The `lazy_mlir` device guard, in C++: an error inside backward must not abort.

PyTorch's Python-backend setup (`_setup_privateuseone_for_python_backend`)
registers a device guard whose every method calls the Python method `type_`.
The autograd engine runs backward for our device on a thread of its own, under
a stream guard for the device. When an op of a C++ autograd node raises there
(a PyTorch kernel of an eager fallback refusing its input, a bad index), the
engine unwinds with the Python error still pending; the stream guard's
destructor calls the guard's `exchangeStream`, which calls into Python, fails,
and being `noexcept` ends the process (`std::terminate`: "terminate called
without an active exception", seen with CTC loss's backward; gdb shows
`PythonDeviceGuard::exchangeStream` under the stream guard's destructor in
`Engine::evaluate_function`). tracing/failures.py turns errors inside backward
into failed values where the op has a meta kernel; under PyTorch's guard the
others end the process or surface as a `SystemError`.

The library also registers the device's allocator, which refuses to allocate:
without one, PyTorch dereferenced a null allocator where code asks for device
memory (a storage made or cloned on the device), ending the process.

This guard answers what PyTorch's does (one device, index 0, the default
stream, no events) without calling Python, so the error reaches the user as
the exception it is. It is compiled once per machine (about 1.5 s) with the
host C++ compiler against the installed torch's headers, kept next to the other
runtime libraries (session.runtime_library), and registered before PyTorch's;
where it cannot be built, PyTorch's guard is used, with a warning.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path

import torch

from . import session
from .support import toolchain

log = logging.getLogger("lazymlir.device_guard")

LIBRARY_STEM = "liblazymlir_device_guard"

SOURCE = r"""
// Device guard of the lazy_mlir device (PrivateUse1): lazymlir/device_guard.py.
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;

constexpr DeviceType kLazy = DeviceType::PrivateUse1;

struct LazyMlirGuard final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return kLazy; }
  Device exchangeDevice(Device) const override { return Device(kLazy, 0); }
  Device getDevice() const override { return Device(kLazy, 0); }
  void setDevice(Device) const override {}
  void uncheckedSetDevice(Device) const noexcept override {}
  Stream getStream(Device) const noexcept override {
    return Stream(Stream::DEFAULT, Device(kLazy, 0));
  }
  Stream getNewStream(Device, int) const override {
    return Stream(Stream::DEFAULT, Device(kLazy, 0));
  }
  Stream exchangeStream(Stream) const noexcept override {
    return Stream(Stream::DEFAULT, Device(kLazy, 0));
  }
  DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const Stream&, const DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
};

// Lazy tensors have no device memory, so nothing may allocate some. Without an
// allocator PyTorch dereferenced a null one: `torch.UntypedStorage(n, device=
// "lazy_mlir")` and `t.untyped_storage().clone()` killed the process (SIGSEGV).
constexpr const char* kNoMemory =
    "lazy_mlir tensors have no device memory to allocate, copy or address directly "
    "(their values live in compiled graphs); bring the tensor to the host with .cpu() "
    "and use its storage there";

struct LazyMlirAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    TORCH_CHECK(n == 0, kNoMemory);
    return c10::DataPtr(nullptr, Device(kLazy, 0));
  }
  void copy_data(void*, const void*, std::size_t count) const override {
    TORCH_CHECK(count == 0, kNoMemory);
  }
};

}  // namespace

// 1: registered; 0: PrivateUse1 has a guard already (which stays).
extern "C" int lazymlir_register_device_guard() {
  static LazyMlirAllocator allocator;
  if (c10::GetAllocator(kLazy) == nullptr) c10::SetAllocator(kLazy, &allocator);
  if (c10::impl::hasDeviceGuardImpl(kLazy)) return 0;
  static LazyMlirGuard guard;
  c10::impl::registerDeviceGuard(kLazy, &guard);
  return 1;
}
"""


def _build_flags() -> tuple[str, ...]:
    torch_dir = Path(torch.__file__).parent
    return ("-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-I{torch_dir / 'include'}", f"-L{torch_dir / 'lib'}", "-lc10",
            f"-Wl,-rpath,{torch_dir / 'lib'}")


def build(directory: str | os.PathLike) -> Path:
    """directory/<library>, compiled if it is not there yet. The flags go into the
    source's text, which names the file: they name this torch's headers and ABI, so
    another torch gets a build of its own."""
    flags = _build_flags()
    source = SOURCE + f"// torch {torch.__version__}: {' '.join(flags)}\n"
    return toolchain.build_c_library(source, LIBRARY_STEM, directory, flags, language="c++")


def install() -> bool:
    """Register the C++ guard for PrivateUse1 (before PyTorch's Python one); False,
    with a warning, where it cannot be built or loaded."""
    try:
        library = ctypes.CDLL(str(session.runtime_library(build)))
        return bool(library.lazymlir_register_device_guard())
    except (OSError, RuntimeError) as error:
        log.warning("lazymlir: using PyTorch's Python device guard for lazy_mlir (an error "
                    "raised inside backward may then end the process): the C++ guard did not "
                    "build: %s. Install a C++ compiler (g++) to fix this.",
                    str(error).splitlines()[0][:300])
        return False


def check_autograd_queues(device: str) -> None:
    """Backward for `device` must find a ready queue in the autograd engine.

    The engine makes one queue per index of each non-CPU device once, at the first
    backward of the process; a CPU backward before the device was registered left
    none for it, and a later backward on it failed PyTorch's internal assert
    `device.index() < device_ready_queues_.size()`. A probe backward here starts the
    engine (with our device counted) if it has not started; if it started without
    our device, backward runs on the calling thread from then on (PyTorch's
    `set_multithreading_enabled(False)`: the CPU ready queue), which needs no queue
    of ours.
    """
    leaf = torch.zeros((), device=device, requires_grad=True)
    try:
        # clone: its meta kernel is C++. `leaf * 1`'s is a Python reference, whose
        # first call imports torch._dynamo (~1.2 s of every `import lazymlir`: each
        # compile worker, subprocess and lazymlir-opt run).
        torch.autograd.grad(leaf.clone(), leaf)
    except RuntimeError as error:
        if "device_ready_queues_" not in str(error):
            raise
        log.info("the autograd engine started before %s was registered: backward "
                 "runs on the calling thread", device)
        original = torch.autograd._engine_run_backward

        def run_backward_on_calling_thread(*args, **kwargs):
            with torch.autograd.set_multithreading_enabled(False):
                return original(*args, **kwargs)

        torch.autograd._engine_run_backward = run_backward_on_calling_thread
