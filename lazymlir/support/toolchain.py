"""The host C compiler driver: links CPU graphs (lowering/cpu/codegen.py) and builds the
small runtime libraries (targets/cpu_alloc.py, targets/cpu_threads.py, device_guard.py)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path


@cache
def c_compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler driver (cc/gcc) found to link CPU executables; "
                           "install gcc or set CC")
    return cc


@cache
def cxx_compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise RuntimeError("no C++ compiler driver (c++/g++) found; install g++ or set CXX")
    return cxx


def library_name(stem: str, source: str) -> str:
    """`<stem>-<hash of source>.so`: an edited library gets a new name, so a stale build
    in a shared folder is never loaded."""
    return f"{stem}-{hashlib.sha256(source.encode()).hexdigest()[:12]}.so"


def build_c_library(source: str, stem: str, directory: str | os.PathLike,
                    flags: tuple[str, ...] = (), language: str = "c") -> Path:
    """directory/library_name(stem, source), compiled from C (or, with language="c++",
    C++) `source` if it is not there yet. Atomic: concurrent processes each build a
    private file and rename it into place."""
    directory = Path(directory)
    target = directory / library_name(stem, source)
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory, prefix=f".{stem}-") as scratch:
        cxx = language == "c++"
        source_file = Path(scratch) / f"{stem}.{'cpp' if cxx else 'c'}"
        source_file.write_text(source)
        built = Path(scratch) / target.name
        done = subprocess.run([cxx_compiler() if cxx else c_compiler(), "-O2", "-shared",
                               "-fPIC", str(source_file), *flags, "-o", str(built)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building {stem} failed: {done.stderr.strip()[:2000]}")
        os.replace(built, target)
    return target
