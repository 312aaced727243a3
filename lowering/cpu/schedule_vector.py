"""CPU schedule strategies for the ops that are not contractions.

- innermost-dim reductions (sum, max, mean, norms; f32): vector steps folded
  into the accumulator by a reassociated tree (innermost_reduction_plan).
- transposes of the two innermost dims (f32): register tiles through shuffles
  (transpose_plan).
- elementwise ops and broadcasts (f32, bool bytes) whose operands are contiguous
  or broadcast along the innermost dim: a few vector registers per step
  (elementwise_vector_plan), their 0-d inputs read once before the loops
  (load_scalar_inputs, which the driver calls for such a plan).
- anything else with a parallel outermost loop: parallel blocks of scalar loops
  (parallel_outer_plan).

Large ops of the first three also split their outermost loop into blocks that run on
all cores. With `?` extents, reductions, elementwise ops and the parallel blocks get
the same steps, the step loop peeled where the innermost extent is dynamic, and a
run-time test of the work where whether they run on all cores depends on the sizes
(_dynamic_vector_plan, lowering/cpu/dynamic.py); transposes of `?` sizes keep the
scalar loops.
"""

from __future__ import annotations

import math

from . import dynamic, isa, parallel
from ..mlir_runner import map_results
from .schedule_plan import Plan, buffer_root, cache_tile, is_f32, largest_divisor, static_shape

# Reduction step of an innermost-dim reduction: the largest of the ISA's
# reduction_tiles dividing the reduced extent. One step is one vector of up to 256
# elements (16 AVX-512 registers; 128 on AVX2) folded by a reassociated tree
# (independent adds), then into the scalar accumulator: one dependent accumulator
# update per step instead of per vector register (the horizontal-reduce latency
# dominated row reductions).

# Blocks an op's outermost loop is split into when it runs on all cores: the
# static schedule hands each thread a contiguous run of them, so more blocks
# than threads only evens out the split.
PARALLEL_BLOCKS = 16

# Edge of a transpose's cache tile (elements): the input rows a block of register
# tiles reads are 32 cache lines on 32 pages at most. Without it, a 2048 x 1024
# transpose walked down 2048 rows of 4 KiB per column of tiles (every row on its
# own page and in the same L1 set) and took 1.2-1.9 ms against eager's 0.17 ms.
TRANSPOSE_CACHE_TILE = 32

# Vector registers per step of a vectorized elementwise op (the largest whose
# lanes divide the innermost extent): four give the out-of-order core independent
# work per step without spilling the operands of a long fused payload.
ELEMENTWISE_REGISTERS = (4, 2, 1)

# Tile edges of a transpose (per dim, the largest of the ISA's transpose_tiles
# dividing it; other sizes keep the scalar loops): a 16 x 16 float32 tile is 16
# AVX-512 registers, transposed by the 16 x 16 shuffle network (`lower_transpose`
# "shuffle_16x16"); on AVX2 8 x 8 tiles, by its specialized 8 x 8 shuffles.


def innermost_reduction_plan(op, index: int) -> Plan | None:
    """Vectorize a generic whose only reduction is its innermost loop (sum, max, mean, norms).

    Parallel loops are tiled by 1 and the reduction by up to 256
    (REDUCTION_TILES): each step reads that many contiguous elements per input
    and folds them into the accumulator with one horizontal `vector.reduction`
    (reassociated into a tree by convert-vector-to-llvm, like eager's
    vectorized sums).
    """
    if op.operation.name != "linalg.generic":
        return None
    attrs = op.operation.attributes
    iterators = [str(it) for it in attrs["iterator_types"]]
    if not iterators or "reduction" not in iterators[-1] or \
            any("reduction" in it for it in iterators[:-1]):
        return None
    operands = list(op.operation.operands)
    if not operands or not all(is_f32(v.type) for v in operands):
        return None
    # Every input must read the reduced dim as its innermost, contiguous one.
    rank = len(iterators)
    last = f"d{rank - 1}"
    maps = list(attrs["indexing_maps"])
    num_outputs = 1
    for m in maps[:-num_outputs]:
        results = map_results(m)
        if not results or results[-1] != last:
            return None
    loop_sizes = _loop_sizes(op, rank)
    vectors = isa.host()
    libm = _libm_calls(op)
    if libm & _NO_VECTOR_FORM:
        return None
    steps = (LIBM_LANES,) if libm else vectors.reduction_tiles
    if loop_sizes is None:
        return _dynamic_vector_plan(op, index, iterators, LIBM_LANES if libm
                                    else DYNAMIC_REGISTERS * vectors.lanes)
    rk = largest_divisor(loop_sizes[-1], steps)
    if rk == 1:
        return None
    tiles = [1] * (rank - 1) + [rk]
    handles = ", ".join(["!transform.any_op"] * (rank + 1))
    script, h = _parallel_outer_blocks(f"%op{index}", index, loop_sizes, iterators)
    script += (
        f"    %r{index}, %rl{index}:{rank} = transform.structured.tile_using_for {h} "
        f"tile_sizes {tiles} : (!transform.any_op) -> ({handles})\n"
        f"    transform.structured.vectorize %r{index} : !transform.any_op\n"
    )
    return Plan(index, script)


# Math ops that become libm calls (convert-math-to-llvm intrinsics LLVM expands to
# calls, or convert-math-to-libm).
_LIBM_MATH = frozenset(f"math.{name}" for name in (
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "erf", "erfc", "tanh", "sin",
    "cos", "tan", "atan", "atan2", "powf", "sinh", "cosh", "asin", "acos", "asinh", "acosh",
    "atanh", "cbrt"))
# Vectorized, these become libmvec calls (_ZGVdN8v_expf...): convert-math-to-llvm makes
# them LLVM intrinsics that llc's LIBMVEC table maps (expm1 and log1p expand to exp and
# log). The others of _LIBM_MATH but _NO_VECTOR_FORM become one scalar call per lane.
_VECTOR_LIBM = frozenset(f"math.{name}" for name in (
    "exp", "expm1", "log", "log1p", "powf", "sin", "cos", "tan"))
# No vector lowering at all in these bindings: the `llvm` stage fails on the
# vector.extract their expansion leaves (`torch.erf(x).sum(-1)` did not compile).
_NO_VECTOR_FORM = frozenset(f"math.{name}" for name in (
    "erf", "erfc", "asinh", "acosh", "atanh", "cbrt"))
# Lanes of a vector libm call: LLVM 22's LIBMVEC table maps float math at 4 and 8
# lanes (AVX2's _ZGVdN8v_*, which AVX-512 hosts run too), not 16; `llvm.exp.v16f32`
# became 16 scalar expf calls, on AVX-512 hosts as well (llc -mcpu=skylake-avx512).
# Measured on the AVX2 machine, log_softmax of 2048 x 256 (exp and sum in one
# reduction): 0.9-1.5 ms with steps of 128 (scalar expf per element), 0.31-0.62 ms
# with steps of 8.
LIBM_LANES = 8


def _libm_calls(op) -> set[str]:
    return {nested.operation.name for nested in op.operation.regions[0].blocks[0].operations
            if nested.operation.name in _LIBM_MATH}


def _parallel_outer_blocks(handle: str, index: int, loop_sizes: list[int],
                           iterators: list[str]) -> tuple[str, str]:
    """(transform ops, handle of the op inside): the op's outermost loop split into up to
    PARALLEL_BLOCKS blocks of an scf.forall (parallel: they run on all cores) when
    the op's iterations are at least MIN_PARALLEL_ELEMENTS; ("", handle) otherwise."""
    total = 1
    for extent in loop_sizes:
        total *= extent
    if total < parallel.MIN_PARALLEL_ELEMENTS or loop_sizes[0] < 2 or \
            "parallel" not in iterators[0]:
        return "", handle
    blocks = min(loop_sizes[0], PARALLEL_BLOCKS)
    block = -(-loop_sizes[0] // blocks)
    tiles = [block] + [0] * (len(loop_sizes) - 1)
    return (f"    %b{index}, %bl{index} = transform.structured.tile_using_forall {handle} "
            f"tile_sizes {tiles} : (!transform.any_op) -> (!transform.any_op, "
            f"!transform.any_op)\n"), f"%b{index}"


def parallel_outer_plan(op, index: int) -> Plan | None:
    """Split a large generic whose outermost loop is parallel into blocks of that loop run
    on all cores, like eager's parallel TensorIterator loops; the blocks stay scalar
    loops. For elementwise chains and broadcasts (LLVM vectorizes the blocks), and for
    reductions no strategy above vectorizes (non-f32 operands: argmax's index, float64
    statistics, integer sums, any/all): `torch.max(x, -1)` of 2048 x 256 took 4.1 ms
    on one core against eager's 0.48 ms."""
    if op.operation.name != "linalg.generic":
        return None
    iterators = [str(it) for it in op.operation.attributes["iterator_types"]]
    if not iterators:
        return None
    loop_sizes = _loop_sizes(op, len(iterators))
    if loop_sizes is None:
        return _dynamic_vector_plan(op, index, iterators, 0)
    # _parallel_outer_blocks declines an outermost reduction and small ops.
    script, _ = _parallel_outer_blocks(f"%op{index}", index, loop_sizes, iterators)
    return Plan(index, script) if script else None


# Vector registers per step of a vectorized elementwise op or reduction whose innermost
# extent is dynamic: the main loop of whole steps is peeled from the remainder (up to
# a step less one element, done one element per step), so a long step costs
# short rows more of them (a softmax row of 40: 32 + 8 single elements).
DYNAMIC_REGISTERS = 2


def _dynamic_vector_plan(op, index: int, iterators: list[str], step: int) -> Plan | None:
    """An elementwise op or innermost reduction with `?` extents: its innermost loop
    in steps of `step` elements, vectorized (0: scalar loops), the step loop peeled
    where that extent is dynamic (lowering/cpu/dynamic.py); the outermost loop split
    into blocks on all cores where the work is large enough (at run time, when that
    depends on the sizes)."""
    rank = len(iterators)
    extents = dynamic.loop_extents(op, rank)
    if extents is None:
        return None
    sizes = [extent for extent, _ in extents]
    static_work = math.prod(s for s in sizes if s)
    can_split = "parallel" in iterators[0] and sizes[0] != 1
    choice = dynamic.parallel_choice(op, static_work, True, parallel.MIN_PARALLEL_ELEMENTS) \
        if can_split else False
    if choice == "guard":
        return Plan(index, "", guard=(extents, static_work, parallel.MIN_PARALLEL_ELEMENTS))
    script, h = "", f"%op{index}"
    if choice:
        script, h = dynamic.forall_blocks(h, index, rank, PARALLEL_BLOCKS)
    if not step:
        return Plan(index, script) if script else None
    if sizes[-1] is not None:
        step = largest_divisor(sizes[-1], (step, step // 2, step // 4))
        if step < 4:
            return Plan(index, script) if script else None
    script += dynamic.tile_and_vectorize(h, "linalg.generic", [1] * (rank - 1) + [step],
                                         [False] * (rank - 1) + [sizes[-1] is None])
    return Plan(index, script)


def _is_dim(expr: str) -> bool:
    """An affine map result that is one loop dim (`d3`), not a constant or compound."""
    return expr.startswith("d") and expr[1:].isdigit()


def _contiguous_inner(maps, rank: int) -> bool:
    """Every operand reads or writes the innermost loop as its own innermost dim, or
    does not depend on it (a broadcast): the loop's vectors are contiguous loads."""
    last = f"d{rank - 1}"
    for amap in maps:
        results = map_results(amap)
        if last in results[:-1]:
            return False
        if not all(_is_dim(r) for r in results):
            return False  # a constant or compound index
    return True


# Element types of vectorized elementwise ops: float32 and the bytes that hold bools
# (lowering/bufferize/i1_storage.py: masks, where/select conditions).
_ELEMENTWISE_TYPES = frozenset(("f32", "i8", "i1"))


def elementwise_vector_plan(op, index: int) -> Plan | None:
    """Vectorize an f32 elementwise op (or broadcast) along its innermost dim.

    Left as scalar loops, LLVM's loop vectorizer did it, but it cannot know that the
    output buffer is not one of the inputs: every loop got a runtime alias check and a
    scalar copy of itself, and loops with constant trip counts were then unrolled
    whole, one copy of both per row of a block. The SGD step of a two-Linear MLP
    (4 such ops, 31 KB of LLVM IR) became 295 KB after `opt -O3`, and `llc` spent
    0.52 of its 0.67 s in loop strength reduction over it (a small GPT's AdamW step:
    0.73 of 1.03 s). Here each op is tiled by a few
    vector registers (ELEMENTWISE_REGISTERS) of its innermost dim and vectorized:
    no alias check, no scalar copy, nothing left for LLVM's vectorizer.
    Payloads calling exp, log, pow, sin, cos or tan step LIBM_LANES (libmvec calls);
    other libm calls (tanh, erf...) keep LLVM's vectorizer, which maps them to
    libmvec variants (vector_math); so do transposed operands and inner extents
    that no vector tile divides."""
    if op.operation.name != "linalg.generic":
        return None
    attrs = op.operation.attributes
    iterators = [str(it) for it in attrs["iterator_types"]]
    if not iterators or any("parallel" not in it for it in iterators):
        return None
    from mlir import ir

    shaped = [v for v in op.operation.operands if isinstance(v.type, ir.ShapedType)]
    if not shaped or not all(str(ir.ShapedType(v.type).element_type) in _ELEMENTWISE_TYPES
                             for v in shaped):
        return None
    body = op.operation.regions[0].blocks[0].operations
    libm = _libm_calls(op)
    if libm - _VECTOR_LIBM or any(nested.operation.name == "linalg.index" for nested in body):
        return None
    rank = len(iterators)
    if not _contiguous_inner(attrs["indexing_maps"], rank):
        return None
    loop_sizes = _loop_sizes(op, rank)
    lanes = isa.host().lanes
    if loop_sizes is None:
        plan = _dynamic_vector_plan(op, index, iterators, LIBM_LANES if libm
                                    else DYNAMIC_REGISTERS * lanes)
        if plan is not None:
            plan.elementwise = plan.guard is None
        return plan
    # Steps of one libmvec call where the payload calls libm (LIBM_LANES).
    steps = (LIBM_LANES,) if libm else tuple(lanes * r for r in ELEMENTWISE_REGISTERS)
    vt = largest_divisor(loop_sizes[-1], steps)
    if vt == 1:
        return None
    if rank == 1:
        # The one loop is both the blocks' and the vectors': blocks of whole tiles.
        script, h, _ = _parallel_tile_blocks(f"%op{index}", index, loop_sizes, [vt])
    else:
        script, h = _parallel_outer_blocks(f"%op{index}", index, loop_sizes, iterators)
    tiles = [1] * (rank - 1) + [vt]
    handles = ", ".join(["!transform.any_op"] * (rank + 1))
    script += (
        f"    %r{index}, %rl{index}:{rank} = transform.structured.tile_using_for {h} "
        f"tile_sizes {tiles} : (!transform.any_op) -> ({handles})\n"
        f"    transform.structured.vectorize %r{index} : !transform.any_op\n"
    )
    return Plan(index, script, elementwise=True)


def load_scalar_inputs(op) -> None:
    """Read an elementwise op's 0-d input buffers (AdamW's step count, a learning rate)
    once before the op and pass the values instead.

    Why: read inside the vectorized loop, LLVM cannot move the read out (the loop's
    stores might alias it), so neither what is computed from it: AdamW's bias
    correction `beta ** step` became one vector powf call per 8 elements, and the
    GPT optimizer graph ran 2.25x slower than with LLVM's own vectorizer (whose
    runtime alias check let it hoist both). Sound where the output is another
    buffer: nothing the op writes can change the value before the op reads it."""
    from mlir import ir
    from mlir.dialects import memref

    operands = list(op.operation.operands)
    inputs = ir.DenseI32ArrayAttr(op.operation.attributes["operandSegmentSizes"])[0]
    output_roots = {buffer_root(v) for v in operands[inputs:]}
    for position, value in enumerate(operands[:inputs]):
        if not isinstance(value.type, ir.MemRefType) or ir.MemRefType(value.type).rank:
            continue
        if buffer_root(value) in output_roots:
            continue
        with ir.InsertionPoint(op.operation), op.operation.location:
            loaded = memref.LoadOp(value, [])
        op.operation.operands[position] = loaded.result


def transpose_plan(op, index: int) -> Plan | None:
    """Vectorize a transpose of the two innermost dims (a Linear's weight W.t(), q @ k.t()).

    As scalar loops, one of the two sides is read or written with a large stride,
    one element at a time: W.t() of a 512 x 256 float32 weight took ~120 us, as
    long as the matmul using it (MLP step, x @ W.t() against x @ W). Tiles of
    up to 16 x 16 elements (TRANSPOSE_TILES) are instead read as whole rows
    (vectors), transposed in registers (shuffles) and written as whole rows.
    """
    if op.operation.name != "linalg.transpose":
        return None
    permutation = [int(p) for p in op.operation.attributes["permutation"]]
    rank = len(permutation)
    if rank < 2 or permutation != list(range(rank - 2)) + [rank - 1, rank - 2]:
        return None
    operands = list(op.operation.operands)
    if not all(is_f32(v.type) for v in operands):
        return None
    shape = static_shape(operands[1].type)
    if shape is None:
        return None
    edges = isa.host().transpose_tiles
    tiles = [1] * (rank - 2) + [largest_divisor(d, edges) for d in shape[-2:]]
    if 1 in tiles[-2:]:
        return None
    script, h, rows = _parallel_tile_blocks(f"%op{index}", index, shape, tiles)
    if rank > 2:
        rows = shape[-2]
    # Cache tiles of up to TRANSPOSE_CACHE_TILE square: the register tiles walk one
    # while its input rows' cache lines and pages are still held.
    cache = [1] * (rank - 2) + [cache_tile(rows, tiles[-2], TRANSPOSE_CACHE_TILE),
                                cache_tile(shape[-1], tiles[-1], TRANSPOSE_CACHE_TILE)]
    handles = ", ".join(["!transform.any_op"] * (rank + 1))
    script += (
        f"    %t{index}, %tl{index}:{rank} = transform.structured.tile_using_for {h} "
        f"tile_sizes {cache} : (!transform.any_op) -> ({handles})\n"
        f"    %r{index}, %rl{index}:{rank} = transform.structured.tile_using_for %t{index} "
        f"tile_sizes {tiles} : (!transform.any_op) -> ({handles})\n"
        f"    transform.structured.vectorize %r{index} : !transform.any_op\n"
    )
    return Plan(index, script)


def _parallel_tile_blocks(handle: str, index: int, shape: list[int],
                          tiles: list[int]) -> tuple[str, str, int]:
    """(transform ops, handle of the op inside, result rows per block): a large op's
    outermost dim split into up to PARALLEL_BLOCKS equal blocks of whole `tiles`, run
    on all cores (a transpose: eager copies a transposed tensor on all of them; a
    1-D elementwise op, whose one loop is also its vector loop); ("", handle,
    shape[0]) for small ones."""
    tiles_0 = shape[0] // tiles[0]
    if math.prod(shape) < parallel.MIN_PARALLEL_ELEMENTS or tiles_0 < 2:
        return "", handle, shape[0]
    # Equal blocks of whole tiles: a partial block would be a dynamic-size tile.
    blocks = max(b for b in range(1, min(tiles_0, PARALLEL_BLOCKS) + 1) if tiles_0 % b == 0)
    if blocks < 2:
        return "", handle, shape[0]
    block = [shape[0] // blocks] + [0] * (len(shape) - 1)
    return (f"    %b{index}, %bl{index} = transform.structured.tile_using_forall {handle} "
            f"tile_sizes {block} : (!transform.any_op) -> (!transform.any_op, "
            f"!transform.any_op)\n"), f"%b{index}", block[0]


def _loop_sizes(op, rank: int) -> list[int] | None:
    """Static loop bounds of a linalg op (from its identity-mapped operands)."""
    from mlir import ir

    sizes: list[int | None] = [None] * rank
    maps = op.operation.attributes["indexing_maps"]
    for value, amap in zip(op.operation.operands, maps):
        if not isinstance(value.type, ir.ShapedType):
            continue  # a scalar operand
        shape = static_shape(value.type)
        if shape is None:
            return None  # a dynamic size (a boolean-mask index): no static schedule
        for extent, expr in zip(shape, map_results(amap)):
            if _is_dim(expr):
                sizes[int(expr[1:])] = extent
    if any(s is None for s in sizes):
        return None
    return sizes

