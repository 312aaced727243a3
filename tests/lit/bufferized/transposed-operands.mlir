// RUN: lazymlir-opt %s --stage=bufferized -split-input-file | FileCheck %s

// Transposes feeding the contractions the CPU schedule tiles (lowering/cpu/
// transposed_operands.py): a transposed A is read through the matmul's indexing map,
// and `A @ W.t()` with a small A is computed as `(W @ A.t()).t()`.

// lazymlir-stage: linalg
module {
  func.func @mm$a_transposed(%arg0: tensor<64x512xf32>, %arg1: tensor<64x256xf32>) -> tensor<512x256xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<512x64xf32>
    %transposed = linalg.transpose ins(%arg0 : tensor<64x512xf32>) outs(%0 : tensor<512x64xf32>) permutation = [1, 0]
    %1 = tensor.empty() : tensor<512x256xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<512x256xf32>) -> tensor<512x256xf32>
    %3 = linalg.matmul ins(%transposed, %arg1 : tensor<512x64xf32>, tensor<64x256xf32>) outs(%2 : tensor<512x256xf32>) -> tensor<512x256xf32>
    return %3 : tensor<512x256xf32>
  }
}
// The weight gradient `h.t() @ grad`: no copy of h.
// CHECK-DAG: #[[AT:.*]] = affine_map<(d0, d1, d2) -> (d2, d0)>
// CHECK-DAG: #[[B:.*]] = affine_map<(d0, d1, d2) -> (d2, d1)>
// CHECK-DAG: #[[C:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @mm$a_transposed
// CHECK-SAME: (%[[H:.*]]: memref<64x512xf32>, %[[G:.*]]: memref<64x256xf32>, %[[OUT:.*]]: memref<512x256xf32>)
// CHECK-NOT: linalg.transpose
// CHECK: linalg.matmul indexing_maps = [#[[AT]], #[[B]], #[[C]]] ins(%[[H]], %[[G]] : memref<64x512xf32>, memref<64x256xf32>) outs(%[[OUT]] : memref<512x256xf32>)
// CHECK-NOT: linalg.transpose
// CHECK: return

// -----

// lazymlir-stage: linalg
module {
  func.func @linear$small_batch(%arg0: tensor<64x256xf32>, %arg1: tensor<512x256xf32>) -> tensor<64x512xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<256x512xf32>
    %transposed = linalg.transpose ins(%arg1 : tensor<512x256xf32>) outs(%0 : tensor<256x512xf32>) permutation = [1, 0]
    %1 = tensor.empty() : tensor<64x512xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<64x512xf32>) -> tensor<64x512xf32>
    %3 = linalg.matmul ins(%arg0, %transposed : tensor<64x256xf32>, tensor<256x512xf32>) outs(%2 : tensor<64x512xf32>) -> tensor<64x512xf32>
    return %3 : tensor<64x512xf32>
  }
}
// `x @ W.t()` on 64 rows: x (64 x 256) and the result (64 x 512) are transposed, not
// the 512 x 256 weight, which the plain matmul reads in place as its A operand.
// CHECK-LABEL: func.func @linear$small_batch
// CHECK-SAME: (%[[X:.*]]: memref<64x256xf32>, %[[W:.*]]: memref<512x256xf32>, %[[OUT:.*]]: memref<64x512xf32>)
// CHECK: linalg.transpose ins(%[[X]] : memref<64x256xf32>) outs(%[[XT:.*]] : memref<256x64xf32>) permutation = [1, 0]
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[CT:.*]] : memref<512x64xf32>)
// CHECK: linalg.matmul ins(%[[W]], %[[XT]] : memref<512x256xf32>, memref<256x64xf32>) outs(%[[CT]] : memref<512x64xf32>)
// CHECK: linalg.transpose ins(%[[CT]] : memref<512x64xf32>) outs(%[[OUT]] : memref<64x512xf32>) permutation = [1, 0]
// CHECK-NOT: linalg.
// CHECK: return

// -----

// lazymlir-stage: linalg
module {
  func.func @linear$large_batch(%arg0: tensor<512x128xf32>, %arg1: tensor<128x128xf32>) -> tensor<512x128xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<128x128xf32>
    %transposed = linalg.transpose ins(%arg1 : tensor<128x128xf32>) outs(%0 : tensor<128x128xf32>) permutation = [1, 0]
    %1 = tensor.empty() : tensor<512x128xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<512x128xf32>) -> tensor<512x128xf32>
    %3 = linalg.matmul ins(%arg0, %transposed : tensor<512x128xf32>, tensor<128x128xf32>) outs(%2 : tensor<512x128xf32>) -> tensor<512x128xf32>
    return %3 : tensor<512x128xf32>
  }
}
// 512 tokens against a 128 x 128 weight (a transformer's Linear): the weight is
// the smaller copy, made as before.
// CHECK-LABEL: func.func @linear$large_batch
// CHECK-SAME: (%[[X:.*]]: memref<512x128xf32>, %[[W:.*]]: memref<128x128xf32>, %[[OUT:.*]]: memref<512x128xf32>)
// CHECK: linalg.transpose ins(%[[W]] : memref<128x128xf32>) outs(%[[WT:.*]] : memref<128x128xf32>) permutation = [1, 0]
// CHECK: linalg.matmul ins(%[[X]], %[[WT]] : memref<512x128xf32>, memref<128x128xf32>) outs(%[[OUT]] : memref<512x128xf32>)
// CHECK: return

// -----

// lazymlir-stage: linalg
module {
  func.func @bmm$a_transposed_f64(%arg0: tensor<4x16x32xf64>, %arg1: tensor<4x16x32xf64>) -> tensor<4x32x32xf64> {
    %cst = arith.constant 0.000000e+00 : f64
    %0 = tensor.empty() : tensor<4x32x16xf64>
    %transposed = linalg.transpose ins(%arg0 : tensor<4x16x32xf64>) outs(%0 : tensor<4x32x16xf64>) permutation = [0, 2, 1]
    %1 = tensor.empty() : tensor<4x32x32xf64>
    %2 = linalg.fill ins(%cst : f64) outs(%1 : tensor<4x32x32xf64>) -> tensor<4x32x32xf64>
    %3 = linalg.batch_matmul ins(%transposed, %arg1 : tensor<4x32x16xf64>, tensor<4x16x32xf64>) outs(%2 : tensor<4x32x32xf64>) -> tensor<4x32x32xf64>
    return %3 : tensor<4x32x32xf64>
  }
}
// f64 has no tiled schedule (scalar loops, which read the copy's rows contiguously):
// the copy stays.
// CHECK-LABEL: func.func @bmm$a_transposed_f64
// CHECK: linalg.transpose
// CHECK: linalg.batch_matmul ins
// CHECK: return

// -----

// lazymlir-stage: linalg
module {
  func.func @bmm$a_transposed(%arg0: tensor<4x16x32xf32>, %arg1: tensor<4x16x32xf32>) -> tensor<4x32x32xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4x32x16xf32>
    %transposed = linalg.transpose ins(%arg0 : tensor<4x16x32xf32>) outs(%0 : tensor<4x32x16xf32>) permutation = [0, 2, 1]
    %1 = tensor.empty() : tensor<4x32x32xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<4x32x32xf32>) -> tensor<4x32x32xf32>
    %3 = linalg.batch_matmul ins(%transposed, %arg1 : tensor<4x32x16xf32>, tensor<4x16x32xf32>) outs(%2 : tensor<4x32x32xf32>) -> tensor<4x32x32xf32>
    return %3 : tensor<4x32x32xf32>
  }
}
// Attention's backward `q.mT @ grad` per head: read in place.
// CHECK-DAG: #[[AT3:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3, d1)>
// CHECK-LABEL: func.func @bmm$a_transposed
// CHECK-SAME: (%[[Q:.*]]: memref<4x16x32xf32>, %[[G:.*]]: memref<4x16x32xf32>, %{{.*}}: memref<4x32x32xf32>)
// CHECK-NOT: linalg.transpose
// CHECK: linalg.batch_matmul indexing_maps = [#[[AT3]], #{{.*}}, #{{.*}}] ins(%[[Q]], %[[G]] :
// CHECK: return
