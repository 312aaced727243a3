// RUN: lazymlir-opt %s --stage=linalg -split-input-file | FileCheck %s

// Input: `torch-backend` stage output (marker line kept: each case resumes from a dump).
// lazymlir-stage: torch-backend
module {
  func.func @relu$basic(%arg0: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[4,8],f32> {
    %0 = torch.aten.relu %arg0 : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
    return %0 : !torch.vtensor<[4,8],f32>
  }
}
// CHECK-LABEL: func.func @relu$basic
// CHECK-SAME: (%[[ARG0:.*]]: tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK: %[[V:.*]] = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%[[ARG0]] : tensor<4x8xf32>) outs(%[[V_2:.*]] : tensor<4x8xf32>) {
// CHECK: %[[V_3:.*]] = arith.cmpf ugt, %{{.*}}, %{{.*}} : f32
// CHECK: %[[V_4:.*]] = arith.select %[[V_3]], %{{.*}}, %{{.*}} : f32
// CHECK: return %[[V]] : tensor<4x8xf32>

// -----

// lazymlir-stage: torch-backend
module {
  func.func @add$broadcast(%arg0: !torch.vtensor<[4,8],f32>, %arg1: !torch.vtensor<[8],f32>) -> !torch.vtensor<[4,8],f32> {
    %int1 = torch.constant.int 1
    %0 = torch.aten.add.Tensor %arg0, %arg1, %int1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
    return %0 : !torch.vtensor<[4,8],f32>
  }
}
// CHECK-LABEL: func.func @add$broadcast
// CHECK-SAME: (%[[ARG0:.*]]: tensor<4x8xf32>, %[[ARG1:.*]]: tensor<8xf32>) -> tensor<4x8xf32> {
// CHECK: %[[V:.*]] = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%[[ARG0]], %[[ARG1]] : tensor<4x8xf32>, tensor<8xf32>) outs(%[[V_2:.*]] : tensor<4x8xf32>) {
// CHECK: %[[V_3:.*]] = arith.addf %{{.*}}, %{{.*}} : f32
// CHECK: return %[[V]] : tensor<4x8xf32>

// -----

// lazymlir-stage: torch-backend
module {
  func.func @sum$dim(%arg0: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[4],f32> {
    %none = torch.constant.none
    %false = torch.constant.bool false
    %int1 = torch.constant.int 1
    %0 = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
    %1 = torch.aten.sum.dim_IntList %arg0, %0, %false, %none : !torch.vtensor<[4,8],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[4],f32>
    return %1 : !torch.vtensor<[4],f32>
  }
}
// CHECK-LABEL: func.func @sum$dim
// CHECK-SAME: (%[[ARG0:.*]]: tensor<4x8xf32>) -> tensor<4xf32> {
// CHECK: %[[V:.*]] = linalg.fill ins(%[[CST:.*]] : f32) outs(%[[V_2:.*]] : tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[V_3:.*]] = arith.addf %{{.*}}, %{{.*}} : f32
// CHECK: return %{{.*}} : tensor<4xf32>

// -----

// lazymlir-stage: torch-backend
module {
  func.func @mm$basic(%arg0: !torch.vtensor<[4,8],f32>, %arg1: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[4,16],f32> {
    %0 = torch.aten.mm %arg0, %arg1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
    return %0 : !torch.vtensor<[4,16],f32>
  }
}
// CHECK-LABEL: func.func @mm$basic
// CHECK-SAME: (%[[ARG0:.*]]: tensor<4x8xf32>, %[[ARG1:.*]]: tensor<8x16xf32>) -> tensor<4x16xf32> {
// CHECK: %[[V:.*]] = linalg.fill ins(%[[CST:.*]] : f32) outs(%[[V_2:.*]] : tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK: return %{{.*}} : tensor<4x16xf32>
