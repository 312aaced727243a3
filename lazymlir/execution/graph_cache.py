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

import logging
import os
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path

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


def disk_entry(cache_dir: str | None, key: str, fingerprint: str) -> Path | None:
    """The entry folder: the graph's hash and the target's fingerprint (a `.so` built for
    one CPU must not be loaded on another)."""
    return Path(cache_dir) / f"{key}-{fingerprint}" if cache_dir else None


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
