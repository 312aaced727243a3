"""Graph -> executable, through the lowering stage registry, with caches and dumps.

`get_executable(graph)` is what sync points call. The structural hash of the
fx-stage graph (ops, shapes, dtypes, scalar arguments, target; never tensor
values) keys an in-memory LRU cache and, with LAZYMLIR_CACHE_DIR, an on-disk
one. A miss runs every stage of the target's pipeline (lowering/stages.py)
and, with LAZYMLIR_DUMP_DIR, writes each stage's output and a manifest.
"""

from __future__ import annotations

import json
import logging
import os
import time
import traceback
from collections import OrderedDict
from pathlib import Path

import torch

from . import backend, config, metrics
from .lowering import fx_graph, stages

log = logging.getLogger("lazymlir.compiler")

_memory: OrderedDict[str, object] = OrderedDict()
_dump_override: list[str | None] = []


def _options(target: str | None = None) -> stages.Options:
    return stages.Options(target=target or backend.target(), chip=config.settings().cuda_chip)


def output_metas(graph: dict) -> list[tuple[list[int], torch.dtype]]:
    metas = []
    for ref in graph["outputs"]:
        kind, index, out = ref["ref"]
        desc = graph["inputs"][index] if kind == "input" else graph["nodes"][index]["outputs"][out]
        metas.append((desc["shape"], fx_graph.dtype_from_name(desc["dtype"])))
    return metas


def get_executable(graph: dict):
    target = backend.target()
    key = fx_graph.structural_hash(graph, target)
    executable = _memory.get(key)
    if executable is not None:
        _memory.move_to_end(key)
        metrics.inc("CachedCompile")
        return executable
    executable = _load_from_disk(key, graph, target)
    if executable is not None:
        metrics.inc("CachedCompile")
        metrics.inc("DiskCacheHit")
    else:
        metrics.inc("UncachedCompile")
        with metrics.timed("CompileTime"):
            executable = compile_graph(graph, key, target)
    _memory[key] = executable
    if len(_memory) > config.settings().graph_cache_size:
        _memory.popitem(last=False)
    return executable


def compile_graph(graph: dict, key: str, target: str):
    """Run every stage for `target` and build the executable; dumps when asked."""
    fx_text = fx_graph.dumps(graph)
    dump = _dump_dir(key)
    timings: dict[str, float] = {}
    began = time.perf_counter()
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / f"00-fx.{stages.stage('fx').ext}").write_text(fx_text)
    names = stages.PIPELINES[target]

    def on_stage(record: stages.StageRecord) -> None:
        timings[record.name] = record.seconds
        if dump is not None:
            (dump / f"{names.index(record.name):02d}-{record.name}.{record.ext}").write_text(
                record.text)

    options = stages.Options(target=target, chip=config.settings().cuda_chip,
                             repro_dir=str(dump) if dump is not None else None)
    result = stages.run_stages(fx_text, options, start="fx", on_stage=on_stage)
    executable = _build_executable(result.text, graph, target)
    timings["total"] = time.perf_counter() - began
    if dump is not None:
        _write_manifest(dump, key, target, graph, timings)
    _save_to_disk(key, target, executable, graph)
    log.debug("compiled graph %s for %s in %.1f ms", key, target, 1e3 * timings["total"])
    return executable


def _build_executable(final_text: str, graph: dict, target: str):
    if target == "cuda":
        from .runtime.cuda_backend import CudaExecutable

        return CudaExecutable.from_stage_text(final_text, output_metas(graph))
    from .runtime.cpu import CpuExecutable

    return CpuExecutable.compile(final_text, output_metas(graph))


def check_lowerable(graph: dict) -> str | None:
    """None if `graph` lowers through every MLIR stage of the active target, else why."""
    options = _options()
    try:
        stages.run_stages(fx_graph.dumps(graph), options, start="fx",
                          stop="llvm" if options.target == "cpu" else "plan")
    except stages.LoweringError as error:
        try:
            os.unlink(error.repro_file)  # a probe's failure is expected; keep /tmp clean
        except (OSError, TypeError):
            pass
        return f"stage '{error.stage}': {error.detail}"
    return None


# ------------------------------------------------------------------ dumps

class dump_to:
    """Context manager: dump every graph compiled inside it to `directory`."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = str(directory)

    def __enter__(self):
        _dump_override.append(self.directory)
        return Path(self.directory)

    def __exit__(self, *exc):
        _dump_override.pop()
        return False


def _dump_dir(key: str) -> Path | None:
    root = _dump_override[-1] if _dump_override else config.settings().dump_dir
    return Path(root) / key if root else None


def _sync_location() -> str:
    """The user's frame that triggered this compile (outside lazymlir and torch)."""
    here = str(Path(__file__).resolve().parent.parent)
    torch_root = str(Path(torch.__file__).resolve().parent)
    for frame in reversed(traceback.extract_stack()):
        path = str(Path(frame.filename).resolve())
        if not path.startswith((here + os.sep + "lazymlir", here + os.sep + "lowering",
                                torch_root)):
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "<unknown>"


def _write_manifest(dump: Path, key: str, target: str, graph: dict, timings: dict) -> None:
    manifest = {
        "graph_hash": key,
        "target": target,
        "sync_location": _sync_location(),
        "stages": list(stages.PIPELINES[target]),
        "timings_ms": {k: round(v * 1e3, 3) for k, v in timings.items()},
        "num_inputs": len(graph["inputs"]),
        "num_nodes": len(graph["nodes"]),
        "num_outputs": len(graph["outputs"]),
    }
    (dump / "manifest.json").write_text(json.dumps(manifest, indent=1))


# ------------------------------------------------------------ disk cache

def _cache_path(key: str, target: str) -> Path | None:
    root = config.settings().cache_dir
    return Path(root) / f"{key}-{target}" if root else None


def _save_to_disk(key: str, target: str, executable, graph: dict) -> None:
    path = _cache_path(key, target)
    if path is None:
        return
    path.mkdir(parents=True, exist_ok=True)
    (path / "graph.fx.json").write_text(fx_graph.dumps(graph))
    executable.save(path)  # writes its files atomically; their presence marks the entry


def _load_from_disk(key: str, graph: dict, target: str):
    path = _cache_path(key, target)
    if path is None:
        return None
    try:
        if target == "cuda":
            from .runtime.cuda_backend import CudaExecutable

            return CudaExecutable.load(path, output_metas(graph))
        from .runtime.cpu import CpuExecutable

        if not (path / "executable.so").exists():
            return None
        return CpuExecutable.load(path, output_metas(graph))
    except (OSError, RuntimeError, ValueError) as error:
        log.warning("ignoring unreadable cache entry %s: %s", path, error)
        return None


def clear_memory_cache() -> None:
    _memory.clear()
