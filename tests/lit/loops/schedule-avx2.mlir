// RUN: env LAZYMLIR_CPU_VECTOR_ISA=avx2 lazymlir-opt %s --stage=loops -split-input-file | FileCheck %s

// The CPU schedule's tiles for AVX2 hosts (16 ymm registers of 8 floats;
// lowering/cpu/isa.py). Input: `bufferized` stage output.

// lazymlir-stage: bufferized
module {
  func.func @transpose$avx2(%arg0: memref<512x256xf32>, %arg1: memref<256x512xf32>) {
    linalg.transpose ins(%arg0 : memref<512x256xf32>) outs(%arg1 : memref<256x512xf32>) permutation = [1, 0]
    return
  }
}
// 8 x 8 tiles (8 registers; a 16 x 16 tile is 32 and spilled), transposed by
// MLIR's AVX2 shuffle sequence, the result's rows split into 16 blocks for the
// threads.
// CHECK-LABEL: func.func @transpose$avx2
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK: omp.loop_nest
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C8]] {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C8]] {
// CHECK: vector.transfer_read {{.*}} : memref<8x8xf32, strided<[256, 1], offset: ?>>, vector<8x8xf32>
// CHECK: vector.shuffle {{.*}} : vector<8xf32>, vector<8xf32>
// CHECK: llvm.inline_asm asm_dialect = intel "vblendps
// CHECK-NOT: vector<16x16xf32>
// CHECK: vector.transfer_write {{.*}} : vector<8x8xf32>, memref<8x8xf32, strided<[512, 1], offset: ?>>

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$avx2(%arg0: memref<64x256xf32>, %arg1: memref<256x512xf32>, %arg2: memref<64x512xf32>) {
    linalg.matmul ins(%arg0, %arg1 : memref<64x256xf32>, memref<256x512xf32>) outs(%arg2 : memref<64x512xf32>)
    return
  }
}
// A 4 x 16 register tile (6 does not divide 64): 8 ymm accumulators, two FMAs
// of 8 lanes per row and K step.
// CHECK-LABEL: func.func @mm$avx2
// CHECK: omp.loop_nest
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<4x16xf32>) {
// CHECK-COUNT-16: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: scf.yield
