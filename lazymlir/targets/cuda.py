"""The cuda target: lazy values in device memory, graphs run by the C++ runtime.

The artifact folder (written by lowering/artifacts.py) holds `plan.txt` (the
launch plan in the runtime's text format) and one kernel image per gpu.module
(`kernel<N>.ptx` or `.cubin`), listed in `artifact.json`. Nothing here parses
compiler IR: the runtime (cuda_runtime/, bound in cuda_driver.py) executes the
plan.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import torch

from .base import Executable, OutputMetas, Target
from .cuda_driver import CudaRuntime, LaunchPlan


@cache
def _runtime_or_error(runtime_lib: str | None = None):
    try:
        runtime = CudaRuntime.create(library=runtime_lib)
        if runtime.device_count() < 1:
            return None, "the CUDA driver reports no devices"
        return runtime, None
    except (ImportError, OSError, RuntimeError) as error:
        return None, str(error)


def unavailable_reason(runtime_lib: str | None = None) -> str | None:
    """None when a CUDA device is usable, else why not."""
    return _runtime_or_error(runtime_lib)[1]


def runtime(runtime_lib: str | None = None) -> CudaRuntime:
    rt, problem = _runtime_or_error(runtime_lib)
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
                 chip: str = "sm_90"):
        self.runtime = rt or runtime(runtime_lib)
        self.chip = chip

    def fingerprint(self) -> str:
        return f"cuda-{self.chip}"

    def upload(self, cpu: torch.Tensor):
        return self.runtime.copy_in(cpu.contiguous())

    def download(self, data, meta: torch.Tensor) -> torch.Tensor:
        out = torch.empty(tuple(meta.shape), dtype=meta.dtype)
        if out.numel():
            self.runtime.copy_out(data, out)
        return out

    def load(self, artifact: Path, output_metas: OutputMetas) -> CudaExecutable:
        return CudaExecutable.load(artifact, output_metas, self.runtime)
