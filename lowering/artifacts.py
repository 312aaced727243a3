"""The last step of a compile: the final stage's text -> an artifact folder.

An artifact is a folder of plain files plus `artifact.json` (written last, so
its presence marks a complete artifact). It is what the compile worker hands
back, what the disk cache keeps, and all a target needs to run the graph:

    cpu   executable.so                      (llvm stage -> llc -> cc)
    cuda  plan.txt + kernel<N>.ptx|.cubin    (ptx/cubin stage -> launch plan + images)
          or plan.txt + kernel<N>.emulator    (for the emulator driver: the same gpu
                                               modules built for the CPU from the gpu
                                               stage, lowering/gpu/emulator.py)

Targets load artifacts without importing any of lowering. `artifact.json`
records each file's size and SHA-256, so a truncated or altered file (a full
disk, a copied cache folder) is detected before anything is dlopen'ed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

FORMAT = 1


def package(target: str, final, directory: Path,
            emulator_source: str | None = None, emulator_verify: bool = False) -> Path:
    """Write the artifact for `target` from its last stage's output into `directory`:
    `final` is that stage's text, or a stages.Result (the cpu target then translates
    its LLVM dialect module in-process, without printing and parsing it again).

    cuda: with `emulator_source` (the graph's `gpu`-stage text) the kernel images are
    emulator images built from it (with runtime bounds checks if `emulator_verify`)
    instead of the PTX/cubin of `final_text`; the launch plan is the same. Raises
    LoweringError (stage "emulator") when the CPU build fails."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"format": FORMAT, "target": target}
    if target == "cpu":
        from .cpu.codegen import SO_NAME, build_shared_object

        module = getattr(final, "module", None)
        build_shared_object(module if module is not None else _text(final), directory)
        manifest["files"] = [SO_NAME]
    elif target == "cuda":
        from .gpu.stages import executable_parts

        plan_text, kernels = executable_parts(_text(final))
        if emulator_source is not None:
            kernels = _emulator_kernels(emulator_source, kernels, emulator_verify)
        (directory / "plan.txt").write_text(plan_text)
        manifest["kernels"] = []
        for index, (name, image, kind) in enumerate(kernels):
            file = f"kernel{index}.{kind}"
            (directory / file).write_bytes(image if isinstance(image, bytes) else image.encode())
            manifest["kernels"].append({"name": name, "file": file, "kind": kind})
        manifest["files"] = ["plan.txt"] + [k["file"] for k in manifest["kernels"]]
    else:
        raise ValueError(f"unknown target '{target}'")
    manifest["digests"] = {name: file_digest(directory / name) for name in manifest["files"]}
    tmp = directory / "artifact.json.tmp"
    tmp.write_text(json.dumps(manifest))
    tmp.replace(directory / "artifact.json")
    return directory


def _text(final) -> str:
    return final if isinstance(final, str) else final.text


def _emulator_kernels(gpu_text: str, native: list, verify: bool) -> list:
    from .errors import LoweringError
    from .gpu.emulator import emulator_images_from_text
    from .mlir_runner import PipelineFailure

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


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
