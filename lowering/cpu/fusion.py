"""CPU row fusion: one loop over blocks of rows for graphs whose every op works row by row.

Runs at the start of the CPU `bufferized` stage, on linalg-on-tensors. A
softmax or layer_norm lowers to row reductions (max, sum, mean, variance)
between elementwise ops; `linalg-fuse-elementwise-ops` fuses only the
elementwise ones, so after bufferization each reduction and each remaining
elementwise op is its own pass over the whole tensor, with whole-tensor
temporaries in between (16 MiB each at 4096 x 1024). Here the op producing
the function's result is tiled over its outermost (row) dimension with an
`scf.forall`, and every producer, reductions included, is fused into that
loop (`transform.structured.fuse`): each iteration computes a block of rows
from start to end while the block stays in L1/L2, and the temporaries shrink
to one block. The blocks are independent (`scf.forall`): the `loops` stage
runs them on all cores (lowering/cpu/parallel.py) unless the work is below
MIN_PARALLEL_ELEMENTS, where the loop is marked SEQUENTIAL and runs in order.
(An `scf.for` here would bufferize to a whole-result temporary and a copy.)

Only graphs where this cannot recompute work are fused: every linalg op
iterates the result's rows as its outermost parallel loop (its output and
each input either indexed by that row, or not depending on the row at all
and then a function argument: a weight, a bias), no reshapes/transposes
between ops, one result. Anything else keeps the unfused path unchanged.
Before matching, unit dims are folded away (`linalg-fold-unit-extent-dims`:
torch-mlir's keepdim reductions give `4096x1` tensors and reshapes that would
stop the fusion) and elementwise ops are fused, as the shared pipeline does.
"""

from __future__ import annotations

from .parallel import MIN_PARALLEL_ELEMENTS, SEQUENTIAL
from ..mlir_runner import UPSTREAM, map_results, run_pipeline, walk

TAG = "lazymlir.rows"

PREPARE = (
    "builtin.module(func.func("
    "linalg-fold-unit-extent-dims,canonicalize,linalg-fuse-elementwise-ops,canonicalize,cse))"
)

# A block of rows is at most this many bytes of the result (L1-sized: the
# block's inputs, temporaries and result stay in cache between the fused ops).
BLOCK_BYTES = 32 * 1024
# Below this many result elements, one pass per op is as fast: no fusion.
MIN_ELEMENTS = 64 * 1024

_ALLOWED = {"arith.constant", "tensor.empty", "linalg.fill", "linalg.generic", "func.return"}


def _shape(value):
    from mlir import ir

    try:
        shaped = ir.ShapedType(value.type)
    except ValueError:
        return None
    return list(shaped.shape) if shaped.has_static_shape else None


def _row_local(op, rows: int, args) -> bool:
    """Does `op` compute row r of its outputs from row r of its row-indexed inputs only?"""
    name = op.operation.name
    if name == "linalg.fill":
        shape = _shape(op.operation.results[0])
        return shape is not None and len(shape) >= 1 and shape[0] == rows
    iterators = [str(it) for it in op.operation.attributes["iterator_types"]]
    if not iterators or "parallel" not in iterators[0]:
        return False
    maps = list(op.operation.attributes["indexing_maps"])
    operands = list(op.operation.operands)
    num_inputs = len(operands) - len(op.operation.results)
    for index, (value, amap) in enumerate(zip(operands, maps)):
        shape = _shape(value)
        if shape is None:
            return False
        results = map_results(amap)
        if results and results[0] == "d0" and shape[0] == rows:
            continue  # row-indexed
        if index < num_inputs and not any("d0" in r for r in results) and value in args:
            continue  # the same for every row (weight, bias): read, never recomputed
        return False
    return True


def _plan(module):
    """The op to tile (its result is the function's only result) and the block of rows, or None."""
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1:
        return None
    block = funcs[0].regions[0].blocks[0]
    ops = list(block.operations)
    if any(op.operation.name not in _ALLOWED for op in ops):
        return None
    ret = ops[-1]
    if len(ret.operands) != 1 or ret.operands[0] in list(block.arguments):
        return None
    root = ret.operands[0].owner
    if root.name != "linalg.generic":
        return None
    iterators = [str(it) for it in root.attributes["iterator_types"]]
    shape = _shape(root.results[0])
    if shape is None or len(shape) < 2 or any("parallel" not in it for it in iterators):
        return None
    rows, row_elements = shape[0], 1
    for extent in shape[1:]:
        row_elements *= extent
    if rows * row_elements < MIN_ELEMENTS:
        return None
    args = list(block.arguments)
    if not all(_row_local(op, rows, args) for op in ops
               if op.operation.name in ("linalg.fill", "linalg.generic")):
        return None
    width = _element_bytes(root.results[0])
    tile = 1
    for candidate in range(1, rows + 1):
        if rows % candidate == 0 and candidate * row_elements * width <= BLOCK_BYTES:
            tile = candidate
    if rows // tile < 2:
        return None
    parallel = rows * row_elements >= MIN_PARALLEL_ELEMENTS
    return root, tile, len(iterators), parallel


def _element_bytes(value) -> int:
    from mlir import ir

    digits = "".join(c for c in str(ir.ShapedType(value.type).element_type) if c.isdigit())
    return max(1, int(digits or 32) // 8)  # f32 -> 4, bf16 -> 2, i1 -> 1


def _script(tile: int, rank: int) -> str:
    tiles = [tile] + [0] * (rank - 1)
    return (
        "module attributes {transform.with_named_sequence} {\n"
        "  transform.named_sequence @__transform_main(%root: !transform.any_op "
        "{transform.readonly}) {\n"
        f"    %op = transform.structured.match attributes{{{TAG}}} in %root "
        ": (!transform.any_op) -> !transform.any_op\n"
        # Tile the result by rows, then fuse its producers, recursively.
        f"    %tiled, %loop = transform.structured.fuse %op tile_sizes {tiles} "
        "{apply_cleanup, use_forall} : (!transform.any_op) -> "
        "(!transform.any_op, "
        "!transform.any_op)\n"
        # A producer with two consumers in the block (x - mean, read by the
        # variance and by the output) was fused once per use: CSE keeps one.
        "    %f = transform.structured.match ops{[\"func.func\"]} in %root "
        ": (!transform.any_op) -> !transform.any_op\n"
        "    transform.apply_cse to %f : !transform.any_op\n"
        "    transform.yield\n  }\n}\n")


class _NotRowWise(Exception):
    """The graph's signature alone rules row fusion out."""


def _check_signature(module) -> None:
    """Raise _NotRowWise unless the module is one function with one static result of
    rank >= 2 and at least MIN_ELEMENTS elements: what `_plan` asks of the result, read
    from the function's type, which PREPARE does not change. Its passes over a graph
    that cannot fit are a waste: ~1.5 s of CPU on a 7000-op training step."""
    from mlir import ir

    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1:
        raise _NotRowWise
    results = ir.FunctionType(ir.TypeAttr(funcs[0].attributes["function_type"]).value).results
    if len(results) != 1:
        raise _NotRowWise
    try:
        shaped = ir.ShapedType(results[0])
    except ValueError:
        raise _NotRowWise from None
    if not shaped.has_static_shape or shaped.rank < 2:
        raise _NotRowWise
    elements = 1
    for extent in shaped.shape:
        elements *= extent
    if elements < MIN_ELEMENTS:
        raise _NotRowWise


def fuse_rows(text: str) -> str | None:
    """`text` with its row-wise graph fused into one loop over blocks of rows (else None)."""
    from mlir import ir
    from mlir.dialects.transform import interpreter

    try:
        module = run_pipeline(UPSTREAM, text, PREPARE, before=_check_signature)
    except _NotRowWise:
        return None
    with module.context:
        plan = _plan(module)
        if plan is None:
            return None
        root, tile, rank, parallel = plan
        root.attributes[TAG] = ir.UnitAttr.get()
        script = ir.Module.parse(_script(tile, rank))
        interpreter.apply_named_sequence(module.operation, script.body.operations[0], script)
        root_tagged = [op for op in walk(module.operation) if TAG in op.attributes]
        for op in root_tagged:
            del op.attributes[TAG]
        if not parallel:
            for op in walk(module.operation):
                if op.name == "scf.forall":
                    op.attributes[SEQUENTIAL] = ir.UnitAttr.get()
    return str(module)

