"""CPU schedule: tile and vectorize linalg ops on buffers with the transform dialect.

Runs at the start of the `loops` stage, on the bufferized module. Each linalg
op that a strategy below fits is tagged, and one transform script (built here
from the ops' static shapes) tiles, vectorizes and lowers exactly those ops;
everything else keeps the scalar `convert-linalg-to-loops` path that follows
in the pipeline (and LLVM's loop vectorizer at -O3).

Strategies (tile sizes for the host's vector registers, lowering/cpu_isa.py; the
same code is correct on any x86-64, llc picks the host's vector width):

- contraction (`linalg.matmul`, `linalg.batch_matmul`, f32, static shapes):
  a cache tile (at most 64 x 256 x 256 of M x N x K) around a register tile
  of 8 x 32 (AVX-512; 6 x 16 or 4 x 16 on AVX2) of M x N over 4 steps of K,
  all dividing the shape (no partial tiles, so no masks). The register tile
  becomes one `vector.contract`, then per K step one broadcast FMA per row on
  `vector<32xf32>` (AVX2: `vector<16xf32>`) rows. The accumulator is read
  before the K loop and written after it (`hoist_redundant_vector_transfers`
  after folding the subviews into the transfers): it lives in registers,
  never reloaded or stored per step.

Ops are matched by a `lazymlir.schedule` attribute holding their index; the
attribute is removed afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import cpu_isa, cpu_parallel
from .mlir_runner import PipelineFailure

TAG = "lazymlir.schedule"

# Register tiles, reduction steps and transpose tiles depend on the host's vector
# registers: cpu_isa.py (8 x 32 accumulators on AVX-512, 6 x 16 or 4 x 16 on AVX2).
# Cache tile caps (M x N x K): a 256 x 32 slice of B (32 KiB) stays in L1
# while a 64-row block of A streams past it.
CACHE_M, CACHE_N, CACHE_K = 64, 256, 256
# Contractions of at least this many multiply-adds (batch x M x N x K) run
# their (M, N) cache tiles on all cores: ~20 us of work on one core, against a
# few microseconds to hand blocks to PyTorch's OpenMP threads (cpu_parallel).
# The old 32M, set for MLIR's async runtime, kept an MLP step's 64x256x512
# matmuls (8.4M) on one core.
MIN_PARALLEL_FLOPS = 2 * 1024 * 1024

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

# Tile edges of a transpose (per dim, the largest of the ISA's transpose_tiles
# dividing it; other sizes keep the scalar loops): a 16 x 16 float32 tile is 16
# AVX-512 registers, transposed by the 16 x 16 shuffle network (`lower_transpose`
# "shuffle_16x16"); on AVX2 8 x 8 tiles, by its specialized 8 x 8 shuffles.


@dataclass
class Plan:
    index: int
    script: str  # transform ops on the handle %op<index>


def _largest_divisor(dim: int, candidates: tuple[int, ...]) -> int:
    for c in candidates:
        if dim % c == 0:
            return c
    return 1


def _cache_tile(dim: int, inner: int, cap: int) -> int:
    """The largest multiple of `inner` that divides `dim` and is at most `cap` (at least inner)."""
    best = inner
    for t in range(inner, min(dim, cap) + 1, inner):
        if dim % t == 0:
            best = t
    return best


def _static_shape(value_type) -> list[int] | None:
    from mlir import ir

    shaped = ir.ShapedType(value_type)
    if not shaped.has_static_shape:
        return None
    return list(shaped.shape)


def _is_f32(value_type) -> bool:
    from mlir import ir

    return str(ir.ShapedType(value_type).element_type) == "f32"


_DEFAULT_MAPS = {
    "linalg.matmul": ["affine_map<(d0, d1, d2) -> (d0, d2)>",
                      "affine_map<(d0, d1, d2) -> (d2, d1)>",
                      "affine_map<(d0, d1, d2) -> (d0, d1)>"],
    "linalg.batch_matmul": ["affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>",
                            "affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>",
                            "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>"],
}


def _contraction_plan(op, index: int) -> Plan | None:
    """Tile + vectorize a plain (un-transposed) matmul or batch_matmul on f32 buffers."""
    name = op.operation.name
    if name not in ("linalg.matmul", "linalg.batch_matmul"):
        return None
    maps = op.operation.attributes["indexing_maps"] \
        if "indexing_maps" in op.operation.attributes else None
    if maps is not None and [str(m) for m in maps] != _DEFAULT_MAPS[name]:
        return None  # transposed/broadcast variants keep the scalar loops
    operands = list(op.operation.operands)
    if len(operands) != 3 or not all(_is_f32(v.type) for v in operands):
        return None
    shapes = [_static_shape(v.type) for v in operands]
    if any(s is None for s in shapes):
        return None
    a, b = shapes[0], shapes[1]
    m, k, n = a[-2], a[-1], b[-1]
    isa = cpu_isa.host()
    rm = _largest_divisor(m, isa.reg_m)
    rn = _largest_divisor(n, isa.reg_n)
    rk = _largest_divisor(k, isa.reg_k)
    if rm == 1 or rn == 1:
        return None  # tiny or odd shapes: the scalar loops are as good
    cm, cn, ck = _cache_tile(m, rm, CACHE_M), _cache_tile(n, rn, CACHE_N), \
        _cache_tile(k, rk, CACHE_K)
    batch = [1] if name == "linalg.batch_matmul" else []
    nbatch = a[0] if batch else 1
    h = f"%op{index}"
    script = ""
    # Large enough: the (M, N) cache tiles (and batches) are an scf.forall, which
    # runs on all cores (cpu_parallel); the rest of the schedule is per tile.
    if nbatch * m * n * k >= MIN_PARALLEL_FLOPS and nbatch * (m // cm) * (n // cn) >= 2:
        outer_par = batch + [cm, cn, 0]
        script += (
            f"    %p{index}, %pl{index} = transform.structured.tile_using_forall {h} "
            f"tile_sizes {outer_par} : (!transform.any_op) -> (!transform.any_op, "
            "!transform.any_op)\n")
        h = f"%p{index}"
        outer = [0] * len(batch) + [0, 0, ck]
    else:
        outer = batch + [cm, cn, ck]
    inner = batch + [rm, rn, rk]
    loops = len(inner)
    outer_loops = sum(1 for t in outer if t)
    handles = ", ".join(["!transform.any_op"] * (loops + 1))
    outer_handles = ", ".join(["!transform.any_op"] * (outer_loops + 1))
    script += (
        f"    %c{index}, %cl{index}:{outer_loops} = transform.structured.tile_using_for {h} "
        f"tile_sizes {outer} : (!transform.any_op) -> ({outer_handles})\n"
        f"    %r{index}, %rl{index}:{loops} = transform.structured.tile_using_for %c{index} "
        f"tile_sizes {inner} : (!transform.any_op) -> ({handles})\n"
        f"    transform.structured.vectorize %r{index} : !transform.any_op\n"
        # Subviews -> offsets in the transfers, so the hoisting below sees the
        # accumulator's buffer itself. Only inside this op's loops: on the
        # expand_shape views of reductions this pattern set never converges.
        f"    transform.apply_patterns to %cl{index}#0 {{\n"
        f"      transform.apply_patterns.memref.fold_memref_alias_ops\n"
        f"    }} : !transform.any_op\n"
    )
    return Plan(index, script)


def _innermost_reduction_plan(op, index: int) -> Plan | None:
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
    if not operands or not all(_is_f32(v.type) for v in operands):
        return None
    shapes = [_static_shape(v.type) for v in operands]
    if any(s is None for s in shapes):
        return None
    # Every input must read the reduced dim as its innermost, contiguous one.
    rank = len(iterators)
    last = f"d{rank - 1}"
    maps = [str(m) for m in attrs["indexing_maps"]]
    num_outputs = 1
    for m in maps[:-num_outputs]:
        results = m.split("->")[1].strip(" ()>")
        if not results.split(",")[-1].strip() == last:
            return None
    loop_sizes = _loop_sizes(op, rank)
    if loop_sizes is None:
        return None
    rk = _largest_divisor(loop_sizes[-1], cpu_isa.host().reduction_tiles)
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


def _parallel_outer_blocks(handle: str, index: int, loop_sizes: list[int],
                           iterators: list[str]) -> tuple[str, str]:
    """(transform ops, handle of the op inside): the op's outermost loop split into up to
    PARALLEL_BLOCKS blocks of an scf.forall (cpu_parallel: they run on all cores) when
    the op's iterations are at least MIN_PARALLEL_ELEMENTS; ("", handle) otherwise."""
    total = 1
    for extent in loop_sizes:
        total *= extent
    if total < cpu_parallel.MIN_PARALLEL_ELEMENTS or loop_sizes[0] < 2 or \
            "parallel" not in iterators[0]:
        return "", handle
    blocks = min(loop_sizes[0], PARALLEL_BLOCKS)
    block = -(-loop_sizes[0] // blocks)
    tiles = [block] + [0] * (len(loop_sizes) - 1)
    return (f"    %b{index}, %bl{index} = transform.structured.tile_using_forall {handle} "
            f"tile_sizes {tiles} : (!transform.any_op) -> (!transform.any_op, "
            f"!transform.any_op)\n"), f"%b{index}"


def _parallel_elementwise_plan(op, index: int) -> Plan | None:
    """Split a large all-parallel generic (an elementwise chain, a broadcast) into blocks
    of its outermost loop run on all cores, like eager's parallel TensorIterator loops;
    the blocks stay scalar loops that LLVM vectorizes."""
    if op.operation.name != "linalg.generic":
        return None
    iterators = [str(it) for it in op.operation.attributes["iterator_types"]]
    if not iterators or any("parallel" not in it for it in iterators):
        return None
    loop_sizes = _loop_sizes(op, len(iterators))
    if loop_sizes is None:
        return None
    script, handle = _parallel_outer_blocks(f"%op{index}", index, loop_sizes, iterators)
    return Plan(index, script) if script else None


def _transpose_plan(op, index: int) -> Plan | None:
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
    if not all(_is_f32(v.type) for v in operands):
        return None
    shape = _static_shape(operands[1].type)
    if shape is None:
        return None
    edges = cpu_isa.host().transpose_tiles
    tiles = [1] * (rank - 2) + [_largest_divisor(d, edges) for d in shape[-2:]]
    if 1 in tiles[-2:]:
        return None
    handles = ", ".join(["!transform.any_op"] * (rank + 1))
    script = (
        f"    %r{index}, %rl{index}:{rank} = transform.structured.tile_using_for %op{index} "
        f"tile_sizes {tiles} : (!transform.any_op) -> ({handles})\n"
        f"    transform.structured.vectorize %r{index} : !transform.any_op\n"
    )
    return Plan(index, script)


def _loop_sizes(op, rank: int) -> list[int] | None:
    """Static loop bounds of a linalg op (from its identity-mapped operands)."""
    from mlir import ir

    sizes: list[int | None] = [None] * rank
    maps = op.operation.attributes["indexing_maps"]
    for value, amap in zip(op.operation.operands, maps):
        if not isinstance(value.type, ir.ShapedType):
            continue  # a scalar operand
        shape = _static_shape(value.type)
        if shape is None:
            return None  # a dynamic size (a boolean-mask index): no static schedule
        results = str(amap).split("->")[1].strip(" ()>").split(",")
        for extent, expr in zip(shape, results):
            expr = expr.strip()
            if expr.startswith("d") and expr[1:].isdigit():
                sizes[int(expr[1:])] = extent
    if any(s is None for s in sizes):
        return None
    return sizes


STRATEGIES = (_contraction_plan, _innermost_reduction_plan, _transpose_plan,
              _parallel_elementwise_plan)

# After the per-op steps, on the whole function: turn the vectorized
# matmuls into vector.contract, CSE (so a transfer pair has equal indices),
# keep accumulators in registers across the reduction loop, then lower
# contractions to FMAs and transfers to 1-D (what convert-vector-to-llvm takes).
_FINISH = """
    %f = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %f : !transform.any_op
    %h = transform.structured.hoist_redundant_vector_transfers %f : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %h {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = "innerreduction"
      transform.apply_patterns.vector.lower_transpose {transpose_lowering}
      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.lower_transfer max_transfer_rank = 1
    } : !transform.any_op
"""


def _linalg_ops(module):
    found = []

    def visit(op):
        name = op.operation.name
        if name.startswith("linalg."):
            found.append(op)
            return
        for region in op.operation.regions:
            for block in region.blocks:
                for nested in block.operations:
                    visit(nested)

    visit(module.operation)
    return found


def build_script(module) -> str | None:
    """Tag the ops a strategy fits and return the transform module text (None: nothing to do)."""
    from mlir import ir

    plans = []
    for op in _linalg_ops(module):
        for strategy in STRATEGIES:
            plan = strategy(op, len(plans))
            if plan is not None:
                op.operation.attributes[TAG] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), plan.index)
                plans.append(plan)
                break
    if not plans:
        return None
    body = []
    for plan in plans:
        body.append(f"    %op{plan.index} = transform.structured.match "
                    f"attributes{{{TAG} = {plan.index} : i64}} in %root "
                    f": (!transform.any_op) -> !transform.any_op\n")
        body.append(plan.script)
    return ("module attributes {transform.with_named_sequence} {\n"
            "  transform.named_sequence @__transform_main("
            "%root: !transform.any_op {transform.readonly}) {\n"
            + "".join(body) + _FINISH.replace("{transpose_lowering}",
                                              cpu_isa.host().transpose_lowering)
            + "    transform.yield\n  }\n}\n")


def _strip_tags(module) -> None:
    for op in _linalg_ops(module):
        if TAG in op.operation.attributes:
            del op.operation.attributes[TAG]


def apply(module) -> None:
    """Schedule `module` in place (call inside its context)."""
    from mlir import ir
    from mlir.dialects.transform import interpreter

    script = build_script(module)
    if script is None:
        return
    transform_module = ir.Module.parse(script)
    entry = transform_module.body.operations[0]
    try:
        interpreter.apply_named_sequence(module.operation, entry, transform_module)
    except Exception as error:  # the caller retries without the schedule
        raise ScheduleFailure(f"cpu schedule failed: {error}") from None
    _strip_tags(module)


class ScheduleFailure(PipelineFailure):
    """The transform script failed on this module; the scalar loops still work."""
