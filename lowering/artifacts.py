"""The last step of a compile: the final stage's text -> an artifact folder.

An artifact is a folder of plain files plus `artifact.json` (written last, so
its presence marks a complete artifact). It is what the compile worker hands
back, what the disk cache keeps, and all a target needs to run the graph:

    cpu   executable.so                      (llvm stage -> llc -> cc)
    cuda  plan.txt + kernel<N>.ptx|.cubin    (ptx/cubin stage -> launch plan + images)
          or plan.txt + kernel<N>.emulator    (for the emulator driver: the same gpu
                                               modules built for the CPU from the gpu
                                               stage, lowering/gpu/emulator.py)

Each target's backend writes its files (`package` in lowering/<target>/backend.py);
this module adds the manifest. Targets load artifacts without importing any of
lowering. `artifact.json`
records each file's size and SHA-256, so a truncated or altered file (a full
disk, a copied cache folder) is detected before anything is dlopen'ed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from . import stages

FORMAT = 1


def package(target: str, final, directory: Path, **options) -> Path:
    """Write the artifact for `target` from its last stage's output into `directory`:
    `final` is that stage's text, or a stages.Result (the cpu target then translates
    its LLVM dialect module in-process, without printing and parsing it again).
    `options` go to the target's backend (cuda: `emulator_source`, the graph's
    `gpu`-stage text, makes the kernel images emulator images built from it, with
    runtime bounds checks if `emulator_verify`; lowering/gpu/backend.py; cpu:
    `object_cache`, a folder of loop nests' object code shared by graphs,
    lowering/cpu/object_cache.py)."""
    packer = stages.backend(target).package  # ValueError for an unknown target
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"format": FORMAT, "target": target}
    manifest.update(packer(final, directory, **options))
    manifest["digests"] = {name: file_digest(directory / name) for name in manifest["files"]}
    tmp = directory / "artifact.json.tmp"
    tmp.write_text(json.dumps(manifest))
    tmp.replace(directory / "artifact.json")
    return directory


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
