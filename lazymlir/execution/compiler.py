"""The compiler driver: an fx-stage graph -> an artifact folder, through the stage registry.

These functions run inside the compile worker (execution/worker_main.py), or
in-process with LAZYMLIR_COMPILE_WORKER=0. `compile_graph` runs every stage of
the target's pipeline (lowering/stages.py), writes each stage's output and a
manifest to the dump folder when asked, and packages the last stage's text as
an artifact (lowering/artifacts.py). `probe` answers "does this one-op graph
lower?" by running the MLIR stages only.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..lowering import artifacts, stages
from ..lowering.front import fx_graph
from ..lowering.errors import LoweringError, save_repro
from ..support.errors import CompileError


@dataclass(frozen=True)
class CompileOptions:
    target: str
    chip: str = "sm_90"
    repro_dir: str | None = None      # where a failing stage's input is written
    dump_dir: str | None = None       # write <dump_dir>/<NN>-<stage>.<ext> + manifest.json
    sync_location: str = "<unknown>"  # the user's line that caused this compile (manifest)
    # "native", or "emulator"/"emulator-verify": the artifact holds CPU builds of the
    # gpu-stage kernels for the emulator driver (Target.kernel_images)
    kernel_images: str = "native"
    # where the cpu target keeps the object code of loop nests for later graphs
    # (lowering/cpu/object_cache.py; None: nowhere)
    object_cache: str | None = None

    def stage_options(self) -> stages.Options:
        return stages.Options(target=self.target, chip=self.chip,
                              repro_dir=self.dump_dir or self.repro_dir)


def _compile_error(error: LoweringError) -> CompileError:
    return CompileError(str(error), stage=error.stage, target=error.target, op=error.op,
                        reproducer=error.reproducer)


class _Dumps:
    """Writes stage outputs to the dump folder; an unwritable folder turns dumps off
    for this graph (with a warning for the user) instead of losing the compile."""

    def __init__(self, folder: str | None):
        self.folder = Path(folder) if folder else None
        self.warnings: list[str] = []

    def write(self, name: str, text: str) -> None:
        if self.folder is None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / name).write_text(text)
        except OSError as error:
            self.warnings.append(f"cannot write IR dumps to {self.folder} (LAZYMLIR_DUMP_DIR or "
                                 f"lazymlir.dump_to): {error}; this graph is not dumped")
            self.folder = None


def compile_graph(fx_text: str, key: str, options: CompileOptions, out_dir: str,
                  on_start=None) -> dict:
    """Run every stage and write the artifact into `out_dir`.

    Returns {"timings": seconds per stage, "warnings": messages for the user}.
    """
    names = stages.PIPELINES[options.target]
    dumps = _Dumps(options.dump_dir)
    timings: dict[str, float] = {}
    began = time.perf_counter()
    cpu_began = _cpu_seconds()
    dumps.write(f"00-fx.{stages.stage('fx').ext}", fx_text)
    kept: dict[str, str] = {}  # the gpu stage's text, for emulator images

    def on_stage(record: stages.StageRecord) -> None:
        timings[record.name] = record.seconds
        if dumps.folder is not None:  # (printing the last stage costs: only when dumping)
            dumps.write(f"{names.index(record.name):02d}-{record.name}.{record.ext}",
                        record.text)
        if record.name == "gpu" and options.kernel_images != "native":
            kept["gpu"] = record.text

    try:
        result = stages.run_stages(fx_text, options.stage_options(), start="fx",
                                   on_stage=on_stage, on_start=on_start)
    except LoweringError as error:
        raise _compile_error(error) from None
    if on_start is not None:
        on_start("package")
    package_began = time.perf_counter()
    try:
        artifacts.package(options.target, result, Path(out_dir),
                          emulator_source=kept.get("gpu"),
                          emulator_verify=options.kernel_images == "emulator-verify",
                          object_cache=options.object_cache)
    except LoweringError as error:
        raise _compile_error(error) from None
    timings["package"] = time.perf_counter() - package_began
    timings["total"] = time.perf_counter() - began
    if dumps.folder is not None:
        manifest = _manifest(fx_text, key, options, timings)
        # (CPU of this process and the tools it ran: compiles of segments run at once in
        # several workers, where wall times overlap)
        manifest["cpu_ms"] = round((_cpu_seconds() - cpu_began) * 1e3, 3)
        dumps.write("manifest.json", json.dumps(manifest, indent=1))
    return {"timings": timings, "warnings": dumps.warnings}


def _cpu_seconds() -> float:
    """CPU time of this process and of its children waited for (`opt`, `llc`, the linker)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _manifest(fx_text: str, key: str, options: CompileOptions, timings: dict) -> dict:
    graph = fx_graph.loads(fx_text)
    return {
        "graph_hash": key,
        "target": options.target,
        "sync_location": options.sync_location,
        "stages": list(stages.PIPELINES[options.target]),
        "timings_ms": {k: round(v * 1e3, 3) for k, v in timings.items()},
        "num_inputs": len(graph["inputs"]),
        "num_scalars": len(graph.get("scalars", [])),
        "num_nodes": len(graph["nodes"]),
        "num_outputs": len(graph["outputs"]),
    }


def probe(fx_text: str, options: CompileOptions, on_start=None) -> str | None:
    """None if the graph lowers through every MLIR stage of the target, else why not."""
    try:
        stages.run_stages(fx_text, options.stage_options(), start="fx",
                          stop=stages.PROBE_STOP[options.target],
                          on_start=on_start)
    except LoweringError as error:
        if error.repro_file:  # a probe's failure is expected: do not keep it
            Path(error.repro_file).unlink(missing_ok=True)
        return f"stage '{error.stage}': {error.detail}"
    return None


def save_repro_input(fx_text: str, options: CompileOptions) -> str:
    """Write a graph that crashed the compiler, for `lazymlir-opt --target=.. FILE`."""
    return save_repro("fx", fx_text, stages.stage("fx").ext, options.repro_dir)
