// RUN: lazymlir-opt %s --stage=linalg -split-input-file | FileCheck %s

// TMTensor ops (torch-mlir's own dialect, unknown to upstream MLIR) are lowered to scf
// loops over buffers inside torch-mlir's build (lowering/front/tmtensor.py); the rest stays
// linalg on tensors. The loops' result buffer is handed back as a `restrict` tensor.

// lazymlir-stage: torch-backend
module {
  func.func @index_put$accumulate(%arg0: !torch.vtensor<[4,5],f32>, %arg1: !torch.vtensor<[2],si64>, %arg2: !torch.vtensor<[2,5],f32>) -> !torch.vtensor<[4,5],f32> {
    %true = torch.constant.bool true
    %0 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[2],si64>) -> !torch.list<vtensor>
    %1 = torch.aten.index_put.hacked_twin %arg0, %0, %arg2, %true : !torch.vtensor<[4,5],f32>, !torch.list<vtensor>, !torch.vtensor<[2,5],f32>, !torch.bool -> !torch.vtensor<[4,5],f32>
    return %1 : !torch.vtensor<[4,5],f32>
  }
}
// CHECK-LABEL: func.func @index_put$accumulate
// CHECK-SAME: (%[[ARG0:.*]]: tensor<4x5xf32>, %{{.*}}: tensor<2xi64>, %{{.*}}: tensor<2x5xf32>) -> tensor<4x5xf32> {
// CHECK-NOT: tm_tensor
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<4x5xf32>
// CHECK: %[[RESULT:.*]] = bufferization.to_tensor %[[OUT]] restrict : memref<4x5xf32> to tensor<4x5xf32>
// Inputs are read through read_only to_buffer placed right before their first reader.
// CHECK-NEXT: %[[INIT:.*]] = bufferization.to_buffer %[[ARG0]] read_only : tensor<4x5xf32> to memref<4x5xf32>
// CHECK-NEXT: memref.copy %[[INIT]], %[[OUT]] : memref<4x5xf32> to memref<4x5xf32>
// CHECK-NEXT: bufferization.to_buffer
// CHECK-NEXT: bufferization.to_buffer
// CHECK-NEXT: scf.for
// CHECK: %[[OLD:.*]] = memref.load %[[OUT]]
// CHECK: %[[NEW:.*]] = arith.addf %[[OLD]], %{{.*}} : f32
// CHECK: memref.store %[[NEW]], %[[OUT]]
// CHECK-NOT: tm_tensor
// CHECK: return %[[RESULT]] : tensor<4x5xf32>

// -----

// lazymlir-stage: torch-backend
module {
  func.func @cumsum$dim1(%arg0: !torch.vtensor<[4,5],f32>) -> !torch.vtensor<[4,5],f32> {
    %int1 = torch.constant.int 1
    %none = torch.constant.none
    %0 = torch.aten.cumsum %arg0, %int1, %none : !torch.vtensor<[4,5],f32>, !torch.int, !torch.none -> !torch.vtensor<[4,5],f32>
    return %0 : !torch.vtensor<[4,5],f32>
  }
}
// CHECK-LABEL: func.func @cumsum$dim1
// CHECK-NOT: tm_tensor.scan
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<4x5xf32>
// CHECK: %[[RESULT:.*]] = bufferization.to_tensor %[[OUT]] restrict
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.if
// CHECK: arith.addf
// CHECK: return %[[RESULT]] : tensor<4x5xf32>

// -----

// lazymlir-stage: torch-backend
module {
  func.func @sort$values_and_indices(%arg0: !torch.vtensor<[4,5],f32>) -> (!torch.vtensor<[4,5],f32>, !torch.vtensor<[4,5],si64>) {
    %int1 = torch.constant.int 1
    %false = torch.constant.bool false
    %values, %indices = torch.aten.sort %arg0, %int1, %false : !torch.vtensor<[4,5],f32>, !torch.int, !torch.bool -> !torch.vtensor<[4,5],f32>, !torch.vtensor<[4,5],si64>
    return %values, %indices : !torch.vtensor<[4,5],f32>, !torch.vtensor<[4,5],si64>
  }
}
// CHECK-LABEL: func.func @sort$values_and_indices
// CHECK-NOT: tm_tensor.sort
// CHECK-DAG: bufferization.to_tensor %{{.*}} restrict : memref<4x5xf32> to tensor<4x5xf32>
// CHECK-DAG: bufferization.to_tensor %{{.*}} restrict : memref<4x5xi64> to tensor<4x5xi64>
// CHECK: arith.cmpf ole
// CHECK: return

// -----

// Two scatters with one (CSE-merged) index tensor: the conversion hands both loop nests one
// `to_buffer` of it. Each nest gets its own, right before it, so the index buffer the second
// nest reads is not one that ops between the nests have reused.
// lazymlir-stage: torch-backend
module {
  func.func @index_put$shared_indices(%arg0: !torch.vtensor<[2],si64>, %arg1: !torch.vtensor<[2,5],f32>, %arg2: !torch.vtensor<[2,5],f32>) -> (!torch.vtensor<[4,5],f32>, !torch.vtensor<[4,5],f32>) {
    %zeros = torch.vtensor.literal(dense<0.000000e+00> : tensor<4x5xf32>) : !torch.vtensor<[4,5],f32>
    %true = torch.constant.bool true
    %int0 = torch.constant.int 0
    %int3 = torch.constant.int 3
    %0 = torch.aten.clamp %arg0, %int0, %int3 : !torch.vtensor<[2],si64>, !torch.int, !torch.int -> !torch.vtensor<[2],si64>
    %1 = torch.prim.ListConstruct %0 : (!torch.vtensor<[2],si64>) -> !torch.list<vtensor>
    %2 = torch.aten.index_put.hacked_twin %zeros, %1, %arg1, %true : !torch.vtensor<[4,5],f32>, !torch.list<vtensor>, !torch.vtensor<[2,5],f32>, !torch.bool -> !torch.vtensor<[4,5],f32>
    %3 = torch.aten.clamp %arg0, %int0, %int3 : !torch.vtensor<[2],si64>, !torch.int, !torch.int -> !torch.vtensor<[2],si64>
    %4 = torch.prim.ListConstruct %3 : (!torch.vtensor<[2],si64>) -> !torch.list<vtensor>
    %5 = torch.aten.index_put.hacked_twin %zeros, %4, %arg2, %true : !torch.vtensor<[4,5],f32>, !torch.list<vtensor>, !torch.vtensor<[2,5],f32>, !torch.bool -> !torch.vtensor<[4,5],f32>
    return %2, %5 : !torch.vtensor<[4,5],f32>, !torch.vtensor<[4,5],f32>
  }
}
// CHECK-LABEL: func.func @index_put$shared_indices
// CHECK: %[[IDX:.*]] = tensor.expand_shape %{{.*}} output_shape [2, 1] : tensor<2xi64> into tensor<2x1xi64>
// CHECK: %[[FIRST:.*]] = bufferization.to_buffer %[[IDX]] read_only
// CHECK-NEXT: bufferization.to_buffer
// CHECK-NEXT: scf.for
// CHECK: memref.load %[[FIRST]]
// CHECK: memref.copy
// CHECK-NEXT: %[[SECOND:.*]] = bufferization.to_buffer %[[IDX]] read_only
// CHECK-NEXT: bufferization.to_buffer
// CHECK-NEXT: scf.for
// CHECK: memref.load %[[SECOND]]
// CHECK: return
