"""Fewer and cheaper buffer copies: two rewrites around bufferization.

`unshare_fills` (linalg on tensors, before bufferization): CSE in torch-mlir's
pipelines merges the identical zero fills every matmul accumulates into, so one
filled tensor feeds many matmuls. Each matmul writes its operand in place, so
one-shot bufferization gives every writer but the last a fresh buffer and a
`memref.copy` of the filled one: the GPT training step's forward graph copied a
zeroed 512 x 128 buffer 18 times. With a fill of its own per use, each fill
writes straight into the buffer its matmul accumulates into (a memset, no
read, no temporary).

`strided_copies_to_loops` (CPU, buffers, before the `loops` stage): a
`memref.copy` between buffers whose layouts are not both contiguous
(a q/k/v gradient written into its slice of the fused qkv gradient) lowers to
a call of MLIR's runtime `memrefCopy`, which copies such layouts one element
per `memcpy` call. As `linalg.copy` it becomes loops that LLVM vectorizes along
the contiguous innermost dim. Contiguous copies stay `memref.copy` (a memcpy).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import linalg

from ..mlir_runner import walk


def unshare_fills(module: ir.Module) -> None:
    """Give each use of a multi-use tensor `linalg.fill` its own fill (in place)."""
    fills: list[ir.Operation] = []

    def collect(op: ir.Operation) -> None:
        if op.name == "linalg.fill" and isinstance(op.results[0].type, ir.RankedTensorType):
            fills.append(op)

    for op in walk(module.operation):
        collect(op)
    for fill in fills:
        uses = [(use.owner, use.operand_number) for use in fill.results[0].uses]
        for owner, operand in uses[1:]:
            if isinstance(owner, ir.Block) or owner.name == "func.return":
                continue  # a result: the fill itself must stay its buffer
            # Right before the user, or before the op holding it in the fill's block
            # (not inside a loop around the user: the fill would run every iteration).
            anchor = owner
            while anchor.parent is not None and anchor.parent != fill.parent:
                anchor = anchor.parent
            clone = fill.clone(ip=ir.InsertionPoint(anchor))
            owner.operands[operand] = clone.results[0]


def _contiguous(memref_type: ir.MemRefType) -> bool:
    """An identity layout: what memref.copy lowers to one memcpy."""
    layout = memref_type.layout
    return isinstance(layout, ir.AffineMapAttr) and \
        layout.value == ir.AffineMap.get_identity(memref_type.rank)


def strided_copies_to_loops(module: ir.Module) -> None:
    """Replace memref.copy ops with a non-contiguous operand by linalg.copy (in place)."""
    copies: list[ir.Operation] = []

    def collect(op: ir.Operation) -> None:
        if op.name == "memref.copy" and not all(
                _contiguous(ir.MemRefType(v.type)) for v in op.operands):
            copies.append(op)

    for op in walk(module.operation):
        collect(op)
    for copy in copies:
        source, target = copy.operands
        with ir.InsertionPoint(copy), copy.location:
            linalg.copy(source, outs=[target])
        copy.erase()
