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
bufferization then resolves the `to_buffer`/`to_tensor` pairs (each `to_buffer`
is first moved next to the loops that read it, see `_sink_to_buffers`). One-Shot
Analysis only accepts `to_tensor` marked `restrict` (no other tensor aliases
its buffer), which holds for these: each wraps a buffer that
`tm-tensor-bufferize` has just allocated and only its loops write, before the
tensor's first use. `to_loops` adds the marker to exactly those, and marks the
`to_buffer`s `read_only` (the loops never write an input).
"""

from __future__ import annotations

from ..mlir_runner import TORCH_MLIR, PipelineFailure, print_module, run_pipeline, walk

# torch-mlir passes, run on the output of torch-mlir's linalg pipeline when it has
# TMTensor ops.
TO_LOOPS_PIPELINE = (
    "builtin.module(func.func("
    # TMTensor ops on tensors -> on buffers (fresh output buffers, to_buffer/to_tensor
    # at the edges).
    "tm-tensor-bufferize,"
    # TMTensor ops on buffers -> scf loops of memref loads/stores.
    "tm-tensor-to-loops))"
)

# `tm_tensor.sort` becomes an exchange sort: O(n^2) per sorted row, serial. A longer
# sort (top-k over a vocabulary) is far faster eagerly: it fails this stage, so the
# op falls back (counted and warned) instead.
MAX_SORT_LENGTH = 2048

# What TO_LOOPS_PIPELINE may leave in a `linalg` stage output besides linalg on
# tensors (contracts.py allows these ops, not their whole dialects).
LOOP_OPS = frozenset({
    "bufferization.to_buffer", "bufferization.to_tensor", "memref.alloc", "memref.copy",
    "memref.load", "memref.store", "memref.dim", "memref.subview",
})


def to_loops(module):
    """torch-mlir linalg output (module, torch-mlir bindings) -> the same without TMTensor ops."""
    ops = [op for op in walk(module.operation) if op.name.startswith("tm_tensor.")]
    if not ops:
        return module
    for op in ops:
        if op.name == "tm_tensor.sort":
            _check_sort_length(op)
    # Same context: it has the tm_tensor dialect loaded, so the text parses.
    lowered = run_pipeline(TORCH_MLIR, print_module(module), TO_LOOPS_PIPELINE,
                           context=module.context)
    _sink_to_buffers(lowered)
    _mark_restrict(lowered)
    _mark_read_only(lowered)
    return lowered


def _check_sort_length(op) -> None:
    ir = TORCH_MLIR.ir
    dim = ir.IntegerAttr(op.attributes["dimension"]).value
    length = ir.RankedTensorType(op.operands[0].type).shape[dim]
    if length < 0 or length > MAX_SORT_LENGTH:
        size = f"{length} elements" if length >= 0 else "a dynamic length"
        raise PipelineFailure(f"tm_tensor.sort over {size}: its loop lowering is O(n^2); "
                              f"above {MAX_SORT_LENGTH} elements the op runs eagerly")


def _sink_to_buffers(module) -> None:
    """Give each op that reads a `to_buffer`'s buffer its own `to_buffer`, right before it.

    One-Shot Analysis sees `to_buffer` as one read of the tensor, where it stands,
    and cannot follow the buffer further. `tm-tensor-bufferize` puts them ahead of
    the ops computing its other inputs: an op there may then reuse (overwrite) the
    tensor's buffer before the loops read it (seen: two masks computed into one
    `tensor.empty`). Right before the loops, nothing runs between the read the
    analysis sees and the real ones. One `to_buffer` can feed several loop nests (two
    scatters with one index tensor, merged by CSE): moved before the first only, the
    later nests read a buffer that ops between them had reused (two embedding bags'
    weight gradients over one index tensor summed the wrong rows); each nest gets a
    copy of the `to_buffer` instead.
    """
    for op in [op for op in walk(module.operation) if op.name == "bufferization.to_buffer"]:
        block = op.block
        users = {}  # top-level op in the block -> the uses inside it, in first-seen order
        for use in op.results[0].uses:
            top = _ancestor_in(use.owner, block)
            if top is not None:
                users.setdefault(top, []).append((use.owner, use.operand_number))
        if not users:
            continue
        tops = list(users)
        first = tops[0]
        for top in tops[1:]:
            if top.is_before_in_block(first):
                first = top
        op.move_before(first)
        for top in tops:
            if top == first:
                continue
            copy = op.clone(ip=TORCH_MLIR.ir.InsertionPoint(top))
            for owner, operand in users[top]:
                owner.operands[operand] = copy.results[0]


def _ancestor_in(op, block):
    op = getattr(op, "operation", op)
    while op is not None and op.block != block:
        op = op.parent
    return op


def _mark_restrict(module) -> None:
    """Mark `to_tensor` of freshly allocated buffers `restrict`."""
    with module.context:
        for op in walk(module.operation):
            if (op.name == "bufferization.to_tensor" and "restrict" not in op.attributes
                    and _allocated(op.operands[0])):
                op.attributes["restrict"] = TORCH_MLIR.ir.UnitAttr.get()


def _mark_read_only(module) -> None:
    """Mark every `to_buffer` `read_only`: the loops only read through them (the result
    is a fresh buffer). Graph inputs are not writable (bufferize/graph_inputs.py), so a
    `to_buffer` of one that might be written made bufferization copy the input first."""
    with module.context:
        for op in walk(module.operation):
            if op.name == "bufferization.to_buffer" and "read_only" not in op.attributes:
                op.attributes["read_only"] = TORCH_MLIR.ir.UnitAttr.get()


def _allocated(value) -> bool:
    op = getattr(value.owner, "operation", None)  # None: a block argument
    return op is not None and op.name == "memref.alloc"
