"""The one interface every target implements.

A target owns where lazy values live and how a compiled graph runs:

    upload(cpu_tensor) -> data          host tensor -> target buffer
    download(data, meta) -> cpu_tensor  target buffer -> host tensor
    load(artifact_dir, output_metas, in_place) -> Executable
                                        a compiled artifact (what lowering.artifacts
                                        wrote into a folder) -> something that runs
    Executable.run(list[data]) -> list[data]

Targets never parse compiler IR and never import the compiler: the lowering
hands them a folder of files (a `.so`; or kernels + a launch plan), which is
also exactly what the disk cache keeps.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from pathlib import Path

import torch

OutputMetas = list[tuple[list[int], torch.dtype]]


class CompiledCheckFailed(RuntimeError):
    """A run-time check inside compiled code failed (a torch-mlir `cf.assert`: an index
    out of bounds, a zero where the lowering needs none; lowering/cpu/asserts.py). The
    outputs are not to be used: the caller runs the graph eagerly instead, which raises
    eager's own error or gives eager's result."""


class Executable(ABC):
    # (input, output) pairs the executable updates in place: it writes output `output`
    # into input `input`'s memory and returns that input in its place (a strided input:
    # the dense copy it wrote). The caller copies whatever output is not its own tensor
    # into it, as it does the in-place updates of other plans (lazymlir/dynamo.py).
    in_place: tuple[tuple[int, int], ...] = ()
    # Whether a run may raise CompiledCheckFailed (its code holds run-time checks).
    checks_at_run_time: bool = False
    # run(inputs, scalars) takes the graph's scalar inputs as Python floats (else the
    # caller passes them as 0-d float64 buffers after the inputs).
    takes_scalars = False
    # Whether `start(inputs, scalars)` runs a call on a native thread of the target's,
    # returning a handle whose `result()` waits for the outputs and `seconds()` says
    # how long the code ran (cpu: without the GIL, targets/cpu_background.py); and
    # `prepare(inputs, scalars, frames, pool)` makes a call ready without starting it,
    # for the target's `start_calls` (a chain of calls run in order on that thread).
    starts_natively = False

    @abstractmethod
    def run(self, inputs: list) -> list:
        """Run on target buffers (graph inputs, in order); returns the output buffers."""


class Target(ABC):
    name: str
    # What the compiler puts in this target's artifacts besides the target's own code:
    # "native" (PTX for cuda), or "emulator"/"emulator-verify" (CPU builds of the kernels
    # for the emulator driver; lowering/artifacts.py).
    kernel_images: str = "native"

    @abstractmethod
    def upload(self, cpu: torch.Tensor):
        """A dense contiguous copy of `cpu` in this target's memory."""

    @abstractmethod
    def download(self, data, meta: torch.Tensor) -> torch.Tensor:
        """A new CPU tensor holding `data` (shape/dtype from `meta`)."""

    def fingerprint(self) -> str:
        """What compiled artifacts depend on besides the graph (the disk cache keys on it)."""
        return self.name

    # Buffers are the caller's CPU tensors both ways: `borrow` and `give_back` need not
    # be called (the torch.compile path skips them, ~0.4 us per tensor per call).
    plain_cpu_tensors = False
    # Its executables may run on another thread than the one that loaded them (the
    # execution thread of mark_step()'s background runs, execution/runs.py). Not the
    # cuda target's: its driver context is current on the thread that made it.
    runs_in_background = False

    def start_calls(self, calls: list):
        """Run calls its executables `prepare`d (those that start natively) in order on
        the target's native thread; a handle whose `wait()` waits for them all and
        `seconds()` says how long their code ran."""
        raise NotImplementedError(f"the {self.name} target starts no native calls")

    def borrow(self, cpu: torch.Tensor):
        """`cpu` as an input buffer for one run (torch.compile path); may share its memory."""
        return self.upload(cpu)

    def give_back(self, data, meta, device: torch.device | None = None) -> torch.Tensor:
        """An output buffer of a run as a CPU tensor (torch.compile path); targets that
        can hand it out on `device` in place (cuda: a torch.cuda tensor) do so."""
        shape, dtype = meta
        return self.download(data, torch.empty(shape, dtype=dtype, device="meta"))

    def export_dlpack(self, data, meta: torch.Tensor, *, versioned: bool = False,
                      stream: int | None = -1):
        """A DLPack capsule over `data` (a materialized value shaped like `meta`), no copy;
        "dltensor_versioned" (DLPack 1.0, read-only flag set) when `versioned`. `stream`
        is the protocol's argument: the consumer's stream, -1 if it names none."""
        raise NotImplementedError(f"the {self.name} target has no DLPack export")

    def import_dlpack(self, source) -> tuple[object, tuple[int, ...], torch.dtype]:
        """(data, shape, dtype) of a DLPack tensor (an object with `__dlpack__` or a
        capsule) as a value of this target: the producer's memory where the target can
        use it in place, else a copy."""
        raise NotImplementedError(f"the {self.name} target has no DLPack import")

    def dlpack_device(self) -> tuple[int, int]:
        """(DLDeviceType, device id) of this target's values."""
        raise NotImplementedError(f"the {self.name} target has no DLPack device")

    @abstractmethod
    def load(self, artifact: Path, output_metas: OutputMetas,
             in_place: tuple[tuple[int, int], ...] = ()) -> Executable:
        """The executable stored in the folder `artifact` (raises OSError/ValueError if bad).
        `in_place`: the graph's in-place pairs, which a target whose compiled code
        writes them into their inputs honours (the cpu target)."""

    def is_complete(self, artifact: Path) -> bool:
        """Whether `artifact` holds every file its manifest lists, intact (size and
        SHA-256): a truncated `.so` must never reach dlopen."""
        try:
            manifest = json.loads((Path(artifact) / "artifact.json").read_text())
            if manifest.get("target") != self.name:
                return False
            for name, digest in manifest["digests"].items():
                data = (Path(artifact) / name).read_bytes()
                if hashlib.sha256(data).hexdigest() != digest:
                    return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        return True
