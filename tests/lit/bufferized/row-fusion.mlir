// RUN: lazymlir-opt %s --stage=bufferized -split-input-file | FileCheck %s

// CPU row fusion (lowering/cpu/fusion.py): a graph whose every op works row by
// row becomes one scf.forall over blocks of rows with the reductions fused in;
// the result block is written in place, temporaries are one block. Input:
// `linalg` stage output (softmax of a 256x1024 tensor, as torch-mlir emits it).

// lazymlir-stage: linalg
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
module {
  func.func @softmax$rows(%arg0: tensor<256x1024xf32>) -> tensor<256x1024xf32> {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0xFF800000 : f32
    %cst_0 = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<256xi64>
    %1 = linalg.fill ins(%c0_i64 : i64) outs(%0 : tensor<256xi64>) -> tensor<256xi64>
    %2 = tensor.empty() : tensor<256xf32>
    %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<256xf32>) -> tensor<256xf32>
    %4:2 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<256x1024xf32>) outs(%3, %1 : tensor<256xf32>, tensor<256xi64>) {
    ^bb0(%in: f32, %out: f32, %out_1: i64):
      %12 = linalg.index 1 : index
      %13 = arith.index_cast %12 : index to i64
      %14 = arith.maximumf %in, %out : f32
      %15 = arith.cmpf ogt, %in, %out : f32
      %16 = arith.select %15, %13, %out_1 : i64
      linalg.yield %14, %16 : f32, i64
    } -> (tensor<256xf32>, tensor<256xi64>)
    %expanded = tensor.expand_shape %4#0 [[0, 1]] output_shape [256, 1] : tensor<256xf32> into tensor<256x1xf32>
    %5 = tensor.empty() : tensor<256x1024xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %expanded : tensor<256x1024xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x1024xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %12 = arith.subf %in, %in_1 : f32
      linalg.yield %12 : f32
    } -> tensor<256x1024xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<256x1024xf32>) outs(%5 : tensor<256x1024xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = math.exp %in : f32
      linalg.yield %12 : f32
    } -> tensor<256x1024xf32>
    %8 = tensor.empty() : tensor<256x1xf32>
    %9 = linalg.fill ins(%cst_0 : f32) outs(%8 : tensor<256x1xf32>) -> tensor<256x1xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%7 : tensor<256x1024xf32>) outs(%9 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = arith.addf %in, %out : f32
      linalg.yield %12 : f32
    } -> tensor<256x1xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%7, %10 : tensor<256x1024xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x1024xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %12 = arith.divf %in, %in_1 : f32
      linalg.yield %12 : f32
    } -> tensor<256x1024xf32>
    return %11 : tensor<256x1024xf32>
  }
}
// CHECK-LABEL: func.func @softmax$rows
// CHECK-SAME: (%[[X:.*]]: memref<256x1024xf32>, %[[OUT:.*]]: memref<256x1024xf32>)
// CHECK: scf.forall (%[[ROW:.*]]) = (0) to (256) step (8) {
// CHECK: memref.subview %[[X]][%[[ROW]], 0] [8, 1024] [1, 1]
// CHECK: memref.alloc() {{.*}} : memref<8xf32>
// CHECK: arith.maximumf
// CHECK: memref.alloc() {{.*}} : memref<8x1024xf32>
// CHECK: math.exp
// CHECK: arith.addf
// CHECK: %[[BLOCK:.*]] = memref.subview %[[OUT]][%[[ROW]], 0] [8, 1024] [1, 1]
// CHECK: linalg.generic {{.*}} outs(%[[BLOCK]] :
// CHECK: arith.divf
// CHECK-NOT: memref.copy
// CHECK-NOT: memref<256x1024xf32>
// At least 64K result elements (cpu.parallel.MIN_PARALLEL_ELEMENTS): the blocks
// run on threads (not marked to run in order).
// CHECK-NOT: lazymlir.sequential
// CHECK: return

// -----

// A column reduction feeding a row-wise op: fusing by rows would recompute the
// sum in every block, so the graph is left as it was (no forall).
// lazymlir-stage: linalg
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @center$columns(%arg0: tensor<256x1024xf32>) -> tensor<256x1024xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<1024xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<1024xf32>) -> tensor<1024xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "parallel"]} ins(%arg0 : tensor<256x1024xf32>) outs(%1 : tensor<1024xf32>) {
    ^bb0(%in: f32, %out: f32):
      %5 = arith.addf %in, %out : f32
      linalg.yield %5 : f32
    } -> tensor<1024xf32>
    %3 = tensor.empty() : tensor<256x1024xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %2 : tensor<256x1024xf32>, tensor<1024xf32>) outs(%3 : tensor<256x1024xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %5 = arith.subf %in, %in_0 : f32
      linalg.yield %5 : f32
    } -> tensor<256x1024xf32>
    return %4 : tensor<256x1024xf32>
  }
}
// CHECK-LABEL: func.func @center$columns
// CHECK-NOT: scf.forall
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction", "parallel"]
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
// CHECK: return
