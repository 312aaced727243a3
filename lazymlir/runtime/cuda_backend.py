"""The cuda target: lazy values in device memory, graphs run by the C++ runtime.

Binds the compiler's CUDA output (kernels as PTX/cubin + an lzrt launch plan)
to the thin C++ runtime (cuda_runtime/, bound in runtime/cuda.py).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path


@cache
def _runtime_or_error():
    try:
        from .cuda import CudaRuntime

        runtime = CudaRuntime.create()
        if runtime.device_count() < 1:
            return None, "the CUDA driver reports no devices"
        return runtime, None
    except (ImportError, OSError, RuntimeError) as error:
        return None, str(error)


def unavailable_reason() -> str | None:
    """None when a CUDA device is usable, else why not."""
    return _runtime_or_error()[1]


def runtime():
    rt, problem = _runtime_or_error()
    if rt is None:
        raise RuntimeError(f"no usable CUDA device: {problem}")
    return rt


class CudaBackend:
    """Lazy values live in device memory (DeviceBuffers from the caching allocator)."""

    target = "cuda"

    def __init__(self, rt=None):
        self.runtime = rt or runtime()

    def upload(self, cpu):
        return self.runtime.copy_in(cpu.contiguous())

    def download(self, data, meta):
        import torch

        out = torch.empty(tuple(meta.shape), dtype=meta.dtype)
        if out.numel():
            self.runtime.copy_out(data, out)
        return out


def _nbytes(shape, dtype) -> int:
    import torch

    count = 1
    for size in shape:
        count *= size
    return count * torch.empty((), dtype=dtype).element_size()


class CudaExecutable:
    """Kernels (PTX, JIT-compiled by the driver, or cubin) + the launch plan that runs them."""

    def __init__(self, plan_text: str, kernels: list[tuple[str, bytes, str]], output_metas,
                 rt=None):
        from .cuda import LaunchPlan

        self.plan_text = plan_text
        self.kernels = kernels
        self.output_metas = output_metas
        self.runtime = rt or runtime()
        self._plan = LaunchPlan(plan_text)
        self._modules = [self.runtime.load_module(image) for _, image, _ in kernels]

    @classmethod
    def from_stage_text(cls, text: str, output_metas, rt=None) -> CudaExecutable:
        from ..lowering.gpu_stages import executable_parts

        plan_text, kernels = executable_parts(text)
        return cls(plan_text, kernels, output_metas, rt)

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        manifest = {"kernels": []}
        for index, (name, image, kind) in enumerate(self.kernels):
            file = f"kernel{index}.{kind}"
            (directory / file).write_bytes(image if isinstance(image, bytes) else image.encode())
            manifest["kernels"].append({"name": name, "file": file, "kind": kind})
        (directory / "plan.txt").write_text(self.plan_text)
        tmp = directory / "cuda.json.tmp"
        tmp.write_text(json.dumps(manifest))
        tmp.replace(directory / "cuda.json")  # written last: marks a complete entry

    @classmethod
    def load(cls, directory: Path, output_metas, rt=None) -> CudaExecutable | None:
        """From the on-disk cache; imports no compiler module."""
        directory = Path(directory)
        if not (directory / "cuda.json").exists():
            return None
        manifest = json.loads((directory / "cuda.json").read_text())
        kernels = [(k["name"], (directory / k["file"]).read_bytes(), k["kind"])
                   for k in manifest["kernels"]]
        return cls((directory / "plan.txt").read_text(), kernels, output_metas, rt)

    def run(self, inputs):
        outputs = [self.runtime.alloc(max(_nbytes(shape, dtype), 1))
                   for shape, dtype in self.output_metas]
        self._plan.run(self._modules, list(inputs) + outputs, self.runtime)
        return outputs
