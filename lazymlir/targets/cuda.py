"""The cuda target: lazy values in device memory, graphs run by the C++ runtime.

The artifact folder (written by lowering/artifacts.py) holds `plan.txt` (the
launch plan in the runtime's text format) and one kernel image per gpu.module
(`kernel<N>.ptx` or `.cubin`; `kernel<N>.emulator`, the CPU build of the same kernels,
when the target runs on the emulator driver), listed in `artifact.json`. Nothing here
parses compiler IR: the runtime (cuda_runtime/, bound in cuda_driver.py) executes the
plan.

The driver (LAZYMLIR_CUDA_DRIVER) is `real` (libcuda.so.1), `emulator` (every kernel
runs on the CPU, fresh allocations are NaN-poisoned: docs/cuda_runtime.md) or `fake`
(host memory, launches recorded, no kernel runs: results are meaningless; for the
runtime's own bookkeeping).

DLPack (export_dlpack/import_dlpack; user API in lazymlir/dlpack.py): values are
handed out as kDLCUDA tensors over the runtime's own buffers and foreign kDLCUDA
memory is used in place, both without a copy; docs/cuda_runtime.md has the lifetime
and stream rules.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import torch

from . import dlpack_abi
from .base import Executable, OutputMetas, Target
from . import cuda_driver
from .cuda_driver import CudaRuntime, LaunchPlan, emulator

DRIVERS = ("real", "emulator", "fake")


@cache
def _runtime_or_error(runtime_lib: str | None = None, driver: str = "real"):
    if driver not in DRIVERS:
        raise ValueError(f"unknown CUDA driver {driver!r}; use {', '.join(DRIVERS)}")
    try:
        runtime = CudaRuntime.create(library=runtime_lib, fake=driver == "fake",
                                     emulator=driver == "emulator",
                                     ordinal=local_ordinal(driver, runtime_lib))
        if runtime.device_count() < 1:
            return None, "the CUDA driver reports no devices"
        return runtime, None
    except (ImportError, OSError, RuntimeError) as error:
        return None, str(error)


def local_ordinal(driver: str = "real", runtime_lib: str | None = None) -> int:
    """The GPU of this process: LOCAL_RANK's in a process torchrun started (modulo the
    GPUs the driver sees, as DeviceMesh's fallback picks: 0 when each rank sees one,
    e.g. CUDA_VISIBLE_DEVICES set per rank), else GPU 0. The emulator and fake drivers
    have one device."""
    rank = os.environ.get("LOCAL_RANK", "")
    if driver != "real" or not rank.strip().isdigit():
        return 0
    cuda_driver.load_library(runtime_lib)
    return int(rank) % max(cuda_driver.device_count(), 1)


def unavailable_reason(runtime_lib: str | None = None, driver: str = "real") -> str | None:
    """None when a CUDA device is usable (on `driver`), else why not."""
    return _runtime_or_error(runtime_lib, driver)[1]


def runtime(runtime_lib: str | None = None, driver: str = "real") -> CudaRuntime:
    """The process's runtime on `driver` (one per library and driver)."""
    rt, problem = _runtime_or_error(runtime_lib, driver)
    if rt is None:
        raise RuntimeError(f"no usable CUDA device: {problem}")
    return rt


def _nbytes(shape, dtype) -> int:
    count = 1
    for size in shape:
        count *= size
    return count * torch.empty((), dtype=dtype).element_size()


class CudaExecutable(Executable):
    """Kernels (PTX, JIT-compiled by the driver, or cubin) + the launch plan that runs them."""

    def __init__(self, plan_text: str, kernels: list[tuple[str, bytes, str]],
                 output_metas: OutputMetas, rt: CudaRuntime):
        self.plan_text = plan_text
        self.kernels = kernels
        self.output_metas = output_metas
        self.runtime = rt
        emulator = rt.device_info()["emulator"]
        for name, _, kind in kernels:
            if (kind == "emulator") != emulator:
                raise ValueError(
                    f"kernel module {name} is a {kind} image, but the runtime's driver "
                    + ("is the emulator (it runs emulator images only)" if emulator else
                       "runs PTX/cubin (emulator images need LAZYMLIR_CUDA_DRIVER=emulator)"))
        self._plan = LaunchPlan(plan_text)
        self._modules = [self.runtime.load_module(image) for _, image, _ in kernels]

    @classmethod
    def load(cls, directory: Path, output_metas: OutputMetas, rt: CudaRuntime) -> CudaExecutable:
        directory = Path(directory)
        manifest = json.loads((directory / "artifact.json").read_text())
        kernels = [(k["name"], (directory / k["file"]).read_bytes(), k["kind"])
                   for k in manifest["kernels"]]
        return cls((directory / "plan.txt").read_text(), kernels, output_metas, rt)

    def run(self, inputs):
        outputs = [self.runtime.alloc(max(_nbytes(shape, dtype), 1))
                   for shape, dtype in self.output_metas]
        self._plan.run(self._modules, list(inputs) + outputs, self.runtime)
        return outputs


class CudaTarget(Target):
    """Lazy values live in device memory (DeviceBuffers from the caching allocator)."""

    name = "cuda"

    def __init__(self, rt: CudaRuntime | None = None, runtime_lib: str | None = None,
                 chip: str = "sm_90", driver: str = "real", emulator_verify: bool = False):
        self.runtime = rt or runtime(runtime_lib, driver)
        self.chip = chip
        info = self.runtime.device_info()
        self.driver = "emulator" if info["emulator"] else driver
        self.ordinal = info["ordinal"]
        if self.driver == "emulator":
            self.kernel_images = "emulator-verify" if emulator_verify else "emulator"

    @classmethod
    def from_settings(cls, settings) -> CudaTarget:
        """The target LAZYMLIR_CUDA_* settings describe (driver, chip, sync, emulator options)."""
        target = cls(runtime_lib=settings.runtime_lib, chip=settings.cuda_chip,
                     driver=settings.cuda_driver, emulator_verify=settings.emulator_verify)
        # Both are process-wide states of one runtime/driver: set them either way.
        target.runtime.set_sync(settings.cuda_sync)
        if target.driver == "emulator":
            emulator.set_reverse_blocks(settings.emulator_reverse)
        return target

    def fingerprint(self) -> str:
        # The runtime library reads the plans and calls the emulator's kernel images.
        runtime = f"rt{cuda_driver.library_digest()}"
        # Emulator artifacts hold CPU builds of the kernels, not PTX: never shared.
        if self.kernel_images != "native":
            return f"cuda-{self.chip}-{self.kernel_images}-{runtime}"
        return f"cuda-{self.chip}-{runtime}"

    def upload(self, cpu: torch.Tensor):
        return self.runtime.copy_in(cpu.contiguous())

    def download(self, data, meta: torch.Tensor) -> torch.Tensor:
        out = torch.empty(tuple(meta.shape), dtype=meta.dtype)
        if out.numel():
            self.runtime.copy_out(data, out)
        return out

    def borrow(self, tensor: torch.Tensor):
        """A torch.cuda tensor is used in place (DLPack, made contiguous by torch on its
        device if it is not); a CPU tensor is uploaded."""
        if tensor.device.type == "cuda":
            return self.import_dlpack(tensor.detach().contiguous())[0]
        return self.upload(tensor)

    def give_back(self, data, meta, device: torch.device | None = None) -> torch.Tensor:
        """An output buffer as a CPU tensor, or as a torch.cuda tensor over the same
        device memory when `device` is a CUDA device (DLPack, no copy: the tensor
        holds a reference to the buffer, returned to the allocator when torch frees it)."""
        if device is None or torch.device(device).type != "cuda":
            return super().give_back(data, meta)
        shape, dtype = meta
        # torch reads it on its current stream (the protocol's 1: the legacy default).
        stream = torch.cuda.current_stream(device).cuda_stream or 1
        # Legacy capsule: the output is the consumer's alone, so it is writable.
        capsule = self.export_dlpack(data, torch.empty(shape, dtype=dtype, device="meta"),
                                     stream=stream)
        return torch.from_dlpack(capsule)

    def dlpack_device(self) -> tuple[int, int]:
        return (dlpack_abi.KDLCUDA, self.ordinal)

    def export_dlpack(self, data, meta: torch.Tensor, *, versioned: bool = False,
                      stream: int | None = -1):
        code, bits = dlpack_abi.dtype_code(meta.dtype)
        managed = self.runtime.dlpack_export(
            data, list(meta.shape), list(meta.stride()), code, bits, versioned=versioned,
            flags=dlpack_abi.FLAG_READ_ONLY if versioned else 0,
            consumer_stream=dlpack_abi.cuda_stream(stream))
        return dlpack_abi.make_capsule(managed, versioned)

    def _check_device(self, device: tuple[int, int]) -> None:
        if device[0] != dlpack_abi.KDLCUDA:
            raise ValueError(f"a DLPack tensor on {dlpack_abi.device_name(device)} cannot be "
                             f"used in place by the cuda target (it takes kDLCUDA tensors, "
                             f"and copies kDLCPU ones)")
        if device[1] != self.ordinal:
            raise ValueError(f"a DLPack tensor on {dlpack_abi.device_name(device)} cannot be "
                             f"used by the cuda target, whose runtime is on CUDA device "
                             f"{self.ordinal}: move it to cuda:{self.ordinal} first")

    def import_dlpack(self, source):
        """kDLCUDA memory of this runtime's device is used in place: the runtime wraps
        the pointer (never freed by our allocator) and the producer's deleter runs once,
        when the last lazy value using it is dropped. The producer is asked to order its
        pending work before this runtime's stream (`__dlpack__(stream=our stream)`).
        kDLCPU tensors are copied (uploaded), and so are kDLCUDA ones not 16-byte aligned
        (a slice's view). Non-contiguous kDLCUDA tensors are refused (make them
        contiguous on the producer's side)."""
        device = dlpack_abi.source_device(source)
        if device[0] == dlpack_abi.KDLCPU:
            cpu = torch.from_dlpack(source)
            return self.upload(cpu), tuple(cpu.shape), cpu.dtype
        self._check_device(device)
        tensor = dlpack_abi.consume(dlpack_abi.capsule_of(source, self.runtime.stream()))
        try:  # until the runtime adopts it, the tensor is ours to release
            self._check_device(tensor.device)
            if not tensor.is_compact():
                raise ValueError(
                    f"a DLPack tensor with strides {tensor.strides} for shape "
                    f"{tensor.shape} cannot be used in place (lazy values are dense, "
                    f"row-major): make it contiguous on the producer's side first")
            if tensor.nbytes == 0:
                tensor.release()
                return self.runtime.alloc(1), tensor.shape, tensor.dtype
        except BaseException:
            tensor.release()
            raise
        buf = self.runtime.adopt_external(tensor.data, tensor.nbytes, tensor.deleter,
                                          tensor.managed)
        if tensor.data % cuda_driver.KERNEL_ARG_ALIGN:
            # Kernels may load 16 bytes at once from a buffer's start (PTX `.align 16`
            # parameters, lowering/gpu/kernels/vectorize.py); our own buffers are 256-byte
            # aligned, a view into the producer's memory need not be: copy it.
            own = self.runtime.alloc(tensor.nbytes)
            self.runtime.copy(own, buf, tensor.nbytes)
            self.runtime.synchronize()  # read before the producer gets its memory back
            buf.free()
            buf = own
        return buf, tensor.shape, tensor.dtype

    def load(self, artifact: Path, output_metas: OutputMetas, in_place=()) -> CudaExecutable:
        # The cuda pipeline compiles no in-place updates (graph_inputs.protect_inputs):
        # the caller copies them (lazymlir/dynamo.py).
        return CudaExecutable.load(artifact, output_metas, self.runtime)
