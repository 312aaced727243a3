// RUN: lazymlir-opt %s --stage=loops -split-input-file | FileCheck %s

// Input: `bufferized` stage output (marker line kept: each case resumes from a dump).
// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @relu$basic(%arg0: memref<4x8xf32>, %arg1: memref<4x8xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<4x8xf32>) outs(%arg1 : memref<4x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.cmpf ugt, %in, %cst : f32
      %1 = arith.select %0, %in, %cst : f32
      linalg.yield %1 : f32
    }
    return
  }
}
// CHECK-LABEL: func.func @relu$basic
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<4x8xf32>) {
// CHECK: scf.for %[[ARG2:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: %[[V:.*]] = memref.load %[[ARG0]][%[[ARG2]], %{{.*}}] : memref<4x8xf32>
// CHECK: %[[V_2:.*]] = arith.cmpf ugt, %[[V]], %{{.*}} : f32
// CHECK: %[[V_3:.*]] = arith.select %[[V_2]], %[[V]], %{{.*}} : f32
// CHECK: memref.store %[[V_3]], %[[ARG1]][%[[ARG2]], %{{.*}}] : memref<4x8xf32>
// CHECK: return

// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @add$broadcast(%arg0: memref<4x8xf32>, %arg1: memref<8xf32>, %arg2: memref<4x8xf32>) {
    linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : memref<4x8xf32>, memref<8xf32>) outs(%arg2 : memref<4x8xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %0 = arith.addf %in, %in_0 : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// CHECK-LABEL: func.func @add$broadcast
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<8xf32>, %[[ARG2:.*]]: memref<4x8xf32>) {
// CHECK: scf.for %[[ARG3:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: %[[V:.*]] = memref.load %[[ARG0]][%[[ARG3]], %{{.*}}] : memref<4x8xf32>
// CHECK: %[[V_2:.*]] = arith.addf %[[V]], %{{.*}} : f32
// CHECK: memref.store %[[V_2]], %[[ARG2]][%[[ARG3]], %{{.*}}] : memref<4x8xf32>
// CHECK: return

// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @sum$dim(%arg0: memref<4x8xf32>, %arg1: memref<4xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    linalg.fill ins(%cst : f32) outs(%arg1 : memref<4xf32>)
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<4x8xf32>) outs(%arg1 : memref<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.addf %in, %out : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// CHECK-LABEL: func.func @sum$dim
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<4xf32>) {
// CHECK: scf.for %[[ARG2:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: memref.store %{{.*}}, %[[ARG1]][%[[ARG2]]] : memref<4xf32>
// The row sum is vectorized (lowering/cpu/schedule_vector.py): one 8-wide load and one
// horizontal add per row.
// CHECK: scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: %[[IN:.*]] = memref.subview %[[ARG0]][%[[ROW]], 0] [1, 8] [1, 1]
// CHECK: %[[V:.*]] = vector.load %[[IN]][%{{.*}}, %{{.*}}] : memref<1x8xf32, strided<[8, 1], offset: ?>>, vector<8xf32>
// CHECK: vector.reduction <add>, %[[V]], %{{.*}} : vector<8xf32> into f32
// CHECK: return

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$basic(%arg0: memref<4x8xf32>, %arg1: memref<8x16xf32>, %arg2: memref<4x16xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    linalg.fill ins(%cst : f32) outs(%arg2 : memref<4x16xf32>)
    linalg.matmul ins(%arg0, %arg1 : memref<4x8xf32>, memref<8x16xf32>) outs(%arg2 : memref<4x16xf32>)
    return
  }
}
// CHECK-LABEL: func.func @mm$basic
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<8x16xf32>, %[[ARG2:.*]]: memref<4x16xf32>) {
// Tiled and vectorized (lowering/cpu/schedule_contraction.py): the accumulator tile starts as zero
// registers (the fill of 0 is gone, and the output is never read:
// lowering/cpu/schedule_accumulator.py), is carried through the K loop in registers and
// written once.
// CHECK: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : vector<4x16xf32>
// CHECK-NOT: memref.store
// CHECK-NOT: vector.transfer_read %[[ARG2]]
// CHECK: %[[RES:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %[[ZERO]]) -> (vector<4x16xf32>) {
// CHECK: vector.transfer_read %[[ARG0]]{{.*}} : memref<4x8xf32>, vector<4x4xf32>
// CHECK: vector.transfer_read %[[ARG1]]{{.*}} : memref<8x16xf32>, vector<4x16xf32>
// CHECK-NOT: memref.store
// CHECK: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK-NOT: vector.transfer_write
// CHECK: scf.yield
// CHECK: vector.transfer_write %[[RES]], %[[ARG2]]
// CHECK: return

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$one_init(%arg0: memref<4x8xf32>, %arg1: memref<8x16xf32>, %arg2: memref<4x16xf32>) {
    %cst = arith.constant 1.000000e+00 : f32
    linalg.fill ins(%cst : f32) outs(%arg2 : memref<4x16xf32>)
    linalg.matmul ins(%arg0, %arg1 : memref<4x8xf32>, memref<8x16xf32>) outs(%arg2 : memref<4x16xf32>)
    return
  }
}
// Another initial value: the fill stays, and the accumulator tile is read from it.
// CHECK-LABEL: func.func @mm$one_init
// CHECK-SAME: %[[ARG2:[a-z0-9]+]]: memref<4x16xf32>) {
// CHECK: memref.store %{{.*}}, %[[ARG2]]
// CHECK: %[[ACC:.*]] = vector.transfer_read %[[ARG2]]
// CHECK: scf.for %{{.*}} iter_args(%{{.*}} = %[[ACC]])

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$split_k(%arg0: memref<4x512xf32>, %arg1: memref<512x16xf32>, %arg2: memref<4x16xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    linalg.fill ins(%cst : f32) outs(%arg2 : memref<4x16xf32>)
    linalg.matmul ins(%arg0, %arg1 : memref<4x512xf32>, memref<512x16xf32>) outs(%arg2 : memref<4x16xf32>)
    return
  }
}
// K split into cache tiles (2 x 256): the zero fill stays and seeds the accumulator.
// CHECK-LABEL: func.func @mm$split_k
// CHECK-SAME: %[[ARG2:[a-z0-9]+]]: memref<4x16xf32>) {
// CHECK: memref.store %{{.*}}, %[[ARG2]]
// CHECK: %[[ACC:.*]] = vector.transfer_read %[[ARG2]]
// CHECK: scf.for %{{.*}} iter_args(%{{.*}} = %[[ACC]])
