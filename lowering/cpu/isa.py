"""The host's vector unit, as the CPU schedule's strategies size their tiles for it.

Compiled graphs are built for the host (`llc -mcpu=native`), but the schedule's
tiles decide how many vector registers a loop keeps live, and that differs by
instruction set: a matmul register tile of 8 x 32 f32 accumulators is 16
AVX-512 registers (of 32) but 32 AVX2 registers (of 16), which spill. Measured
on an AVX2-only AMD EPYC (Zen 3), one thread, `a @ b` of 64x256 by 256x512:
8 x 32 ran 3.2x eager's time, 4 x 16 1.8x (machine load 3.3-3.9;
docs/cpu-performance.md).

Which set the host has, or `LAZYMLIR_CPU_VECTOR_ISA` (`avx512`, `avx2`) says:
lazymlir/support/host_isa.py (the lit tests pin `avx512`, so that their expected
tiles do not depend on the machine; the choice is part of the cpu target's
fingerprint, the disk cache key).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...support.host_isa import vector_isa


@dataclass(frozen=True)
class VectorIsa:
    name: str
    # Contraction register tile candidates (the largest dividing the shape wins):
    # M rows x N columns of f32 accumulators, K steps per iteration.
    reg_m: tuple[int, ...]
    reg_n: tuple[int, ...]
    reg_k: tuple[int, ...]
    # Innermost-reduction step: one vector of this many elements per step.
    reduction_tiles: tuple[int, ...]
    # f32 lanes of one vector register: a vectorized elementwise op steps a few of
    # them (schedule_vector.ELEMENTWISE_REGISTERS).
    lanes: int
    # Transpose tile edges and the vector.transpose lowering for them.
    transpose_tiles: tuple[int, ...]
    transpose_lowering: str


ISAS = {
    # 32 zmm registers of 16 f32: 8 x 32 accumulators = 16 registers, leaving room for
    # the B rows and A broadcasts; a 16 x 16 transpose is one shuffle network.
    "avx512": VectorIsa("avx512", (8, 4, 2), (32, 16, 8), (4, 2),
                        (256, 128, 64, 32, 16, 8), 16, (16, 8),
                        'lowering_strategy = "shuffle_16x16"'),
    # 16 ymm registers of 8 f32: 6 x 16 accumulators = 12 registers (BLIS's Haswell
    # kernel shape; 4 x 16 where 6 does not divide M), 2 for B, 1-2 for broadcasts.
    # Transposes are 8 x 8 tiles (8 registers) through MLIR's AVX2-specialized
    # shuffles: a 16 x 16 tile is 32 ymm registers and spilled. Zen 3, 2 threads,
    # both in parallel blocks with 32 x 32 cache tiles, `w.t() * 2` (the multiply
    # is ~15 us of it at 512 x 256), exe.run only, LAZYMLIR_FALLBACK=error: 512 x 256
    # 48 us as 16 x 16 tiles, 33 us as 8 x 8 (48 us through `shuffle_1d`); 2048 x 1024
    # 1.30 ms against 0.97 ms; 32 x 64 x 32 batched 17 us either way.
    "avx2": VectorIsa("avx2", (6, 4, 2), (16, 8), (4, 2),
                      (128, 64, 32, 16, 8), 8, (8,),
                      "avx2_lowering_strategy = true"),
}


def host() -> VectorIsa:
    """The tiles for the host's instruction set (or LAZYMLIR_CPU_VECTOR_ISA's)."""
    return ISAS[vector_isa()]
