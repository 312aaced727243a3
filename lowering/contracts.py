"""What each stage's output may contain, checked after the stage runs.

Like torch-mlir's backend-contract check at the end of its pipelines: a stage
that leaves an op of a dialect it should have removed fails here, naming the
op, instead of failing later in a stage that cannot say why.
"""

from __future__ import annotations

import re

from . import tmtensor

# Dialect namespaces allowed in the output of each stage ("*": anything).
ALLOWED_DIALECTS: dict[str, frozenset[str]] = {
    "torch": frozenset({"builtin", "func", "torch"}),
    "torch-backend": frozenset({"builtin", "func", "torch"}),
    "linalg": frozenset({"builtin", "func", "linalg", "tensor", "arith", "math", "scf", "cf",
                         "complex", "affine", "ml_program", "bufferization"}),
    "bufferized": frozenset({"builtin", "func", "linalg", "memref", "arith", "math", "scf", "cf",
                             "complex", "affine", "ml_program", "bufferization"}),
    "loops": frozenset({"builtin", "func", "memref", "arith", "math", "scf", "cf", "affine",
                        "ml_program"}),
    "llvm": frozenset({"builtin", "llvm"}),
}

# Single ops allowed on top of the dialects above. `linalg`: the loops that
# TMTensor ops (scatter, sort, scan...) become inside torch-mlir's build; the
# memref dialect as a whole stays out of linalg-on-tensors.
ALLOWED_OPS: dict[str, frozenset[str]] = {
    "linalg": tmtensor.LOOP_OPS,
}

# Buffers of these element types may not appear in a stage's output (checked on
# op results and block arguments). `bufferized`: bools are stored as i8
# (i1_storage.py); LLVM 22 cannot lower i1 buffers.
_I1_BUFFER = re.compile(r"^memref<([^>]*x)?i1(,.*)?>$")
FORBIDDEN_TYPES: dict[str, tuple[re.Pattern, str]] = {
    "bufferized": (_I1_BUFFER, "a bool (i1) buffer"),
}


def op_names(module_operation) -> list[str]:
    """Names of all ops nested in a module (works with both MLIR Python bindings)."""
    names: list[str] = []

    def visit(op):
        names.append(op.operation.name)
        for region in op.operation.regions:
            for block in region.blocks:
                for nested in block.operations:
                    visit(nested)

    visit(module_operation)
    return names


def check_contract(stage: str, module_operation) -> str | None:
    """None when the module satisfies the stage's contract, else a message naming the op."""
    allowed = ALLOWED_DIALECTS.get(stage)
    if allowed is None:
        return None
    ops = ALLOWED_OPS.get(stage, frozenset())
    for name in op_names(module_operation):
        dialect = name.split(".", 1)[0]
        if dialect not in allowed and name not in ops:
            return (f"op '{name}' is not allowed after stage '{stage}' "
                    f"(allowed dialects: {', '.join(sorted(allowed))}"
                    + (f"; ops: {', '.join(sorted(ops))}" if ops else "") + ")")
    if stage in FORBIDDEN_TYPES:
        return _forbidden_type(stage, module_operation)
    return None


def _forbidden_type(stage: str, module_operation) -> str | None:
    pattern, what = FORBIDDEN_TYPES[stage]

    def visit(op) -> str | None:
        op = op.operation
        values = list(op.results) + [a for r in op.regions for b in r.blocks for a in b.arguments]
        for value in values:
            if pattern.match(str(value.type)):
                return (f"{what} ({value.type}) remains after stage '{stage}', "
                        f"at op '{op.name}'")
        for region in op.regions:
            for block in region.blocks:
                for nested in block.operations:
                    problem = visit(nested)
                    if problem:
                        return problem
        return None

    return visit(module_operation)
