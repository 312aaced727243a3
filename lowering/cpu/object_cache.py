"""Object code of compile units (lowering/cpu/units.py) kept on disk across graphs.

    <folder>/<part>.o       a part's object code: units compiled together by one llc
    <folder>/<part>.units   its index: the .o's size and SHA-256, then one unit key a line

A graph compiles only the units no part holds, and links the parts that hold the
others (the linker keeps the functions it needs: units.py names each root by its
key, defined weak and hidden). The folder is chosen by the caller: the execution
driver passes `objects-<target fingerprint>` in the running compiler version's
folder of the disk cache (lazymlir/execution/disk_cache.py), which prunes it with
the graphs' entries, the least recently used part first (a use touches its .o).

Several processes may share the folder. Files are written under a `.`-prefixed
temporary name and renamed into place, the object before its index, so an index
names only a complete object; a part used is first linked (or copied) into the
compile's own folder and checked there against its index, so a part replaced or
pruned meanwhile is either the one checked or a miss, never half of one. A part
that fails the check is removed and its units compiled again. The cache is an
optimization: a folder that cannot be written only costs the reuse.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger("lazymlir.cache")

OBJECT_SUFFIX = ".o"
INDEX_SUFFIX = ".units"


def part_name(keys: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:32]


def _digest(path: Path) -> tuple[int, str]:
    data = path.read_bytes()
    return len(data), hashlib.sha256(data).hexdigest()


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed
        shutil.copyfile(source, target)


class ObjectCache:
    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.reused = 0    # units found in the folder by the last `take`
        self.compiled = 0  # units stored by `store` since this object was made

    def _indexes(self) -> dict[str, set[str]]:
        """Part name -> the unit keys it holds, for every complete part."""
        parts: dict[str, set[str]] = {}
        try:
            items = list(os.scandir(self.folder))
        except OSError:
            return parts
        for item in items:
            if item.name.startswith(".") or not item.name.endswith(INDEX_SUFFIX):
                continue
            try:
                lines = Path(item.path).read_text().split("\n")
            except OSError:
                continue
            parts[item.name[:-len(INDEX_SUFFIX)]] = {line for line in lines[1:] if line}
        return parts

    def take(self, keys: set[str], directory: Path) -> tuple[list[Path], set[str]]:
        """(object files in `directory` that hold some of `keys`, the keys they hold):
        the parts that hold the most of them first, each linked in and checked."""
        objects, found = [], set()
        indexes = self._indexes()
        ranked = sorted(indexes, key=lambda part: len(indexes[part] & keys), reverse=True)
        for part in ranked:
            wanted = (indexes[part] & keys) - found
            if not wanted:
                continue
            source = self.folder / f"{part}{OBJECT_SUFFIX}"
            local = directory / f"cached-{part}{OBJECT_SUFFIX}"
            try:
                _link_or_copy(source, local)
                expected = (self.folder / f"{part}{INDEX_SUFFIX}").read_text().split("\n")[0]
                size, sha = _digest(local)
                if expected != f"{size} {sha}":
                    log.warning("compiled code cache part %s is damaged (size or SHA-256 "
                                "differs from its index); removing it", source)
                    local.unlink()
                    self._remove(part)
                    continue
                os.utime(source)  # recently used: pruning removes the least recently used
            except OSError:
                local.unlink(missing_ok=True)
                continue  # pruned meanwhile: its units are compiled again
            objects.append(local)
            found |= wanted
        self.reused = len(found)
        return objects, found

    def store(self, obj: Path, keys: list[str]) -> None:
        """Keep `obj`, the object code of the units `keys`, for later graphs."""
        part = part_name(keys)
        target = self.folder / f"{part}{OBJECT_SUFFIX}"
        tmp_object = self.folder / f".{part}{OBJECT_SUFFIX}.{os.getpid()}"
        tmp_index = self.folder / f".{part}{INDEX_SUFFIX}.{os.getpid()}"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            size, sha = _digest(obj)
            _link_or_copy(obj, tmp_object)
            os.replace(tmp_object, target)
            tmp_index.write_text("\n".join([f"{size} {sha}", *keys, ""]))
            os.replace(tmp_index, self.folder / f"{part}{INDEX_SUFFIX}")
        except OSError as error:
            tmp_object.unlink(missing_ok=True)
            tmp_index.unlink(missing_ok=True)
            log.warning("cannot store compiled code in %s: %s; continuing without it",
                        self.folder, error)
            return
        self.compiled += len(keys)

    def _remove(self, part: str) -> None:
        for suffix in (INDEX_SUFFIX, OBJECT_SUFFIX):  # the index first: then no reader
            try:
                (self.folder / f"{part}{suffix}").unlink()
            except OSError:
                pass
