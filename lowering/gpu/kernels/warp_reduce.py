"""Block-wide reductions with warp shuffles, for the row kernels (row_reduce.py and
row_fusion.py).

Each thread holds one partial value (its register accumulator). `block_allreduce`
combines the T partials of a block (T a power of two, 32 <= T <= 1024) so that every
thread ends with the block's total:

    for s = 16, 8, 4, 2, 1: v = comb(v, shfl.xor(v, s))     (the warp's total, all lanes)
    T == 32: done (no shared memory, no barrier)
    lane == 0: smem[warp] = v; barrier                        (W = T/32 partials)
    v = smem[lane % W]
    for s = W/2 .. 1: v = comb(v, shfl.xor(v, s))            (every warp, all lanes)

One barrier instead of log2(T) + 1 of a shared-memory tree, and W words of shared memory
instead of T. Every warp reduces the W partials (not only the first one): it costs no
more time than one warp doing it, thread 0 and every lane of a fused kernel get the total
without a second barrier and broadcast, and the shuffles stay at the top level of the
kernel, outside any `scf.if` - which the emulator driver (gpu/emulator_warps.py) needs: it runs
a shuffle as a phase boundary of its thread loops, like a barrier.

A xor butterfly gives every lane the same bits when `comb` is commutative (IEEE add,
mul, max, min are), so all threads agree on the total. The combination order differs
from the shared-memory tree (lanes s apart inside a warp first, then warps): floating
sums round differently, within the usual tolerance; integer sums and max/min (NaN
propagation included) are exact. Accumulation types are unchanged.

`gpu.shuffle` moves 32 bits. Other types are moved as bits, which is exact: narrower
ints and 16-bit floats are zero-extended to i32 and truncated back, 64-bit values are
split into two 32-bit shuffles and reassembled.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, gpu, memref, scf

from ..ir import cidx

WARP = 32


def _i(width: int) -> ir.Type:
    return ir.IntegerType.get_signless(width)


def _bits(t: ir.Type) -> int | None:
    """Bit width of a scalar int/float type that can be shuffled, else None."""
    if isinstance(t, ir.IntegerType):
        width = ir.IntegerType(t).width
    elif isinstance(t, (ir.F16Type, ir.BF16Type)):
        width = 16
    elif isinstance(t, ir.F32Type):
        width = 32
    elif isinstance(t, ir.F64Type):
        width = 64
    else:
        return None
    return width if width <= 64 else None


def shuffleable(t: ir.Type) -> bool:
    return _bits(t) is not None


def shuffle_xor(value: ir.Value, offset: int) -> ir.Value:
    """`value` of lane (lane ^ offset) of the warp (width 32), any shuffleable type."""
    t = value.type
    bits = _bits(t)
    if bits is None:
        raise ValueError(f"warp shuffle of {t}: callers check shuffleable() first")
    i32 = _i(32)
    off = arith.ConstantOp(i32, offset).result
    width = arith.ConstantOp(i32, WARP).result

    def shfl(v):
        return gpu.ShuffleOp(v, off, width, gpu.ShuffleMode.XOR).results[0]

    if isinstance(t, (ir.F32Type, ir.IntegerType)) and bits == 32:
        return shfl(value)
    as_int = value if isinstance(t, ir.IntegerType) else arith.BitcastOp(_i(bits), value).result
    if bits < 32:
        moved = arith.TruncIOp(_i(bits), shfl(arith.ExtUIOp(i32, as_int).result)).result
    else:  # 64 bits: two halves
        c32 = arith.ConstantOp(_i(64), 32).result
        lo = shfl(arith.TruncIOp(i32, as_int).result)
        hi = shfl(arith.TruncIOp(i32, arith.ShRUIOp(as_int, c32).result).result)
        moved = arith.OrIOp(arith.ShLIOp(arith.ExtUIOp(_i(64), hi).result, c32).result,
                            arith.ExtUIOp(_i(64), lo).result).result
    return moved if isinstance(t, ir.IntegerType) else arith.BitcastOp(t, moved).result


def warp_allreduce(value: ir.Value, combine, lanes: int = WARP) -> ir.Value:
    """Butterfly over groups of `lanes` (a power of two <= 32) consecutive lanes: every
    lane ends with the combination of its group's values."""
    step = lanes // 2
    while step >= 1:
        value = combine(value, shuffle_xor(value, step))
        step //= 2
    return value


def block_allreduce(value: ir.Value, combine, tid: ir.Value, threads: int,
                    smem: ir.Value | None) -> ir.Value:
    """The block's total in every thread (see the module docstring). `tid`: the thread's
    linear id; `smem`: a workgroup buffer of `partials_needed(threads)` elements (None
    when that is 0)."""
    if threads < WARP or threads & (threads - 1) or threads > WARP * WARP:
        raise ValueError(f"block reduction over {threads} threads: a power of two "
                               f"between {WARP} and {WARP * WARP} is needed")
    value = warp_allreduce(value, combine)
    warps = threads // WARP
    if warps == 1:
        return value
    lane = arith.RemUIOp(tid, cidx(WARP)).result
    first = arith.CmpIOp(arith.CmpIPredicate.eq, lane, cidx(0)).result
    branch = scf.IfOp(first)
    with ir.InsertionPoint(branch.then_block):
        memref.StoreOp(value, smem, [arith.DivUIOp(tid, cidx(WARP)).result])
        scf.YieldOp([])
    gpu.BarrierOp()
    # Lanes >= W read a copy (lane % W): no identity value needed, and each group of W
    # lanes reduces the same W partials.
    partial = memref.LoadOp(smem, [arith.RemUIOp(lane, cidx(warps)).result]).result
    return warp_allreduce(partial, combine, warps)


def partials_needed(threads: int) -> int:
    """Shared-memory elements `block_allreduce` needs for a block of `threads`."""
    return threads // WARP if threads > WARP else 0
