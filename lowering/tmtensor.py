"""TMTensor ops -> scf loops over memrefs, inside torch-mlir's build (part of the `linalg` stage).

torch-mlir lowers the ops linalg cannot express (`scatter`, `index_put`,
embedding and pooling backwards, `sort`, `topk`, `cumsum`/`cumprod`, ...) to
its own `tm_tensor` dialect, which the upstream `mlir` build that takes over
after the `linalg` stage does not know. torch-mlir's build has the passes that
remove it, so they run here, before the textual handoff:

- `tm-tensor-bufferize` gives each TMTensor op a fresh output buffer
  (`memref.alloc` + `memref.copy` of its initial value), reads its inputs
  through `bufferization.to_buffer`, and exposes the result as
  `bufferization.to_tensor` of that buffer;
- `tm-tensor-to-loops` turns the op on buffers into scf loops with
  `memref.load`/`memref.store` (serial where the op needs it: a scatter with
  repeated indices accumulates in order, a scan carries its running value).

The rest of the module stays linalg on tensors; upstream's one-shot
bufferization then resolves the `to_buffer`/`to_tensor` pairs. One-Shot
Analysis only accepts `to_tensor` marked `restrict` (no other tensor aliases
its buffer), which holds for these: each wraps a buffer that
`tm-tensor-bufferize` has just allocated and only its loops write, before the
tensor's first use. `mark_restrict` adds the marker to exactly those.
"""

from __future__ import annotations

from .mlir_runner import TORCH_MLIR

# Pipeline fragment (torch-mlir pass names), run after torch-mlir's linalg pipeline.
TO_LOOPS = (
    "func.func("
    # TMTensor ops on tensors -> on buffers (fresh output buffers, to_buffer/to_tensor
    # at the edges); a no-op for graphs without TMTensor ops.
    "tm-tensor-bufferize,"
    # TMTensor ops on buffers -> scf loops of memref loads/stores.
    "tm-tensor-to-loops)"
)

# What the fragment may leave in a `linalg` stage output besides linalg on
# tensors (contracts.py allows these ops, not their whole dialects).
LOOP_OPS = frozenset({
    "bufferization.to_buffer", "bufferization.to_tensor", "memref.alloc", "memref.copy",
    "memref.load", "memref.store", "memref.dim", "memref.subview",
})


def mark_restrict(module) -> None:
    """Mark `to_tensor` of freshly allocated buffers `restrict` (torch-mlir bindings)."""
    ir = TORCH_MLIR.ir

    def visit(op) -> None:
        if (op.name == "bufferization.to_tensor" and "restrict" not in op.attributes
                and _allocated(op.operands[0])):
            op.attributes["restrict"] = ir.UnitAttr.get()
        for region in op.regions:
            for block in region.blocks:
                for nested in block.operations:
                    visit(nested.operation)

    with module.context:
        visit(module.operation)


def _allocated(value) -> bool:
    op = getattr(value.owner, "operation", None)  # None: a block argument
    return op is not None and op.name == "memref.alloc"
