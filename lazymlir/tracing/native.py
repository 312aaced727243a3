"""The device's dispatch entry in C++ (native_entry.cpp): built once per machine, loaded.

The C++ entry owns the inner tensors (storage-less TensorImpls of the PrivateUse1
key, each holding its `LazyValue`) and is the kernel of every op on them. It records
an op whose route is its recorder itself when the shape cache knows the call, and
hands every other call to the Python tracer (`tracer.native_entry`). Why C++: a
small op cost ~6 us to record through `__torch_dispatch__`, of which the C++ ->
Python entry and the output's Python object were ~4 (docs/tracing-performance.md).

The library is compiled with the host C++ compiler against the installed torch's
headers (~25 s), into the runtime folder of the disk cache, or of the default cache
location when the cache is off (so that test runs and their child processes build it
once), else the session's scratch folder. Without a C++ compiler lazymlir cannot
record: the error says to install one.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import sysconfig
from pathlib import Path

import torch

from .. import session
from ..support import settings as settings_module
from ..support import toolchain

log = logging.getLogger("lazymlir.native")

MODULE = "lazymlir_native_entry"   # PyInit_<MODULE> in native_entry.cpp
SOURCE_FILE = Path(__file__).with_name("native_entry.cpp")


def _flags() -> tuple[str, ...]:
    torch_dir = Path(torch.__file__).parent
    include = torch_dir / "include"
    lib = torch_dir / "lib"
    return ("-std=c++20", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-I{include}", f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}",
            f"-I{sysconfig.get_paths()['include']}", f"-L{lib}", "-lc10", "-ltorch_cpu",
            "-ltorch_python", f"-Wl,-rpath,{lib}")


def _folders():
    """Where the library may be: the cache's runtime folder, else the session's scratch
    folder (made only if the first is unwritable)."""
    cache_dir = session.current().settings.cache_dir or settings_module.default_cache_dir()
    if cache_dir:
        yield Path(cache_dir) / "runtime"
    yield Path(session.current().scratch_dir())


def build() -> Path:
    """The compiled library (built if no folder has it yet). Its name hashes the source
    and the flags, which name this torch and Python: another one gets a build of its own."""
    flags = _flags()
    source = SOURCE_FILE.read_text() + (
        f"\n// torch {torch.__version__}, Python {sys.version.split()[0]}: {' '.join(flags)}\n")
    errors = []
    for folder in _folders():
        try:
            target = folder / toolchain.library_name("liblazymlir_native_entry", source)
            if not target.exists():
                log.warning("lazymlir: building its C++ dispatch entry (once per machine, "
                            "about 25 s) in %s", folder)
            return toolchain.build_c_library(source, "liblazymlir_native_entry", folder, flags,
                                             language="c++")
        except OSError as error:  # an unwritable folder: the next one
            errors.append(f"{folder}: {error}")
    raise OSError("; ".join(errors))


def load():
    """The loaded C++ module; raises with what to do where it cannot be built."""
    loaded = sys.modules.get(MODULE)
    if loaded is not None:
        return loaded
    try:
        path = build()
    except (OSError, RuntimeError) as error:
        raise RuntimeError(
            "lazymlir could not build its C++ dispatch entry (lazymlir/tracing/"
            f"native_entry.cpp): {str(error).splitlines()[0][:500]}. lazymlir needs a C++ "
            "compiler (g++ or clang++, or set CXX) and the installed torch's headers to "
            "record ops on lazy_mlir tensors.") from error
    loader = importlib.machinery.ExtensionFileLoader(MODULE, os.fspath(path))
    spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[MODULE] = module
    return module


@contextlib.contextmanager
def python_recording():
    """Within: every op on lazy tensors goes to the Python tracer (the C++ entry records
    none itself): tests that count the tracer's entries, and debugging."""
    module = load()
    was = module.set_fast_path(False)
    try:
        yield
    finally:
        module.set_fast_path(was)
