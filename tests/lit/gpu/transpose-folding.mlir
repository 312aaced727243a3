// RUN: lazymlir-opt %s --target=cuda --from=linalg --to=gpu -split-input-file | FileCheck %s

// Transposes folded into their consumers (lowering/gpu/transpose_folding.py, cuda target,
// before bufferization). `x @ w.t()`: torch-mlir's separate linalg.transpose of w is not
// materialised; the tiled matmul kernel reads w through the composed map. One launch,
// no temporary, no copy.
func.func @linear$wt(%arg0: tensor<64x24xf32>, %arg1: tensor<40x24xf32>) -> tensor<64x40xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<24x40xf32>
  %t = linalg.transpose ins(%arg1 : tensor<40x24xf32>) outs(%0 : tensor<24x40xf32>) permutation = [1, 0]
  %1 = tensor.empty() : tensor<64x40xf32>
  %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<64x40xf32>) -> tensor<64x40xf32>
  %3 = linalg.matmul ins(%arg0, %t : tensor<64x24xf32>, tensor<24x40xf32>) outs(%2 : tensor<64x40xf32>) -> tensor<64x40xf32>
  return %3 : tensor<64x40xf32>
}
// CHECK-LABEL: func.func @linear$wt
// CHECK-SAME: (%[[X:.*]]: memref<64x24xf32>, %[[W:.*]]: memref<40x24xf32>, %[[OUT:.*]]: memref<64x40xf32>)
// CHECK-NOT: memref.alloc
// CHECK-NOT: gpu.launch_func
// CHECK: gpu.launch_func @{{.*}} args(%[[X]] : memref<64x24xf32>, %[[W]] : memref<40x24xf32>, %[[OUT]] : memref<64x40xf32>)
// CHECK-NOT: gpu.launch_func
// CHECK: return
// CHECK: gpu.module
// CHECK: memref<16x128xf32, #gpu.address_space<workgroup>>
// CHECK-COUNT-2: gpu.barrier
// CHECK-NOT: gpu.module

// -----

// `x.t() @ g` (a weight gradient): the transposed A operand folds the same way.
func.func @matmul$tn(%arg0: tensor<30x50xf32>, %arg1: tensor<30x64xf32>) -> tensor<50x64xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<50x30xf32>
  %t = linalg.transpose ins(%arg0 : tensor<30x50xf32>) outs(%0 : tensor<50x30xf32>) permutation = [1, 0]
  %1 = tensor.empty() : tensor<50x64xf32>
  %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<50x64xf32>) -> tensor<50x64xf32>
  %3 = linalg.matmul ins(%t, %arg1 : tensor<50x30xf32>, tensor<30x64xf32>) outs(%2 : tensor<50x64xf32>) -> tensor<50x64xf32>
  return %3 : tensor<50x64xf32>
}
// CHECK-LABEL: func.func @matmul$tn
// CHECK-SAME: (%[[X:.*]]: memref<30x50xf32>, %[[G:.*]]: memref<30x64xf32>, %[[OUT:.*]]: memref<50x64xf32>)
// CHECK-NOT: gpu.launch_func
// CHECK: gpu.launch_func @{{.*}} args(%[[X]] : memref<30x50xf32>, %[[G]] : memref<30x64xf32>, %[[OUT]] : memref<50x64xf32>)
// CHECK-NOT: gpu.launch_func
// CHECK: return

// -----

// A transpose that is also a result stays a copy (its own kernel), the matmul reads it.
func.func @transpose$returned(%arg0: tensor<64x24xf32>, %arg1: tensor<40x24xf32>) -> (tensor<64x40xf32>, tensor<24x40xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<24x40xf32>
  %t = linalg.transpose ins(%arg1 : tensor<40x24xf32>) outs(%0 : tensor<24x40xf32>) permutation = [1, 0]
  %1 = tensor.empty() : tensor<64x40xf32>
  %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<64x40xf32>) -> tensor<64x40xf32>
  %3 = linalg.matmul ins(%arg0, %t : tensor<64x24xf32>, tensor<24x40xf32>) outs(%2 : tensor<64x40xf32>) -> tensor<64x40xf32>
  return %3, %t : tensor<64x40xf32>, tensor<24x40xf32>
}
// CHECK-LABEL: func.func @transpose$returned
// CHECK-SAME: (%[[X:.*]]: memref<64x24xf32>, %[[W:.*]]: memref<40x24xf32>, %[[OUT:.*]]: memref<64x40xf32>, %[[T:.*]]: memref<24x40xf32>)
// CHECK: gpu.launch_func @{{.*}} args(%[[W]] : memref<40x24xf32>, %[[T]] : memref<24x40xf32>)
// CHECK: gpu.launch_func @{{.*}} args(%[[X]] : memref<64x24xf32>, %[[T]] : memref<24x40xf32>, %[[OUT]] : memref<64x40xf32>)
// CHECK: return

// -----

// A transpose read by an elementwise op (`x.t() + y`): the add reads x transposed.
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @transpose$add(%arg0: tensor<11x7xf32>, %arg1: tensor<7x11xf32>) -> tensor<7x11xf32> {
  %0 = tensor.empty() : tensor<7x11xf32>
  %t = linalg.transpose ins(%arg0 : tensor<11x7xf32>) outs(%0 : tensor<7x11xf32>) permutation = [1, 0]
  %1 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%t, %arg1 : tensor<7x11xf32>, tensor<7x11xf32>) outs(%0 : tensor<7x11xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %2 = arith.addf %in, %in_0 : f32
    linalg.yield %2 : f32
  } -> tensor<7x11xf32>
  return %1 : tensor<7x11xf32>
}
// CHECK-LABEL: func.func @transpose$add
// CHECK-SAME: (%[[X:.*]]: memref<11x7xf32>, %[[Y:.*]]: memref<7x11xf32>, %[[OUT:.*]]: memref<7x11xf32>)
// CHECK-NOT: gpu.launch_func
// CHECK: gpu.launch_func @{{.*}} args(%[[X]] : memref<11x7xf32>, %[[Y]] : memref<7x11xf32>, %[[OUT]] : memref<7x11xf32>)
// CHECK-NOT: gpu.launch_func
// CHECK: return
