"""Give every result of the entry function its own tensor before bufferization.

MLIR's CSE and canonicalization (in torch-mlir's pipelines) merge identical
computations, so a graph that asks for two equal values (a gradient and the
momentum buffer cloned from it, two views of one tensor) returns one SSA
value twice. `buffer-results-to-out-params{hoist-static-allocs}` then crashes
(LLVM 22: a use-after-erase in updateReturnOps, seen as SIGSEGV in SGD with
momentum + clip_grad_norm_ and in gradient accumulation). Here each repeated
return operand is replaced by a copy (`tensor.empty` + `linalg.copy`), which
bufferizes to an out-parameter of its own (its dynamic sizes, in a graph with symbolic
sizes, read from the value with `tensor.dim`).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, tensor


def copy_repeated_results(module: ir.Module) -> None:
    for func in module.body.operations:
        if func.operation.name != "func.func":
            continue
        for block in func.regions[0].blocks:
            ret = block.operations[len(block.operations) - 1]
            if ret.operation.name != "func.return":
                continue
            seen: set = set()
            for index, value in enumerate(list(ret.operands)):
                if value not in seen:
                    seen.add(value)
                    continue
                rtt = value.type
                if not isinstance(rtt, ir.RankedTensorType):
                    continue
                with ir.InsertionPoint(ret), ret.location:
                    sizes = [tensor.dim(value, arith.constant(ir.IndexType.get(), d))
                             if rtt.is_dynamic_dim(d) else extent
                             for d, extent in enumerate(rtt.shape)]
                    empty = tensor.EmptyOp(sizes, rtt.element_type)
                    copied = linalg.copy(value, outs=[empty.result])
                ret.operands[index] = copied
