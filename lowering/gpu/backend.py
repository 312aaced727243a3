"""The cuda backend: `bufferized` -> `gpu` -> `plan` -> `nvvm` -> `ptx` [-> `cubin`], packaged
as a launch plan (`plan.txt`) and one kernel image per gpu.module.

The kernel images are the PTX/cubin of the last stage, or emulator images: the same gpu
modules built for the CPU from the `gpu` stage's text (emulator.py), for the emulator
driver.
"""

from __future__ import annotations

from pathlib import Path

from . import stages, transpose_folding
from .contracts import check_contract
from .emulator import emulator_images_from_text
from ..backend import Backend, Stage, final_text
from ..bufferize.stage import Preparation
from ..errors import LoweringError
from ..mlir_runner import PipelineFailure


def package(final, directory: Path, emulator_source: str | None = None,
            emulator_verify: bool = False, **_options) -> dict:
    """With `emulator_source` (the graph's `gpu`-stage text) the kernel images are emulator
    images built from it (with runtime bounds checks if `emulator_verify`) instead of the
    PTX/cubin of `final`; the launch plan is the same. Raises LoweringError (stage
    "emulator") when the CPU build fails."""
    plan_text, kernels = stages.executable_parts(final_text(final))
    if emulator_source is not None:
        kernels = _emulator_kernels(emulator_source, kernels, emulator_verify)
    (directory / "plan.txt").write_text(plan_text)
    entries = []
    for index, (name, image, kind) in enumerate(kernels):
        file = f"kernel{index}.{kind}"
        (directory / file).write_bytes(image if isinstance(image, bytes) else image.encode())
        entries.append({"name": name, "file": file, "kind": kind})
    return {"kernels": entries, "files": ["plan.txt"] + [k["file"] for k in entries]}


def _emulator_kernels(gpu_text: str, native: list, verify: bool) -> list:
    try:
        images = emulator_images_from_text(gpu_text, verify)
    except (PipelineFailure, RuntimeError) as error:  # RuntimeError: llc/cc failed
        raise LoweringError("emulator", "cuda", f"building the kernels for the CPU: {error}",
                            None) from None
    names = [name for name, _ in images]
    if names != [name for name, _, _ in native]:  # the plan indexes modules by position
        raise LoweringError("emulator", "cuda", f"emulator modules {names} differ from the "
                            f"PTX modules {[n for n, _, _ in native]}", None)
    return [(name, image, "emulator") for name, image in images]


BACKEND = Backend(
    target="cuda",
    stages=(
        Stage("gpu", "mlir", stages.to_gpu,
              "CUDA: outlined gpu.module kernels mapped to blocks/threads + host launches",
              check_contract),
        Stage("plan", "mlir", stages.to_plan,
              "CUDA: host side as an lzrt launch plan next to the kernels", check_contract),
        Stage("nvvm", "mlir", stages.to_nvvm, "CUDA: kernels in the NVVM/LLVM dialects",
              check_contract),
        Stage("ptx", "mlir", stages.to_ptx, "CUDA: kernels as PTX (gpu.binary) + plan",
              check_contract),
    ),
    # No input is updated in place: the runtime passes every output buffer and the
    # caller copies results into inputs (graph_inputs.protect_inputs). The matmul
    # kernels read operands through their indexing maps: no transpose copies.
    bufferize=Preparation(in_place=False, before=transpose_folding.fold_transposes),
    package=package,
    probe_stop="plan",
    # PTX is JIT-compiled by the driver; cubin needs ptxas.
    optional_stages=(
        Stage("cubin", "mlir", stages.to_cubin, "CUDA: kernels as cubin (needs ptxas) + plan",
              check_contract),
    ),
)
