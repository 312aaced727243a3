// RUN: lazymlir-opt %s --stage=loops -split-input-file | FileCheck %s

// The CPU schedule (lowering/cpu_schedule.py) on shapes big enough for its
// full tiles. Input: `bufferized` stage output.

// lazymlir-stage: bufferized
module {
  func.func @mm$tiled(%arg0: memref<128x512xf32>, %arg1: memref<512x512xf32>, %arg2: memref<128x512xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    linalg.fill ins(%cst : f32) outs(%arg2 : memref<128x512xf32>)
    linalg.matmul ins(%arg0, %arg1 : memref<128x512xf32>, memref<512x512xf32>) outs(%arg2 : memref<128x512xf32>)
    return
  }
}
// Cache tiles of 64 x 256 x 256 (M x N x K) around 8 x 32 register tiles
// over 4 steps of K; the 8 x 32 accumulator stays in registers across K.
// Large enough for threads (cpu_parallel): the 64-row blocks are async tasks
// running an outlined body.
// CHECK-LABEL: func.func @mm$tiled
// CHECK: async.runtime.num_worker_threads
// CHECK: call @async_dispatch_fn
// CHECK: async.runtime.await
// CHECK: return
// CHECK-LABEL: func.func private @parallel_compute_fn
// CHECK-SAME: %[[C:[a-z0-9]*]]: memref<128x512xf32>, %[[A:[a-z0-9]*]]: memref<128x512xf32>, %[[B:[a-z0-9]*]]: memref<512x512xf32>) {
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG: %[[C256:.*]] = arith.constant 256 : index
// CHECK: scf.for
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C256]] {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C256]] {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C8]] {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C32]] {
// CHECK: %[[ACC:.*]] = vector.transfer_read %[[C]]{{.*}} : memref<128x512xf32>, vector<8x32xf32>
// CHECK: %[[RES:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C4]] iter_args(%{{.*}} = %[[ACC]]) -> (vector<8x32xf32>) {
// CHECK: vector.transfer_read %[[A]]{{.*}} : memref<128x512xf32>, vector<8x4xf32>
// CHECK: vector.transfer_read %[[B]]{{.*}} : memref<512x512xf32>, vector<4x32xf32>
// CHECK-NOT: vector.transfer_write
// CHECK-COUNT-32: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: scf.yield
// CHECK: vector.transfer_write %[[RES]], %[[C]]
// CHECK: return

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$small(%arg0: memref<64x64xf32>, %arg1: memref<64x64xf32>, %arg2: memref<64x64xf32>) {
    linalg.matmul ins(%arg0, %arg1 : memref<64x64xf32>, memref<64x64xf32>) outs(%arg2 : memref<64x64xf32>)
    return
  }
}
// Too small to pay for a dispatch to another thread: the same tiles, in order.
// CHECK-LABEL: func.func @mm$small
// CHECK-SAME: (%[[A:.*]]: memref<64x64xf32>, %[[B:.*]]: memref<64x64xf32>, %[[C:.*]]: memref<64x64xf32>) {
// CHECK-NOT: async
// CHECK: scf.for
// CHECK: %[[ACC:.*]] = vector.transfer_read %[[C]]{{.*}} : memref<64x64xf32>, vector<8x32xf32>
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[ACC]]) -> (vector<8x32xf32>) {
// CHECK-COUNT-32: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: vector.transfer_write
// CHECK-NOT: async
// CHECK: return

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$transposed_keeps_loops(%arg0: memref<64x64xf32>, %arg1: memref<64x64xf32>, %arg2: memref<64x64xf32>) {
    linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d2, d0)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%arg0, %arg1 : memref<64x64xf32>, memref<64x64xf32>) outs(%arg2 : memref<64x64xf32>)
    return
  }
}
// Variants the schedule has no strategy for stay scalar loops (LLVM vectorizes what it can).
// CHECK-LABEL: func.func @mm$transposed_keeps_loops
// CHECK-NOT: vector.
// CHECK: memref.load
// CHECK: return

// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @max$rows(%arg0: memref<32x1024xf32>, %arg1: memref<32xf32>) {
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<32x1024xf32>) outs(%arg1 : memref<32xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.maximumf %in, %out : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// Innermost reductions: 256 elements per step (a tree of independent ops in
// the backend), one update of the row's accumulator each.
// CHECK-LABEL: func.func @max$rows
// CHECK-DAG: %[[C256:.*]] = arith.constant 256 : index
// CHECK: scf.for
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C256]] {
// CHECK: vector.load %{{.*}} : memref<1x256xf32, strided<[1024, 1], offset: ?>>, vector<256xf32>
// CHECK: vector.reduction <maximumf>, %{{.*}}, %{{.*}} : vector<256xf32> into f32
// CHECK: return
