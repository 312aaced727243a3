"""CPU schedule strategies for contractions: `linalg.matmul` and `linalg.batch_matmul`.

f32, with the named ops' default indexing maps or A read transposed (K x M: a
transpose folded into the contraction on tensors, transposed_operands.py); with
static shapes a cache
tile (at most 64 x 256 x 256 of M x N x K) around a register tile of 8 x 32 (AVX-512;
6 x 16 or 4 x 16 on AVX2) of M x N over 4 steps of K, all dividing the shape (no
partial tiles, so no masks). The register tile becomes one `vector.contract`, then
per K step one broadcast FMA per row on `vector<32xf32>` (AVX2: `vector<16xf32>`)
rows. The accumulator is read before the K loop and written after it
(`hoist_redundant_vector_transfers` after folding the subviews into the transfers,
in the driver's finishing patterns; schedule_accumulator.py keeps the hoisting
possible): it lives in registers, never reloaded or stored per step. Large ones run
their (M, N) cache tiles on all cores, split into at least MIN_PARALLEL_BLOCKS blocks.

With `?` extents (a graph compiled once for every size) the same tiles, with the
ISA's preferred register tile on a dynamic dim, whose tile loops are peeled, and
a run-time test of the work where whether it runs on all cores depends on the sizes
(lowering/cpu/dynamic.py).
"""

from __future__ import annotations

import math

from . import dynamic, isa
from .schedule_plan import Plan, cache_tile, is_f32, largest_divisor, static_shape

# Register tiles depend on the host's vector registers: isa.py (8 x 32
# accumulators on AVX-512, 6 x 16 or 4 x 16 on AVX2).
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

DEFAULT_MAPS = {
    "linalg.matmul": ["affine_map<(d0, d1, d2) -> (d0, d2)>",
                      "affine_map<(d0, d1, d2) -> (d2, d1)>",
                      "affine_map<(d0, d1, d2) -> (d0, d1)>"],
    "linalg.batch_matmul": ["affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>",
                            "affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>",
                            "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>"],
}
# The map of an A operand read transposed (K x M: `X.t() @ B`, folded by
# transposed_operands.py). The vectorized A^T tile is the K x M slab the
# outer-product lowering broadcasts from anyway: no shuffles, the plain kernel's
# instructions. (B read transposed has no strategy: its tile must be transposed in
# registers per step of K; transposed_operands.py swaps such matmuls instead.)
# The contractions this schedule tiles and vectorizes (contractions.py keeps them named
# ops through elementwise fusion; transposed_operands.py rewrites their operands).
CONTRACTIONS = tuple(DEFAULT_MAPS)

TRANSPOSED_A = {
    "linalg.matmul": "affine_map<(d0, d1, d2) -> (d2, d0)>",
    "linalg.batch_matmul": "affine_map<(d0, d1, d2, d3) -> (d0, d3, d1)>",
}


def a_transposed(name: str, maps: list[str]) -> bool | None:
    """Whether a contraction with these indexing maps reads A transposed; None for
    any other variant (B transposed, broadcast, a transposed result)."""
    default = DEFAULT_MAPS[name]
    if len(maps) != 3 or maps[1:] != default[1:]:
        return None
    return {default[0]: False, TRANSPOSED_A[name]: True}.get(maps[0])


def problem(a: list[int], b: list[int], a_t: bool) -> tuple[int, int, int]:
    """(M, N, K) of a contraction from its operands' shapes."""
    m, k = (a[-1], a[-2]) if a_t else (a[-2], a[-1])
    return m, b[-1], k


def register_tiles(m: int, n: int, k: int) -> tuple[int, int, int] | None:
    """The register tile (M x N x K) of a static contraction on this host; None where
    M or N has no tile (tiny or odd shapes: the scalar loops are as good)."""
    vectors = isa.host()
    rm = largest_divisor(m, vectors.reg_m)
    rn = largest_divisor(n, vectors.reg_n)
    rk = largest_divisor(k, vectors.reg_k)
    return None if rm == 1 or rn == 1 else (rm, rn, rk)


def contraction_plan(op, index: int) -> Plan | None:
    """Tile + vectorize a matmul or batch_matmul on f32 buffers, plain or with A read
    transposed (TRANSPOSED_A)."""
    name = op.operation.name
    if name not in ("linalg.matmul", "linalg.batch_matmul"):
        return None
    maps = [str(m) for m in op.operation.attributes["indexing_maps"]] \
        if "indexing_maps" in op.operation.attributes else DEFAULT_MAPS[name]
    a_t = a_transposed(name, maps)
    if a_t is None:
        return None  # other variants keep the scalar loops
    operands = list(op.operation.operands)
    if len(operands) != 3 or not all(is_f32(v.type) for v in operands):
        return None
    shapes = [static_shape(v.type) for v in operands]
    if any(s is None for s in shapes):
        if a_t:
            return None  # (transposed_operands.py folds only static shapes)
        return _dynamic_contraction_plan(op, index, name)
    a, b = shapes[0], shapes[1]
    m, n, k = problem(a, b, a_t)
    tiles = register_tiles(m, n, k)
    if tiles is None:
        return None
    rm, rn, rk = tiles
    cm, cn, ck = cache_tile(m, rm, CACHE_M), cache_tile(n, rn, CACHE_N), \
        cache_tile(k, rk, CACHE_K)
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
    extents = dynamic.loop_extents(op, rank, DEFAULT_MAPS[name])
    if extents is None:
        return None
    sizes = [extent for extent, _ in extents]
    m, n, k = sizes[-3:]
    vectors = isa.host()
    rm = largest_divisor(m, vectors.reg_m) if m else vectors.reg_m[0]
    rn = largest_divisor(n, vectors.reg_n) if n else vectors.reg_n[0]
    rk = largest_divisor(k, vectors.reg_k) if k else vectors.reg_k[0]
    if rm == 1 or rn == 1:
        return None
    cm = cache_tile(m, rm, CACHE_M) if m else CACHE_M // rm * rm
    cn = cache_tile(n, rn, CACHE_N) if n else CACHE_N // rn * rn
    ck = cache_tile(k, rk, CACHE_K) if k else CACHE_K // rk * rk
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
    row_n = largest_divisor(n_tile, (rn * DYNAMIC_ROW_TILE, rn * 2, rn)) if n else rn
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
