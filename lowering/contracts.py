"""What each stage's output may contain, checked after the stage runs.

Like torch-mlir's backend-contract check at the end of its pipelines: a stage
that leaves an op of a dialect it should have removed fails here, naming the
op, instead of failing later in a stage that cannot say why. This module holds
the dialect-level contract and the contracts of the shared stages; each backend
declares its own stages' contracts next to them (cpu/backend.py, gpu/contracts.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .front import tmtensor
from .mlir_runner import walk


def op_names(module_operation) -> list[str]:
    """Names of all ops nested in a module (works with both MLIR Python bindings)."""
    return [op.name for op in walk(module_operation)]


@dataclass(frozen=True)
class DialectContract:
    """The output may hold ops of `dialects` and the single `ops` only, and no value
    whose type matches `forbidden_type` (a pattern and what it stands for)."""

    dialects: frozenset[str]
    ops: frozenset[str] = frozenset()
    forbidden_type: tuple[re.Pattern, str] | None = None

    def __call__(self, stage: str, module_operation) -> str | None:
        for name in op_names(module_operation):
            dialect = name.split(".", 1)[0]
            if dialect not in self.dialects and name not in self.ops:
                return (f"op '{name}' is not allowed after stage '{stage}' "
                        f"(allowed dialects: {', '.join(sorted(self.dialects))}"
                        + (f"; ops: {', '.join(sorted(self.ops))}" if self.ops else "")
                        + ")")
        if self.forbidden_type is not None:
            return self._forbidden_type(stage, module_operation)
        return None

    def _forbidden_type(self, stage: str, module_operation) -> str | None:
        pattern, what = self.forbidden_type
        for op in walk(module_operation):
            values = list(op.results) + [a for r in op.regions for b in r.blocks
                                         for a in b.arguments]
            for value in values:
                if pattern.match(str(value.type)):
                    return (f"{what} ({value.type}) remains after stage '{stage}', "
                            f"at op '{op.name}'")
        return None


# Buffers of bools may not appear after `bufferized` (checked on op results and block
# arguments): bools are stored as i8 (bufferize/i1_storage.py); LLVM 22 cannot lower
# i1 buffers.
_I1_BUFFER = re.compile(r"^memref<([^>]*x)?i1(,.*)?>$")

# The shared stages' contracts. `linalg` also allows the loops that TMTensor ops
# (scatter, sort, scan...) become inside torch-mlir's build; the memref dialect as a
# whole stays out of linalg-on-tensors.
SHARED: dict[str, DialectContract] = {
    "torch": DialectContract(frozenset({"builtin", "func", "torch"})),
    "torch-backend": DialectContract(frozenset({"builtin", "func", "torch"})),
    "linalg": DialectContract(
        frozenset({"builtin", "func", "linalg", "tensor", "arith", "math", "scf", "cf",
                   "complex", "affine", "ml_program", "bufferization"}),
        ops=tmtensor.LOOP_OPS),
    "bufferized": DialectContract(
        frozenset({"builtin", "func", "linalg", "memref", "arith", "math", "scf", "cf",
                   "complex", "affine", "ml_program", "bufferization"}),
        forbidden_type=(_I1_BUFFER, "a bool (i1) buffer")),
}


def check_contract(stage: str, module_operation) -> str | None:
    """The shared stages' contract check: None when the module satisfies it, else a
    message naming the op (None for stages without a shared contract)."""
    contract = SHARED.get(stage)
    return None if contract is None else contract(stage, module_operation)
