"""Half/bfloat16 matmul / batch matmul on tensor cores: warp-level WMMA through shared memory.

torch-mlir lowers an f16/bf16 `mm`/`bmm`/`linear` to a contraction with f16/bf16
inputs and an f32 output (`extf`, `extf`, `mulf`, `addf`: eager's f32 accumulation),
followed by an elementwise `truncf` to the input dtype (eager's one rounding of the
output). This module rewrites that contraction (any two of i/j/k indexing A and B, as
in matmul.py) into a `gpu.launch` using MLIR's warp-collective
`gpu.subgroup_mma_*` ops, which `convert-gpu-to-nvvm` lowers to `nvvm.wmma.*`
(PTX `wmma.load` / `wmma.mma.sync` / `wmma.store`):

    grid  = batch x ceil(M / 128) x ceil(N / 128) blocks of 256 threads (8 warps, 4 x 2),
    workgroup memory: As[128][32 + pad], Bs[32][128 + pad], Cs[8 warps][16][16] f32.

    acc[2][4] = 0 (16x16 f32 fragments: a warp computes a 32x64 piece of the tile)
    for k0 in 0..K step 32:                        (scf.for, fragments as iter_args)
        all threads stage the A and B tiles into As/Bs (zero outside the matrix);  barrier
        for ks in 0..32 step FK: a[2], b[4] = fragment loads from As/Bs,
                                 acc[i][j] = mma(a[i], b[j], acc[i][j])
        barrier
    for each of the 8 fragments: the warp stores it to Cs[warp];  barrier
        each lane writes 8 of its elements to C (init + acc, guarded at the edges); barrier

Element types. float16: WMMA m16n16k16 on f16 fragments (FK = 16). bfloat16: MLIR's
`!gpu.mma_matrix` rejects bf16 ("elements must be SI8, UI8, I32, F16, F32, or F64")
and NVVM has no bf16 `wmma` op, so bf16 tiles are widened to f32 when staged (exact)
and multiplied by WMMA m16n16k8 with tf32 operands (FK = 8): every bf16 value is a
tf32 value (8 exponent bits, 7 <= 10 mantissa bits), so the products are the bf16
products and the accumulation is f32, as in a bf16 mma; the cost is half the bf16
tensor-core rate (tf32 runs at half of it on H100) and twice the shared memory. The
alternative, `nvvm.mma.sync` m16n8k16 bf16, takes per-lane register fragments in
PTX's lane layout, which would need a hand-written fragment layout here and cross-lane
exchange in the emulator; WMMA fragments are opaque and warp-uniform, which the
emulator can run (gpu/emulator_warps.py: one lane per warp executes each fragment op).

Shared-memory rows are padded by 16 bytes (bank conflicts of the fragment loads);
every fragment starts 32-byte aligned (WMMA's requirement: row offsets are multiples
of 16 rows of 80/272 (f16) or 144/528 (f32) bytes, columns multiples of 16 elements).
Edge tiles: out-of-range elements of A/B are staged as zero, and the output goes
through the per-warp staging tile Cs and a guarded store, so M, N, K need not be
multiples of anything. The output's initial value is the constant fill right before
(folded) or read once at the end, as in matmul.py.
"""

from __future__ import annotations

import functools
import math

from mlir import ir
from mlir.dialects import arith, gpu, memref, scf

from .matmul import (accumulate_in_bounds, contraction_maps, rewrite_contractions, stage_tile,
                     tile_grid, tile_origin)
from ..ir import cidx, fill_before, launch_before
from ...mlir_runner import walk

BM = BN = 128
BK = 32
WARPS_M, WARPS_N = 4, 2  # 8 warps; a warp computes FRAGS_M x FRAGS_N 16x16 fragments
FRAGS_M = BM // WARPS_M // 16  # 2
FRAGS_N = BN // WARPS_N // 16  # 4
THREADS = 32 * WARPS_M * WARPS_N
MIN_MN = 16
PAD_BYTES = 16


def _is_half(t) -> str | None:
    if isinstance(t, ir.F16Type):
        return "f16"
    if isinstance(t, ir.BF16Type):
        return "bf16"
    return None


def _match(op):
    """(indexing maps, input dtype name) if `op` is an f16/bf16 x f16/bf16 -> f32
    contraction (batch.., i, j parallel, k reduction), else None."""
    maps = contraction_maps(op)
    if maps is None:
        return None
    ta, tb = (ir.MemRefType(v.type).element_type for v in op.inputs)
    kind = _is_half(ta)
    if kind is None or _is_half(tb) != kind:
        return None
    if not isinstance(ir.MemRefType(op.outputs[0].type).element_type, ir.F32Type):
        return None
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if [o.name for o in ops] != ["arith.extf", "arith.extf", "arith.mulf", "arith.addf",
                                 "linalg.yield"]:
        return None
    a_arg, b_arg, c_arg = block.arguments
    ext = {ops[0].operands[0]: ops[0].results[0], ops[1].operands[0]: ops[1].results[0]}
    if set(ext) != {a_arg, b_arg}:
        return None
    mul, add = ops[2], ops[3]
    if {mul.operands[0], mul.operands[1]} != {ext[a_arg], ext[b_arg]}:
        return None
    if {add.operands[0], add.operands[1]} != {mul.results[0], c_arg}:
        return None
    if ops[4].operands[0] != add.results[0]:
        return None
    return maps, kind


def _load(buffer, indices) -> ir.Value:
    return memref.LoadOp(buffer, indices).result


def _frag_type(rows, cols, elem, which):
    return ir.Type.parse(f'!gpu.mma_matrix<{rows}x{cols}x{elem}, "{which}">')


def _rewrite(op, maps, kind) -> None:
    n, batch_ext, m_ext, n_ext, k_ext, tiles_m, tiles_n = tile_grid(op, BM, BN)
    a, b = op.inputs[0], op.inputs[1]
    c = op.outputs[0]
    fill = fill_before(op)
    f32 = ir.F32Type.get()
    # f16: m16n16k16 on f16 fragments; bf16: widened to f32, m16n16k8 tf32 (see above).
    elem = ir.F16Type.get() if kind == "f16" else f32
    fk = 16 if kind == "f16" else 8
    pad = PAD_BYTES // (2 if kind == "f16" else 4)
    lda, ldb = BK + pad, BN + pad
    workgroup = ir.Attribute.parse("#gpu.address_space<workgroup>")
    a_t = ir.MemRefType.get([BM, lda], elem, memory_space=workgroup)
    b_t = ir.MemRefType.get([BK, ldb], elem, memory_space=workgroup)
    c_t = ir.MemRefType.get([WARPS_M * WARPS_N, 16, 16], f32, memory_space=workgroup)
    a_frag = _frag_type(16, fk, elem, "AOp")
    b_frag = _frag_type(fk, 16, elem, "BOp")
    c_frag = _frag_type(16, 16, "f32", "COp")
    body = launch_before(op, math.prod(batch_ext) * tiles_m * tiles_n, THREADS,
                        [a_t, b_t, c_t])
    bid, tid = body.arguments[0], body.arguments[3]
    a_s, b_s, c_s = body.arguments[12], body.arguments[13], body.arguments[14]
    with ir.InsertionPoint(body), op.location:
        bivs, row0, col0 = tile_origin(bid, tiles_m, tiles_n, batch_ext, BM, BN)
        warp = arith.DivUIOp(tid, cidx(32)).result
        lane = arith.RemUIOp(tid, cidx(32)).result
        wm = arith.DivUIOp(warp, cidx(WARPS_N)).result
        wn = arith.RemUIOp(warp, cidx(WARPS_N)).result
        # The warp's fragments start at rows wm*32 + 16*i, columns wn*64 + 16*j.
        wrow = arith.MulIOp(wm, cidx(16 * FRAGS_M)).result
        wcol = arith.MulIOp(wn, cidx(16 * FRAGS_N)).result
        frag_rows = [arith.AddIOp(wrow, cidx(16 * i)).result for i in range(FRAGS_M)]
        frag_cols = [arith.AddIOp(wcol, cidx(16 * j)).result for j in range(FRAGS_N)]
        zero = arith.ConstantOp(f32, 0.0).result
        acc0 = [gpu.SubgroupMmaConstantMatrixOp(c_frag, zero).result
                for _ in range(FRAGS_M * FRAGS_N)]
        i_dim, j_dim, k_dim = n - 3, n - 2, n - 1
        fixed = bivs + [None, None, None]
        loop = scf.ForOp(cidx(0), cidx(k_ext), cidx(BK), acc0)
        with ir.InsertionPoint(loop.body):
            k0 = loop.induction_variable
            stage_tile(a, maps[0], n, fixed, i_dim, k_dim, row0, k0, m_ext, k_ext, tid, a_s,
                       BM, BK, THREADS, False, elem)
            stage_tile(b, maps[1], n, fixed, j_dim, k_dim, col0, k0, n_ext, k_ext, tid, b_s,
                       BN, BK, THREADS, True, elem)
            gpu.BarrierOp()
            acc = list(loop.inner_iter_args)
            for ks in range(0, BK, fk):
                kc = cidx(ks)
                af = [gpu.SubgroupMmaLoadMatrixOp(a_frag, a_s, [r, kc], lda).result
                      for r in frag_rows]
                bf = [gpu.SubgroupMmaLoadMatrixOp(b_frag, b_s, [kc, q], ldb).result
                      for q in frag_cols]
                acc = [gpu.SubgroupMmaComputeOp(af[i], bf[j], acc[i * FRAGS_N + j]).result
                       for i in range(FRAGS_M) for j in range(FRAGS_N)]
            gpu.BarrierOp()
            scf.YieldOp(acc)
        # Epilogue: each fragment through the warp's 16x16 staging tile, then a guarded
        # store by the warp's lanes (lane l: rows 2e + l // 16, column l % 16).
        out_map = maps[2]
        c0 = cidx(0)
        half = arith.DivUIOp(lane, cidx(16)).result
        col_in = arith.RemUIOp(lane, cidx(16)).result
        for i in range(FRAGS_M):
            for j in range(FRAGS_N):
                gpu.SubgroupMmaStoreMatrixOp(loop.results[i * FRAGS_N + j], c_s,
                                             [warp, c0, c0], 16)
                gpu.BarrierOp()
                gj = arith.AddIOp(arith.AddIOp(col0, frag_cols[j]).result, col_in).result
                for e in range(8):
                    r_in = arith.AddIOp(half, cidx(2 * e)).result
                    gi = arith.AddIOp(arith.AddIOp(row0, frag_rows[i]).result, r_in).result
                    staged = functools.partial(_load, c_s, [warp, r_in, col_in])
                    accumulate_in_bounds(c, out_map, bivs, gi, gj, (m_ext, n_ext), fill, staged)
                gpu.BarrierOp()
        gpu.TerminatorOp()
    op.operation.erase()
    if fill is not None:
        fill[0].erase()


def tile_mma_matmuls(module) -> int:
    """Rewrite every f16/bf16 contraction with M, N >= 16 into the tensor-core kernel."""
    return rewrite_contractions(module, _match, lambda op, found: _rewrite(op, *found),
                                MIN_MN)


def align_fragment_memory(module) -> None:
    """WMMA loads and stores need 32-byte aligned addresses; workgroup buffers are only
    aligned to their element size unless the gpu.func says otherwise (`llvm.align` in
    `workgroup_attrib_attrs`, honoured by convert-gpu-to-nvvm). Run after outlining."""
    for kernel in [op.opview for op in walk(module) if op.name == "gpu.func"]:
        if "workgroup_attributions" not in kernel.attributes:
            continue
        if not any(o.name.startswith("gpu.subgroup_mma_") for o in walk(kernel)):
            continue
        count = ir.IntegerAttr(kernel.attributes["workgroup_attributions"]).value
        align = ir.Attribute.parse("{llvm.align = 32 : i64}")
        kernel.attributes["workgroup_attrib_attrs"] = ir.ArrayAttr.get([align] * count)
