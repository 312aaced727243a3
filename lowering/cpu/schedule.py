"""CPU schedule: tile and vectorize linalg ops on buffers with the transform dialect.

Runs at the start of the `loops` stage, on the bufferized module. Each linalg
op that a strategy below fits is tagged, and one transform script (built here
from the ops' static shapes) tiles, vectorizes and lowers exactly those ops;
everything else keeps the scalar `convert-linalg-to-loops` path that follows
in the pipeline (and LLVM's loop vectorizer at -O3).

Strategies (tile sizes for the host's vector registers, lowering/cpu/isa.py; the
same code is correct on any x86-64, llc picks the host's vector width):

- contraction (`linalg.matmul`, `linalg.batch_matmul`, f32, static shapes):
  a cache tile (at most 64 x 256 x 256 of M x N x K) around a register tile
  of 8 x 32 (AVX-512; 6 x 16 or 4 x 16 on AVX2) of M x N over 4 steps of K,
  all dividing the shape (no partial tiles, so no masks). The register tile
  becomes one `vector.contract`, then per K step one broadcast FMA per row on
  `vector<32xf32>` (AVX2: `vector<16xf32>`) rows. The accumulator is read
  before the K loop and written after it (`hoist_redundant_vector_transfers`
  after folding the subviews into the transfers): it lives in registers,
  never reloaded or stored per step. Large ones run their (M, N) cache tiles
  on all cores, split into at least MIN_PARALLEL_BLOCKS blocks.
- innermost-dim reductions (sum, max, mean, norms; f32): vector steps folded
  into the accumulator by a reassociated tree (_innermost_reduction_plan).
- transposes of the two innermost dims (f32): register tiles through shuffles.
- elementwise ops and broadcasts (f32, bool bytes) whose operands are contiguous
  or broadcast along the innermost dim: a few vector registers per step
  (_elementwise_vector_plan).
- anything else with a parallel outermost loop: parallel blocks of scalar loops.

Symbolic sizes (`?` dims, a graph compiled once for every size): contractions,
innermost reductions, elementwise ops and the parallel blocks get the same
strategies with the ISA's preferred tiles on dynamic dims, whose tile loops are
peeled (full static tiles, then a vectorized remainder), and run on all cores
under a run-time test of their work (lowering/cpu/dynamic.py). Transposes of `?`
sizes keep the scalar loops.

Ops are matched by a `lazymlir.schedule` attribute holding their index; the
attribute is removed afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import dynamic, isa, parallel
from ..mlir_runner import PipelineFailure, map_results, walk

TAG = "lazymlir.schedule"
# Plans per transform script (build_script says why not all in one).
BATCH = 64

# Register tiles, reduction steps and transpose tiles depend on the host's vector
# registers: isa.py (8 x 32 accumulators on AVX-512, 6 x 16 or 4 x 16 on AVX2).
# Cache tile caps (M x N x K): a 256 x 32 slice of B (32 KiB) stays in L1
# while a 64-row block of A streams past it.
CACHE_M, CACHE_N, CACHE_K = 64, 256, 256
# Contractions of at least this many multiply-adds (batch x M x N x K) run
# their (M, N) cache tiles on all cores: ~20 us of work on one core, against a
# few microseconds to hand blocks to PyTorch's OpenMP threads (parallel).
# A threshold of 32M would keep an MLP step's 64x256x512 matmuls (8.4M) on one
# core.
MIN_PARALLEL_FLOPS = 2 * 1024 * 1024
# (M, N) cache tiles (and batches) a parallel contraction is split into at least,
# halving its cache tile while the halves stay whole register tiles: a 64x512 by
# 512x256 matmul (an MLP's second Linear) is one 64 x 256 cache tile, and ran on
# one core of two. Four blocks split evenly over two or four threads.
MIN_PARALLEL_BLOCKS = 4

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


@dataclass
class Plan:
    index: int
    script: str  # transform ops on the handle %op<index>
    # A contraction, whose accumulator must stay in registers across its K loop.
    contraction: bool = False
    # An elementwise op whose 0-d inputs are read once, before its loops.
    elementwise: bool = False
    # A contraction whose K loop is not split into cache tiles: each accumulator
    # register tile is read from the output once, before the K loop (_zero_inits).
    reads_output_once: bool = False
    # Symbolic sizes, where whether the op runs on all cores depends on them: (its
    # loops' extents, the product of the static ones, the work threshold); the op is
    # put under a run-time test and each copy is planned again (dynamic.guard).
    guard: tuple | None = None


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
        return _dynamic_contraction_plan(op, index, name)
    a, b = shapes[0], shapes[1]
    m, k, n = a[-2], a[-1], b[-1]
    vectors = isa.host()
    rm = _largest_divisor(m, vectors.reg_m)
    rn = _largest_divisor(n, vectors.reg_n)
    rk = _largest_divisor(k, vectors.reg_k)
    if rm == 1 or rn == 1:
        return None  # tiny or odd shapes: the scalar loops are as good
    cm, cn, ck = _cache_tile(m, rm, CACHE_M), _cache_tile(n, rn, CACHE_N), \
        _cache_tile(k, rk, CACHE_K)
    batch = [1] if name == "linalg.batch_matmul" else []
    nbatch = a[0] if batch else 1
    h = f"%op{index}"
    script = ""
    # Large enough: the (M, N) cache tiles (and batches) are an scf.forall, which
    # runs on all cores (parallel); the rest of the schedule is per tile.
    parallel = nbatch * m * n * k >= MIN_PARALLEL_FLOPS
    if parallel:
        pm, pn = _parallel_tiles(m, n, cm, cn, rm, rn, nbatch)
        parallel = nbatch * (m // pm) * (n // pn) >= 2
    if parallel:
        script += _parallel_cache_tiles(index, h, batch + [pm, pn, 0])
        h = f"%p{index}"
        outer = [0] * len(batch) + [0, 0, ck]
    else:
        outer = batch + [cm, cn, ck]
    inner = batch + [rm, rn, rk]
    loops = len(inner)
    outer_loops = sum(1 for t in outer if t)
    handles = ", ".join(["!transform.any_op"] * (loops + 1))
    script += (
        _cache_tiles(index, h, outer, outer_loops)
        + f"    %r{index}, %rl{index}:{loops} = transform.structured.tile_using_for %c{index} "
        f"tile_sizes {inner} : (!transform.any_op) -> ({handles})\n"
        f"    transform.structured.vectorize %r{index} : !transform.any_op\n"
        # Subviews -> offsets in the transfers, so the hoisting below sees the
        # accumulator's buffer itself. Only inside this op's loops: on the
        # expand_shape views of reductions this pattern set never converges.
        f"    transform.apply_patterns to %cl{index}#0 {{\n"
        f"      transform.apply_patterns.memref.fold_memref_alias_ops\n"
        f"    }} : !transform.any_op\n"
    )
    return Plan(index, script, contraction=True, reads_output_once=ck == k)


# Register widths of N in the one-row tiles of a dynamic M's remainder rows.
DYNAMIC_ROW_TILE = 4


def _dynamic_contraction_plan(op, index: int, name: str) -> Plan | None:
    """A contraction with `?` extents: the static plan's tiles, with the ISA's preferred
    register tile and the largest cache tile under the cap on a dynamic dim, whose
    register tile loops are peeled (lowering/cpu/dynamic.py). Run on all cores when
    its work is large enough at run time (a guard, where that depends on the sizes)."""
    rank = 4 if name == "linalg.batch_matmul" else 3
    extents = dynamic.loop_extents(op, rank, _DEFAULT_MAPS[name])
    if extents is None:
        return None
    sizes = [extent for extent, _ in extents]
    m, n, k = sizes[-3:]
    vectors = isa.host()
    rm = _largest_divisor(m, vectors.reg_m) if m else vectors.reg_m[0]
    rn = _largest_divisor(n, vectors.reg_n) if n else vectors.reg_n[0]
    rk = _largest_divisor(k, vectors.reg_k) if k else vectors.reg_k[0]
    if rm == 1 or rn == 1:
        return None
    cm = _cache_tile(m, rm, CACHE_M) if m else CACHE_M // rm * rm
    cn = _cache_tile(n, rn, CACHE_N) if n else CACHE_N // rn * rn
    ck = _cache_tile(k, rk, CACHE_K) if k else CACHE_K // rk * rk
    static_work = math.prod(s for s in sizes if s)
    choice = dynamic.parallel_choice(op, static_work, True, MIN_PARALLEL_FLOPS)
    if choice == "guard":
        return Plan(index, "", guard=(extents, static_work, MIN_PARALLEL_FLOPS))
    batch = [1] if rank == 4 else []
    h = f"%op{index}"
    script = ""
    if choice:
        nbatch = sizes[0] if batch and sizes[0] else 1
        pm, pn = _parallel_tiles(m or cm, n or cn, cm, cn, rm, rn, nbatch)
        script += _parallel_cache_tiles(index, h, batch + [pm, pn, 0])
        h = f"%p{index}"
        outer = [0] * len(batch) + [0, 0, ck]
        n_tile = pn
    else:
        outer = batch + [cm, cn, ck]
        n_tile = cn
    outer_loops = sum(1 for t in outer if t)
    script += _cache_tiles(index, h, outer, outer_loops)
    # The rows a dynamic M leaves (fewer than rm) one at a time, each over a row of
    # DYNAMIC_ROW_TILE register widths of N where N allows: independent accumulators
    # to cover the FMA latency that rm rows cover in the full tiles.
    row_n = _largest_divisor(n_tile, (rn * DYNAMIC_ROW_TILE, rn * 2, rn)) if n else rn
    script += dynamic.tile_and_vectorize(
        f"%c{index}", name, batch + [rm, rn, rk],
        [False] * len(batch) + [s is None for s in (m, n, k)],
        remainder_tiles=batch + [rm, row_n, rk])
    script += (f"    transform.apply_patterns to %cl{index}#0 {{\n"
               f"      transform.apply_patterns.memref.fold_memref_alias_ops\n"
               f"    }} : !transform.any_op\n")
    return Plan(index, script, contraction=True)



def _parallel_cache_tiles(index: int, handle: str, tiles: list) -> str:
    """A matmul's (batch, M, N) cache tiles as an scf.forall (`%p{index}`): the cores
    share them."""
    return (f"    %p{index}, %pl{index} = transform.structured.tile_using_forall {handle} "
            f"tile_sizes {tiles} : (!transform.any_op) -> (!transform.any_op, "
            "!transform.any_op)\n")


def _cache_tiles(index: int, handle: str, tiles: list, loops: int) -> str:
    """A matmul's cache tiles (`%c{index}`), `loops` of them nonzero, as scf.for loops."""
    return (f"    %c{index}, %cl{index}:{loops} = transform.structured.tile_using_for {handle} "
            f"tile_sizes {tiles} : (!transform.any_op) -> "
            f"({', '.join(['!transform.any_op'] * (loops + 1))})\n")

def _parallel_tiles(m: int, n: int, cm: int, cn: int, rm: int, rn: int,
                    nbatch: int) -> tuple[int, int]:
    """(M, N) tile of a parallel contraction's blocks: the cache tile, halved (N first:
    each thread then reads its own part of B) until there are MIN_PARALLEL_BLOCKS
    blocks or a half would no longer be whole register tiles."""
    while nbatch * (m // cm) * (n // cn) < MIN_PARALLEL_BLOCKS:
        if cn % (2 * rn) == 0 and cn // 2 >= 2 * rn:
            cn //= 2
        elif cm % (2 * rm) == 0:
            cm //= 2
        else:
            break
    return cm, cn


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
    rk = _largest_divisor(loop_sizes[-1], steps)
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


def _parallel_outer_plan(op, index: int) -> Plan | None:
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
        step = _largest_divisor(sizes[-1], (step, step // 2, step // 4))
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


def _elementwise_vector_plan(op, index: int) -> Plan | None:
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
    vt = _largest_divisor(loop_sizes[-1], steps)
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


def _load_scalar_inputs(op) -> None:
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
    output_roots = {_buffer_root(v) for v in operands[inputs:]}
    for position, value in enumerate(operands[:inputs]):
        if not isinstance(value.type, ir.MemRefType) or ir.MemRefType(value.type).rank:
            continue
        if _buffer_root(value) in output_roots:
            continue
        with ir.InsertionPoint(op.operation), op.operation.location:
            loaded = memref.LoadOp(value, [])
        op.operation.operands[position] = loaded.result


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
    edges = isa.host().transpose_tiles
    tiles = [1] * (rank - 2) + [_largest_divisor(d, edges) for d in shape[-2:]]
    if 1 in tiles[-2:]:
        return None
    script, h, rows = _parallel_tile_blocks(f"%op{index}", index, shape, tiles)
    if rank > 2:
        rows = shape[-2]
    # Cache tiles of up to TRANSPOSE_CACHE_TILE square: the register tiles walk one
    # while its input rows' cache lines and pages are still held.
    cache = [1] * (rank - 2) + [_cache_tile(rows, tiles[-2], TRANSPOSE_CACHE_TILE),
                                _cache_tile(shape[-1], tiles[-1], TRANSPOSE_CACHE_TILE)]
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
        shape = _static_shape(value.type)
        if shape is None:
            return None  # a dynamic size (a boolean-mask index): no static schedule
        for extent, expr in zip(shape, map_results(amap)):
            if _is_dim(expr):
                sizes[int(expr[1:])] = extent
    if any(s is None for s in sizes):
        return None
    return sizes


STRATEGIES = (_contraction_plan, _innermost_reduction_plan, _transpose_plan,
              _elementwise_vector_plan, _parallel_outer_plan)

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


def _is_linalg(op) -> bool:
    return op.name.startswith("linalg.")


def _linalg_ops_after(module) -> list[tuple]:
    """(linalg op, the op right before it in its block or None) for the linalg ops of
    `module` (not those nested in one), as OpViews. In the pre-order walk, the element
    before an op is its previous sibling exactly when it is in the same block (a
    sibling between them, or its nested ops, would come in between)."""
    ops = walk(module.operation, skip=_is_linalg)
    return [(op.opview, previous.opview if previous.block == op.block else None)
            for previous, op in zip(ops, ops[1:]) if _is_linalg(op)]


def _linalg_ops(module):
    """The linalg ops of `module` (not those nested in one), as OpViews."""
    return [op for op, _ in _linalg_ops_after(module)]


ACCUMULATOR_CAST = "lazymlir.accumulator"

# memref ops whose result is a view of their first operand.
_VIEW_OPS = frozenset(f"memref.{name}" for name in (
    "subview", "collapse_shape", "expand_shape", "cast", "reinterpret_cast", "view",
    "transpose", "assume_alignment"))


def _buffer_root(value):
    """The buffer `value` is a view of (itself if it is not a view)."""
    from mlir import ir

    while not isinstance(value.owner, ir.Block) and value.owner.operation.name in _VIEW_OPS:
        value = value.owner.operation.operands[0]
    return value


def _isolate_accumulator(op):
    """Route a contraction's output buffer through a cast that only this op uses; returns
    the cast (None where the inputs may share the output's buffer).

    Why: upstream hoist_redundant_vector_transfers keeps the accumulator in memory
    (a load and a store of the register tile per K step) whenever the buffer it
    accesses has any view-like user anywhere in the function, as its stand-in for
    alias analysis. A matmul result that is later reshaped (an MLP loss's
    flatten, every Linear of a transformer on (batch, seq, dim)) has one. Behind
    the cast only the tile loops' own transfers use the buffer, which is what the
    hoisting then checks; the cast is removed after the schedule (`_restore`).
    Sound because the K loop reads only A and B, which are other buffers.
    The cast is an unregistered op: the schedule's canonicalizations fold every
    registered same-type cast away before the hoisting runs."""
    from mlir import ir

    operands = list(op.operation.operands)
    output = operands[-1]
    root = _buffer_root(output)
    if any(_buffer_root(value) == root for value in operands[:-1]):
        return None
    with ir.InsertionPoint(op.operation), op.operation.location:
        cast = ir.Operation.create(ACCUMULATOR_CAST, results=[output.type],
                                   operands=[output])
    op.operation.operands[len(operands) - 1] = cast.result
    return cast


def _zero_fill_before(op, previous):
    """`previous` (the op right before `op` in its block, or None) if it is a
    `linalg.fill` of +0.0 into `op`'s output buffer, else None."""
    from mlir import ir

    if previous is None or previous.operation.name != "linalg.fill":
        return None
    value, output = list(previous.operation.operands)
    if output != list(op.operation.operands)[-1] or isinstance(value.owner, ir.Block) \
            or value.owner.operation.name != "arith.constant":
        return None
    constant = value.owner.operation.attributes["value"]
    if not isinstance(constant, ir.FloatAttr):
        return None
    zero = ir.FloatAttr(constant).value
    return previous if zero == 0.0 and math.copysign(1.0, zero) > 0 else None


def _zero_inits(accumulators) -> None:
    """Start contractions from zero registers instead of a zero-filled output.

    torch-mlir writes `x @ w` as a fill of the output with 0 and a matmul that
    accumulates into it: a memset of the whole output (512 KB for an MLP's
    weight gradient), then one read of each register tile back before its K
    loop, in another pass over memory. For a contraction whose K loop is not
    split into cache tiles (Plan.reads_output_once), the hoisted read of each
    accumulator tile (a `vector.transfer_read` of the output that only seeds
    the K loop's `iter_args`) is replaced by a zero vector and the fill is
    erased, which is what a BLAS does with beta = 0. Where any read of the
    output is not such a seed (the hoisting did not happen), nothing changes.
    `accumulators`: (the op's accumulator cast, the fill before it)."""
    from mlir import ir
    from mlir.dialects import arith

    for cast, fill in accumulators:
        reads = []
        for use in cast.result.uses:
            user = use.owner
            if user.name == "vector.transfer_read":
                seeds = [u for u in user.result.uses
                         if u.owner.name == "scf.for" and u.operand_number >= 3]
                if len(seeds) != len(list(user.result.uses)):
                    break
                reads.append(user)
            elif user.name != "vector.transfer_write":
                break
        else:
            for read in reads:
                with ir.InsertionPoint(read), read.location:
                    zeros = arith.ConstantOp(read.result.type, ir.DenseElementsAttr.get_splat(
                        read.result.type, ir.FloatAttr.get(
                            ir.VectorType(read.result.type).element_type, 0.0)))
                read.result.replace_all_uses_with(zeros.result)
                read.erase()
            if reads:
                fill.operation.erase()


def _restore(casts) -> None:
    for cast in casts:
        cast.result.replace_all_uses_with(cast.operands[0])
        cast.erase()


def _has_dynamic_sizes(op) -> bool:
    from mlir import ir

    return any(isinstance(v.type, ir.ShapedType) and not ir.ShapedType(v.type).has_static_shape
               for v in op.operation.operands)


def _plan_op(op, previous, plans: list, isolated: list | None,
             zero_inits: list | None) -> None:
    """Tag `op` with the first strategy that fits it and append its plan to `plans`."""
    from mlir import ir

    for strategy in STRATEGIES:
        plan = strategy(op, len(plans))
        if plan is None:
            continue
        if plan.guard is not None:
            for copy in dynamic.guard(op, *plan.guard):
                _plan_op(copy, None, plans, isolated, zero_inits)
            return
        # Tagged by batch (build_script): a guarded op's copies are planned in the
        # order a walk meets them (the parallel copy, then the serial one).
        op.operation.attributes[TAG] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), plan.index // BATCH)
        plans.append(plan)
        if plan.elementwise:
            _load_scalar_inputs(op)
        if plan.contraction and isolated is not None:
            fill = _zero_fill_before(op, previous) if plan.reads_output_once else None
            cast = _isolate_accumulator(op)
            if cast is not None:
                isolated.append(cast)
                if fill is not None and zero_inits is not None:
                    zero_inits.append((cast, fill))
        return


def build_script(module, isolated: list | None = None,
                 zero_inits: list | None = None,
                 dynamic_sizes: bool = True) -> list[str] | None:
    """Tag the ops a strategy fits and return the transform modules' texts, to apply in
    order (None: nothing to do).
    The accumulator casts of contractions (`_isolate_accumulator`) are appended to
    `isolated` (the caller removes them after the script ran); none without it.
    Those of contractions that may start from zero registers go to `zero_inits`
    too, with the fill before them (`_zero_inits`)."""
    plans: list[Plan] = []
    for op, previous in _linalg_ops_after(module):
        if dynamic_sizes or not _has_dynamic_sizes(op):
            _plan_op(op, previous, plans, isolated, zero_inits)
    if not plans:
        return None
    # BATCH plans per script, each batch's ops by one match of its tag split into a
    # handle per plan (they come in the order the plans were made: a walk, and none of
    # them nests in another, so pre- and post-order agree); the finishing patterns
    # last, on the whole module. Linear in the plans: a match per plan walks the whole
    # module, and the interpreter checks every live handle when one is consumed (both
    # quadratic: 19 s of CPU for the ~5000 plans of a DenseNet-121 training step).
    scripts = []
    for first in range(0, len(plans), BATCH):
        batch = plans[first:first + BATCH]
        handles = ", ".join(f"%op{plan.index}" for plan in batch)
        types = ", ".join(["!transform.any_op"] * len(batch))
        scripts.append(_sequence(
            f"    %all = transform.structured.match attributes{{{TAG} = {first // BATCH} : i64}}"
            f" in %root : (!transform.any_op) -> !transform.any_op\n"
            f"    {handles} = transform.split_handle %all : (!transform.any_op) -> ({types})\n"
            + "".join(plan.script for plan in batch)))
    scripts.append(_sequence(_FINISH.replace("{transpose_lowering}",
                                             isa.host().transpose_lowering)))
    return scripts


def _sequence(body: str) -> str:
    return ("module attributes {transform.with_named_sequence} {\n"
            "  transform.named_sequence @__transform_main("
            "%root: !transform.any_op {transform.readonly}) {\n"
            + body + "    transform.yield\n  }\n}\n")


def _strip_tags(module) -> None:
    for op in _linalg_ops(module):
        for name in (TAG, dynamic.PARALLEL_CHOICE):
            if name in op.operation.attributes:
                del op.operation.attributes[name]


def apply(module, dynamic_sizes: bool = True) -> None:
    """Schedule `module` in place (call inside its context). `dynamic_sizes=False`:
    ops with `?` sizes keep their scalar loops (the retry after a failure)."""
    from mlir import ir
    from mlir.dialects.transform import interpreter

    isolated: list = []
    zero_inits: list = []
    context = module.context
    permissive = context.allow_unregistered_dialects
    context.allow_unregistered_dialects = True  # the accumulator casts, while they live
    try:
        scripts = build_script(module, isolated, zero_inits, dynamic_sizes)
        if scripts is None:
            return
        for script in scripts:
            transform_module = ir.Module.parse(script)
            entry = transform_module.body.operations[0]
            try:
                interpreter.apply_named_sequence(module.operation, entry, transform_module)
            except Exception as error:  # the caller retries (from the text) without it
                raise ScheduleFailure(f"cpu schedule failed: {error}") from None
        _zero_inits(zero_inits)
        _restore(isolated)
    finally:
        context.allow_unregistered_dialects = permissive
    _strip_tags(module)


class ScheduleFailure(PipelineFailure):
    """The transform script failed on this module; the scalar loops still work."""
