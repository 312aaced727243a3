"""The interface a compile target implements: its stages after `bufferized`, its part in
the `bufferized` stage, and the packaging of its last stage's output.

A target is one package `lowering/<name>/` whose `backend.py` defines `BACKEND`, plus one
line in the backend table of `lowering/stages.py`. The registry assembles each target's
pipeline as the front stages, `bufferized`, then `BACKEND.stages`. Each stage carries
the contract its output is checked against, so a backend's contracts sit next to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .bufferize.stage import Preparation
from .mlir_runner import PipelineFailure

# (stage name, module operation) -> None when the output satisfies the stage's
# contract, else a message naming the offending op.
Contract = Callable[[str, Any], "str | None"]


@dataclass(frozen=True)
class Stage:
    name: str
    ext: str                                   # file extension of its dumped output
    run: Callable[[str, Any], Any] | None      # (input text, stages.Options) -> module
    doc: str                                   #   (run is None for the source stage, fx)
    contract: Contract | None = None
    # What the stage raises for "the compiler cannot do this" (anything else is a
    # bug in lazymlir and propagates unchanged).
    errors: tuple[type[BaseException], ...] = (PipelineFailure,)


# package(final, directory, **options) -> the manifest entries of the files it wrote
# (at least "files", their names inside `directory`). `final` is the last stage's text
# or a stages.Result; `options` are packaging options (the cuda backend's emulator
# images), which a backend ignores when they are not its own.
Package = Callable[..., dict]


@dataclass(frozen=True)
class Backend:
    target: str                     # the name users pick (`--target`, the device's)
    stages: tuple[Stage, ...]       # after `bufferized`, in order
    bufferize: Preparation          # its part in the shared `bufferized` stage
    package: Package
    # Where a probe ("does this op lower?") stops: its last stage in MLIR, before
    # code generation tools (llc, ptxas) that only fail when MLIR already did.
    probe_stop: str
    # Stages after the pipeline's last one, run only when asked for (`--to`).
    optional_stages: tuple[Stage, ...] = ()


def final_text(final) -> str:
    """The text of a last stage's output given as text or as a stages.Result."""
    return final if isinstance(final, str) else final.text

