// RUN: lazymlir-opt %s --stage=linalg -split-input-file | FileCheck %s

// Input: `torch-backend` stage output (marker line kept: each case resumes from a dump).
// lazymlir-stage: torch-backend
module {
  func.func @view$transpose(%arg0: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[8,4],f32> {
    %int0 = torch.constant.int 0
    %int1 = torch.constant.int 1
    %0 = torch.aten.transpose.int %arg0, %int0, %int1 : !torch.vtensor<[4,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[8,4],f32>
    return %0 : !torch.vtensor<[8,4],f32>
  }
}
// CHECK-LABEL: func.func @view$transpose
// CHECK-SAME: (%[[ARG0:.*]]: tensor<4x8xf32>) -> tensor<8x4xf32> {
// CHECK: %[[TRANSPOSED:.*]] = linalg.transpose ins(%[[ARG0]] : tensor<4x8xf32>) outs(%[[V:.*]] : tensor<8x4xf32>) permutation = [1, 0]
// CHECK: return %[[TRANSPOSED]] : tensor<8x4xf32>

// -----

// lazymlir-stage: torch-backend
module {
  func.func @mlp$multi(%arg0: !torch.vtensor<[4,8],f32>, %arg1: !torch.vtensor<[8,16],f32>, %arg2: !torch.vtensor<[16],f32>) -> !torch.vtensor<[4],f32> {
    %none = torch.constant.none
    %false = torch.constant.bool false
    %int1 = torch.constant.int 1
    %0 = torch.aten.mm %arg0, %arg1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
    %1 = torch.aten.add.Tensor %0, %arg2, %int1 : !torch.vtensor<[4,16],f32>, !torch.vtensor<[16],f32>, !torch.int -> !torch.vtensor<[4,16],f32>
    %2 = torch.aten.relu %1 : !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32>
    %3 = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
    %4 = torch.aten.sum.dim_IntList %2, %3, %false, %none : !torch.vtensor<[4,16],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[4],f32>
    return %4 : !torch.vtensor<[4],f32>
  }
}
// CHECK-LABEL: func.func @mlp$multi
// CHECK-SAME: (%[[ARG0:.*]]: tensor<4x8xf32>, %[[ARG1:.*]]: tensor<8x16xf32>, %[[ARG2:.*]]: tensor<16xf32>) -> tensor<4xf32> {
// CHECK: %[[V:.*]] = linalg.fill ins(%[[CST:.*]] : f32) outs(%[[V_2:.*]] : tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK: %[[V_3:.*]] = arith.addf %{{.*}}, %{{.*}} : f32
// CHECK: %[[V_3]] = arith.cmpf ugt, %{{.*}}, %[[CST]] : f32
// CHECK: %[[V_4:.*]] = arith.select %[[V_3]], %{{.*}}, %[[CST]] : f32
// CHECK: return %{{.*}} : tensor<4xf32>
