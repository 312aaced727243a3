// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s

// f16 matmul (f32 accumulator, as torch-mlir lowers eager's half mm): the tensor-core
// kernel of gpu/kernels/mma.py. 37x29 fits one 128x128 tile: one block of 256 threads (8 warps).
// Workgroup memory: A tile [128][32+8] and B tile [32][128+8] f16 (rows padded by 16
// bytes), a per-warp 16x16 f32 staging tile; all 32-byte aligned (WMMA). The k loop
// (step 32) carries the warp's 8 accumulator fragments; each k step stages A and B
// (zero outside the matrix), barrier, 2 sub-steps of 2 A + 4 B fragment loads and 8
// m16n16k16 computes, barrier. The epilogue stores each fragment to the warp's staging
// tile, barrier, guarded stores to C, barrier. The zero fill is folded (no memset).
func.func @mm$f16(%arg0: memref<37x53xf16>, %arg1: memref<53x29xf16>, %arg2: memref<37x29xf16>) {
  %cst = arith.constant 0.000000e+00 : f32
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<37x29xf32>
  linalg.fill ins(%cst : f32) outs(%alloc : memref<37x29xf32>)
  linalg.matmul ins(%arg0, %arg1 : memref<37x53xf16>, memref<53x29xf16>) outs(%alloc : memref<37x29xf32>)
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%alloc : memref<37x29xf32>) outs(%arg2 : memref<37x29xf16>) {
  ^bb0(%in: f32, %out: f16):
    %0 = arith.truncf %in : f32 to f16
    linalg.yield %0 : f16
  }
  return
}
// CHECK-LABEL: func.func @mm$f16
// CHECK-NOT: gpu.memset
// CHECK: gpu.launch_func @[[MOD:.*]]::@{{.*}} blocks in (%c1, %c1, %c1) threads in (%c256, %c1, %c1) args(%{{.*}} : memref<37x53xf16>, %{{.*}} : memref<53x29xf16>, %{{.*}} : memref<37x29xf32>)
// CHECK: gpu.module @[[MOD]]
// CHECK: gpu.func @{{.*}}(%[[A:.*]]: memref<37x53xf16>, %[[B:.*]]: memref<53x29xf16>, %[[C:.*]]: memref<37x29xf32>)
// CHECK-SAME: workgroup(%[[AS:.*]] : memref<128x40xf16, #gpu.address_space<workgroup>> {llvm.align = 32 : i64}, %[[BS:.*]] : memref<32x136xf16, #gpu.address_space<workgroup>> {llvm.align = 32 : i64}, %[[CS:.*]] : memref<8x16x16xf32, #gpu.address_space<workgroup>> {llvm.align = 32 : i64})
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-NOT: math.fma
// CHECK: %[[ZERO:.*]] = gpu.subgroup_mma_constant_matrix %{{.*}} : !gpu.mma_matrix<16x16xf32, "COp">
// CHECK: scf.for %{{.*}} = %c0 to %c53 step %c32 iter_args(%{{.*}} = %[[ZERO]], {{.*}}) -> (!gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">)
// CHECK: memref.load %[[A]]
// CHECK: scf.yield %cst : f16
// CHECK: memref.store %{{.*}}, %[[AS]]
// CHECK: memref.load %[[B]]
// CHECK: memref.store %{{.*}}, %[[BS]]
// CHECK: gpu.barrier
// CHECK-NEXT: gpu.subgroup_mma_load_matrix %[[AS]][%{{.*}}, %c0] {leadDimension = 40 : index} {{.*}} -> !gpu.mma_matrix<16x16xf16, "AOp">
// CHECK-NEXT: gpu.subgroup_mma_load_matrix %[[AS]]
// CHECK-COUNT-4: gpu.subgroup_mma_load_matrix %[[BS]][%c0, %{{.*}}] {leadDimension = 136 : index} {{.*}} -> !gpu.mma_matrix<16x16xf16, "BOp">
// CHECK-COUNT-8: gpu.subgroup_mma_compute {{.*}} : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
// CHECK-COUNT-2: gpu.subgroup_mma_load_matrix %[[AS]][%{{.*}}, %c16]
// CHECK-COUNT-4: gpu.subgroup_mma_load_matrix %[[BS]][%c16, %{{.*}}]
// CHECK-COUNT-8: gpu.subgroup_mma_compute
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: scf.yield
// CHECK: gpu.subgroup_mma_store_matrix %{{.*}}#0, %[[CS]][%[[WARP:.*]], %c0, %c0] {leadDimension = 16 : index}
// CHECK-NEXT: gpu.barrier
// CHECK: scf.if
// CHECK: memref.load %[[CS]][%[[WARP]],
// CHECK: memref.store %{{.*}}, %[[C]]
// CHECK: gpu.barrier
// CHECK-NEXT: gpu.subgroup_mma_store_matrix %{{.*}}#1, %[[CS]]
// CHECK-COUNT-6: gpu.subgroup_mma_store_matrix
// CHECK-NOT: gpu.subgroup_mma_store_matrix
// CHECK: gpu.return

// -----

// bf16 batch matmul: MLIR's !gpu.mma_matrix has no bf16, so the tiles are widened to
// f32 when staged (exact) and multiplied as tf32, m16n16k8: 4 sub-steps of 8 computes
// per k step of 32. Grid: batch 2 x one tile.
func.func @bmm$bf16(%arg0: memref<2x20x70xbf16>, %arg1: memref<2x70x33xbf16>, %arg2: memref<2x20x33xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg2 : memref<2x20x33xf32>)
  linalg.batch_matmul ins(%arg0, %arg1 : memref<2x20x70xbf16>, memref<2x70x33xbf16>) outs(%arg2 : memref<2x20x33xf32>)
  return
}
// CHECK-LABEL: func.func @bmm$bf16
// CHECK: gpu.launch_func @{{.*}} blocks in (%c2, %c1, %c1) threads in (%c256, %c1, %c1)
// CHECK: workgroup(%[[AS:.*]] : memref<128x36xf32, #gpu.address_space<workgroup>> {llvm.align = 32 : i64}, %[[BS:.*]] : memref<32x132xf32, #gpu.address_space<workgroup>> {llvm.align = 32 : i64}, %{{.*}} : memref<8x16x16xf32, #gpu.address_space<workgroup>> {llvm.align = 32 : i64})
// CHECK: scf.for %{{.*}} = %c0 to %c70 step %c32 iter_args
// CHECK: memref.load %{{.*}} : memref<2x20x70xbf16>
// CHECK-NEXT: arith.extf %{{.*}} : bf16 to f32
// CHECK: memref.store %{{.*}}, %[[AS]]
// CHECK: gpu.barrier
// CHECK-COUNT-2: -> !gpu.mma_matrix<16x8xf32, "AOp">
// CHECK-COUNT-4: -> !gpu.mma_matrix<8x16xf32, "BOp">
// CHECK-COUNT-32: gpu.subgroup_mma_compute {{.*}} : !gpu.mma_matrix<16x8xf32, "AOp">, !gpu.mma_matrix<8x16xf32, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
// CHECK-NEXT: gpu.barrier

// -----

// Fewer than 16 rows: no tensor-core kernel (one thread per output element).
func.func @mm$f16_small(%arg0: memref<8x40xf16>, %arg1: memref<40x64xf16>, %arg2: memref<8x64xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg2 : memref<8x64xf32>)
  linalg.matmul ins(%arg0, %arg1 : memref<8x40xf16>, memref<40x64xf16>) outs(%arg2 : memref<8x64xf32>)
  return
}
// CHECK-LABEL: func.func @mm$f16_small
// CHECK-NOT: subgroup_mma
// CHECK-NOT: workgroup(
// CHECK: gpu.return
