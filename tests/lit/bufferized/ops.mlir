// RUN: lazymlir-opt %s --stage=bufferized -split-input-file | FileCheck %s

// Input: `linalg` stage output (marker line kept: each case resumes from a dump).
// lazymlir-stage: linalg
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @relu$basic(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4x8xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<4x8xf32>) outs(%0 : tensor<4x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %2 = arith.cmpf ugt, %in, %cst : f32
      %3 = arith.select %2, %in, %cst : f32
      linalg.yield %3 : f32
    } -> tensor<4x8xf32>
    return %1 : tensor<4x8xf32>
  }
}
// CHECK-LABEL: func.func @relu$basic
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<4x8xf32>) attributes {lazymlir.results = {{[0-9]+}} : i64} {
// CHECK: linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%[[ARG0]] : memref<4x8xf32>) outs(%[[ARG1]] : memref<4x8xf32>) {
// CHECK: return

// -----

// lazymlir-stage: linalg
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @add$broadcast(%arg0: tensor<4x8xf32>, %arg1: tensor<8xf32>) -> tensor<4x8xf32> {
    %0 = tensor.empty() : tensor<4x8xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<8xf32>) outs(%0 : tensor<4x8xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %2 = arith.addf %in, %in_0 : f32
      linalg.yield %2 : f32
    } -> tensor<4x8xf32>
    return %1 : tensor<4x8xf32>
  }
}
// CHECK-LABEL: func.func @add$broadcast
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<8xf32>, %[[ARG2:.*]]: memref<4x8xf32>) attributes {lazymlir.results = {{[0-9]+}} : i64} {
// CHECK: linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%[[ARG0]], %[[ARG1]] : memref<4x8xf32>, memref<8xf32>) outs(%[[ARG2]] : memref<4x8xf32>) {
// CHECK: return

// -----

// lazymlir-stage: linalg
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @sum$dim(%arg0: tensor<4x8xf32>) -> tensor<4xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4xf32>) -> tensor<4xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf32>) outs(%1 : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = arith.addf %in, %out : f32
      linalg.yield %3 : f32
    } -> tensor<4xf32>
    return %2 : tensor<4xf32>
  }
}
// CHECK-LABEL: func.func @sum$dim
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<4xf32>) attributes {lazymlir.results = {{[0-9]+}} : i64} {
// CHECK: linalg.fill ins(%[[CST:.*]] : f32) outs(%[[ARG1]] : memref<4xf32>)
// CHECK: return

// -----

// lazymlir-stage: linalg
module {
  func.func @mm$basic(%arg0: tensor<4x8xf32>, %arg1: tensor<8x16xf32>) -> tensor<4x16xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4x16xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4x16xf32>) -> tensor<4x16xf32>
    %2 = linalg.matmul ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<8x16xf32>) outs(%1 : tensor<4x16xf32>) -> tensor<4x16xf32>
    return %2 : tensor<4x16xf32>
  }
}
// CHECK-LABEL: func.func @mm$basic
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<8x16xf32>, %[[ARG2:.*]]: memref<4x16xf32>) attributes {lazymlir.results = {{[0-9]+}} : i64} {
// CHECK: linalg.fill ins(%[[CST:.*]] : f32) outs(%[[ARG2]] : memref<4x16xf32>)
// CHECK: return

// -----

// lazymlir-stage: linalg
module {
  func.func @mm$shared_fill(%arg0: tensor<64x32xf32>, %arg1: tensor<32x16xf32>, %arg2: tensor<32x16xf32>) -> (tensor<64x16xf32>, tensor<64x16xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<64x16xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<64x16xf32>) -> tensor<64x16xf32>
    %2 = linalg.matmul ins(%arg0, %arg1 : tensor<64x32xf32>, tensor<32x16xf32>) outs(%1 : tensor<64x16xf32>) -> tensor<64x16xf32>
    %3 = linalg.matmul ins(%arg0, %arg2 : tensor<64x32xf32>, tensor<32x16xf32>) outs(%1 : tensor<64x16xf32>) -> tensor<64x16xf32>
    return %2, %3 : tensor<64x16xf32>, tensor<64x16xf32>
  }
}
// One zero fill shared by two matmuls (CSE): each matmul gets a fill of its own
// buffer (lowering/bufferize/buffer_copies.py), not a copy of the other's filled buffer.
// CHECK-LABEL: func.func @mm$shared_fill
// CHECK-SAME: (%[[A:.*]]: memref<64x32xf32>, %[[B:.*]]: memref<32x16xf32>, %[[C:.*]]: memref<32x16xf32>, %[[OUT0:.*]]: memref<64x16xf32>, %[[OUT1:.*]]: memref<64x16xf32>) attributes {lazymlir.results = {{[0-9]+}} : i64} {
// CHECK-NOT: memref.copy
// CHECK-DAG: linalg.fill ins(%{{.*}} : f32) outs(%[[OUT0]] : memref<64x16xf32>)
// CHECK-DAG: linalg.fill ins(%{{.*}} : f32) outs(%[[OUT1]] : memref<64x16xf32>)
// CHECK: linalg.matmul ins(%[[A]], %[[B]] : {{.*}}) outs(%[[OUT0]] : memref<64x16xf32>)
// CHECK: linalg.matmul ins(%[[A]], %[[C]] : {{.*}}) outs(%[[OUT1]] : memref<64x16xf32>)
// CHECK-NOT: memref.copy
// CHECK: return
