"""The host C compiler driver: links CPU graphs (lowering/cpu_codegen.py) and builds the
CPU target's allocator library (targets/cpu_alloc.py)."""

from __future__ import annotations

import os
import shutil
from functools import cache


@cache
def c_compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler driver (cc/gcc) found to link CPU executables; "
                           "install gcc or set CC")
    return cc
