"""Give every result of the entry function its own tensor before bufferization.

MLIR's CSE and canonicalization (in torch-mlir's pipelines) merge identical
computations, so a graph that asks for two equal values (a gradient and the
momentum buffer cloned from it, two views of one tensor) returns one SSA
value twice. `buffer-results-to-out-params{hoist-static-allocs}` then crashes
(LLVM 22: a use-after-erase in updateReturnOps, seen as SIGSEGV in SGD with
momentum + clip_grad_norm_ and in gradient accumulation). Here each repeated
return operand is replaced by a copy (`bufferization.alloc_tensor` with `copy`: its
sizes, dynamic ones included, are the value's), which bufferizes to an out-parameter
of its own. Not `tensor.empty` + `linalg.copy`: in a graph that also updates an input
in place, the cpu pipeline's `eliminate-empty-tensors` (lowering/cpu/backend.py)
crashed (SIGSEGV) on that `tensor.empty`; it leaves `alloc_tensor` alone.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import bufferization


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
                    copied = bufferization.alloc_tensor(rtt, [], copy=value)
                ret.operands[index] = copied
