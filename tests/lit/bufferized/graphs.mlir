// RUN: lazymlir-opt %s --stage=bufferized -split-input-file | FileCheck %s

// Input: `linalg` stage output (marker line kept: each case resumes from a dump).
// lazymlir-stage: linalg
module {
  func.func @view$transpose(%arg0: tensor<4x8xf32>) -> tensor<8x4xf32> {
    %0 = tensor.empty() : tensor<8x4xf32>
    %transposed = linalg.transpose ins(%arg0 : tensor<4x8xf32>) outs(%0 : tensor<8x4xf32>) permutation = [1, 0] 
    return %transposed : tensor<8x4xf32>
  }
}
// CHECK-LABEL: func.func @view$transpose
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<8x4xf32>) attributes {lazymlir.results = {{[0-9]+}} : i64} {
// CHECK: linalg.transpose ins(%[[ARG0]] : memref<4x8xf32>) outs(%[[ARG1]] : memref<8x4xf32>) permutation = [1, 0]
// CHECK: return

// -----

// lazymlir-stage: linalg
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
#map2 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @mlp$multi(%arg0: tensor<4x8xf32>, %arg1: tensor<8x16xf32>, %arg2: tensor<16xf32>) -> tensor<4xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4x16xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4x16xf32>) -> tensor<4x16xf32>
    %2 = linalg.matmul ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<8x16xf32>) outs(%1 : tensor<4x16xf32>) -> tensor<4x16xf32>
    %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%2, %arg2 : tensor<4x16xf32>, tensor<16xf32>) outs(%0 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %8 = arith.addf %in, %in_0 : f32
      linalg.yield %8 : f32
    } -> tensor<4x16xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%3 : tensor<4x16xf32>) outs(%0 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %8 = arith.cmpf ugt, %in, %cst : f32
      %9 = arith.select %8, %in, %cst : f32
      linalg.yield %9 : f32
    } -> tensor<4x16xf32>
    %5 = tensor.empty() : tensor<4xf32>
    %6 = linalg.fill ins(%cst : f32) outs(%5 : tensor<4xf32>) -> tensor<4xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%4 : tensor<4x16xf32>) outs(%6 : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %8 = arith.addf %in, %out : f32
      linalg.yield %8 : f32
    } -> tensor<4xf32>
    return %7 : tensor<4xf32>
  }
}
// CHECK-LABEL: func.func @mlp$multi
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x8xf32>, %[[ARG1:.*]]: memref<8x16xf32>, %[[ARG2:.*]]: memref<16xf32>, %[[ARG3:.*]]: memref<4xf32>) attributes {lazymlir.results = {{[0-9]+}} : i64} {
// CHECK: %[[ALLOC:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4x16xf32>
// CHECK: linalg.fill ins(%[[CST:.*]] : f32) outs(%[[ALLOC]] : memref<4x16xf32>)
// CHECK: return
