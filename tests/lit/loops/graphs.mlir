// RUN: lazymlir-opt %s --stage=loops -split-input-file | FileCheck %s

// Input: `bufferized` stage output (marker line kept: each case resumes from a dump).
// lazymlir-stage: bufferized
module {
  func.func @view$transpose(%arg0: memref<4x8xf32>, %arg1: memref<8x4xf32>) {
    linalg.transpose ins(%arg0 : memref<4x8xf32>) outs(%arg1 : memref<8x4xf32>) permutation = [1, 0] 
    return
  }
}
// CHECK-LABEL: func.func @view$transpose
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<8x4xf32>) {
// CHECK: scf.for %[[ARG2:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: %[[V:.*]] = memref.load %[[ARG0]][%{{.*}}, %[[ARG2]]] : memref<4x8xf32>
// CHECK: memref.store %[[V]], %[[ARG1]][%[[ARG2]], %{{.*}}] : memref<8x4xf32>
// CHECK: return

// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
#map2 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @mlp$multi(%arg0: memref<4x8xf32>, %arg1: memref<8x16xf32>, %arg2: memref<16xf32>, %arg3: memref<4xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x16xf32>
    linalg.fill ins(%cst : f32) outs(%alloc : memref<4x16xf32>)
    linalg.matmul ins(%arg0, %arg1 : memref<4x8xf32>, memref<8x16xf32>) outs(%alloc : memref<4x16xf32>)
    linalg.fill ins(%cst : f32) outs(%arg3 : memref<4xf32>)
    linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "reduction"]} ins(%alloc, %arg2 : memref<4x16xf32>, memref<16xf32>) outs(%arg3 : memref<4xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %0 = arith.addf %in, %in_0 : f32
      %1 = arith.cmpf ugt, %0, %cst : f32
      %2 = arith.select %1, %0, %cst : f32
      %3 = arith.addf %2, %out : f32
      linalg.yield %3 : f32
    }
    return
  }
}
// CHECK-LABEL: func.func @mlp$multi
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<8x16xf32>, %[[ARG2:.*]]: memref<16xf32>, %[[ARG3:.*]]: memref<4xf32>) {
// CHECK: %[[ALLOC:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4x16xf32>
// The matmul: a vectorized K loop of FMAs on 16-wide rows, from zero registers (no
// fill of the temporary).
// CHECK-NOT: memref.store %{{.*}}, %[[ALLOC]]
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: vector.transfer_read %[[ARG0]]{{.*}} : memref<4x8xf32>, vector<4x4xf32>
// CHECK: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: vector.transfer_write %{{.*}}, %[[ALLOC]]
// The fused bias + relu + row sum: 16 lanes per step, one horizontal add per row chunk.
// CHECK: vector.load %[[ARG2]]
// CHECK: scf.for
// CHECK: %[[X:.*]] = arith.addf %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: arith.cmpf ugt, %[[X]], %{{.*}} : vector<16xf32>
// CHECK: vector.reduction <add>, %{{.*}}, %{{.*}} : vector<16xf32> into f32
// CHECK: memref.dealloc %[[ALLOC]]
// CHECK: return
