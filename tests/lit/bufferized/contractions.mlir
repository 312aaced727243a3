// RUN: lazymlir-opt %s --stage=bufferized -split-input-file | FileCheck %s

// The cpu backend's elementwise fusion (lowering/cpu/contractions.py) keeps the
// contractions the schedule tiles as named ops: MLIR's fusion would fold the reshapes
// around a Linear on 3-D input into the matmul (a generic), then fuse the scaling that
// feeds it into every multiply-add. The elementwise ops elsewhere are still fused.

// lazymlir-stage: linalg
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module {
  func.func @linear$3d(%arg0: tensor<2x4x8xf32>, %arg1: tensor<8x16xf32>) -> tensor<2x4x16xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 2.000000e+00 : f32
    %0 = tensor.empty() : tensor<2x4x8xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<2x4x8xf32>) outs(%0 : tensor<2x4x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.mulf %in, %cst_0 : f32
      linalg.yield %9 : f32
    } -> tensor<2x4x8xf32>
    %collapsed = tensor.collapse_shape %1 [[0, 1], [2]] : tensor<2x4x8xf32> into tensor<8x8xf32>
    %2 = tensor.empty() : tensor<8x16xf32>
    %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<8x16xf32>) -> tensor<8x16xf32>
    %4 = linalg.matmul ins(%collapsed, %arg1 : tensor<8x8xf32>, tensor<8x16xf32>) outs(%3 : tensor<8x16xf32>) -> tensor<8x16xf32>
    %expanded = tensor.expand_shape %4 [[0, 1], [2]] output_shape [2, 4, 16] : tensor<8x16xf32> into tensor<2x4x16xf32>
    %5 = tensor.empty() : tensor<2x4x16xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expanded : tensor<2x4x16xf32>) outs(%5 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.addf %in, %cst_0 : f32
      linalg.yield %9 : f32
    } -> tensor<2x4x16xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6 : tensor<2x4x16xf32>) outs(%5 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.maximumf %in, %cst : f32
      linalg.yield %9 : f32
    } -> tensor<2x4x16xf32>
    return %7 : tensor<2x4x16xf32>
  }
}
// CHECK-LABEL: func.func @linear$3d
// CHECK-SAME: (%[[X:.*]]: memref<2x4x8xf32>, %[[W:.*]]: memref<8x16xf32>, %[[OUT:.*]]: memref<2x4x16xf32>) attributes {lazymlir.results = {{[0-9]+}} : i64} {
// The scaling stays a loop of its own, before the matmul.
// CHECK: linalg.generic
// CHECK: arith.mulf
// CHECK: linalg.matmul ins(%{{.*}}, %[[W]] : memref<8x8xf32>, memref<8x16xf32>)
// The add and the max after it are one loop.
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK-NEXT: arith.maximumf
// CHECK-NOT: linalg.generic
// CHECK: return
