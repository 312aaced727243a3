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
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import torch

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
                                     emulator=driver == "emulator")
        if runtime.device_count() < 1:
            return None, "the CUDA driver reports no devices"
        return runtime, None
    except (ImportError, OSError, RuntimeError) as error:
        return None, str(error)


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
        self.driver = "emulator" if self.runtime.device_info()["emulator"] else driver
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

    def load(self, artifact: Path, output_metas: OutputMetas) -> CudaExecutable:
        return CudaExecutable.load(artifact, output_metas, self.runtime)
