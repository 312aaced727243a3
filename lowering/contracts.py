"""What each stage's output may contain, checked after the stage runs.

Like torch-mlir's backend-contract check at the end of its pipelines: a stage
that leaves an op of a dialect it should have removed fails here, naming the
op, instead of failing later in a stage that cannot say why.
"""

from __future__ import annotations

# Dialect namespaces allowed in the output of each stage ("*": anything).
ALLOWED_DIALECTS: dict[str, frozenset[str]] = {
    "torch": frozenset({"builtin", "func", "torch"}),
    "torch-backend": frozenset({"builtin", "func", "torch"}),
    "linalg": frozenset({"builtin", "func", "linalg", "tensor", "arith", "math", "scf", "cf",
                         "complex", "affine", "ml_program", "bufferization"}),
    "bufferized": frozenset({"builtin", "func", "linalg", "memref", "arith", "math", "scf", "cf",
                             "complex", "affine", "ml_program", "bufferization"}),
    # vector: what lowering/cpu_schedule.py tiled and vectorized.
    "loops": frozenset({"builtin", "func", "memref", "arith", "math", "scf", "cf", "affine",
                        "ml_program", "vector", "ub"}),
    "llvm": frozenset({"builtin", "llvm"}),
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
    for name in op_names(module_operation):
        dialect = name.split(".", 1)[0]
        if dialect not in allowed:
            return (f"op '{name}' is not allowed after stage '{stage}' "
                    f"(allowed dialects: {', '.join(sorted(allowed))})")
    return None
