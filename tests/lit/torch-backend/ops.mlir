// RUN: lazymlir-opt %s --stage=torch-backend -split-input-file | FileCheck %s

// Input: `torch` stage output (marker line kept: each case resumes from a dump).
// lazymlir-stage: torch
module {
  func.func @relu$basic(%arg0: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[4,8],f32> {
    %0 = torch.aten.relu %arg0 : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
    return %0 : !torch.vtensor<[4,8],f32>
  }
}
// CHECK-LABEL: func.func @relu$basic
// CHECK-SAME: (%[[ARG0:.*]]: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[4,8],f32> {
// CHECK: %[[V:.*]] = torch.aten.relu %[[ARG0]] : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[4,8],f32>
// CHECK: return %[[V]] : !torch.vtensor<[4,8],f32>

// -----

// lazymlir-stage: torch
module {
  func.func @add$broadcast(%arg0: !torch.vtensor<[4,8],f32>, %arg1: !torch.vtensor<[8],f32>) -> !torch.vtensor<[4,8],f32> {
    %int1 = torch.constant.int 1
    %0 = torch.aten.add.Tensor %arg0, %arg1, %int1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
    return %0 : !torch.vtensor<[4,8],f32>
  }
}
// CHECK-LABEL: func.func @add$broadcast
// CHECK-SAME: (%[[ARG0:.*]]: !torch.vtensor<[4,8],f32>, %[[ARG1:.*]]: !torch.vtensor<[8],f32>) -> !torch.vtensor<[4,8],f32> {
// CHECK: %[[V:.*]] = torch.aten.add.Tensor %[[ARG0]], %[[ARG1]], %{{.*}} : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8],f32>, !torch.int -> !torch.vtensor<[4,8],f32>
// CHECK: return %[[V]] : !torch.vtensor<[4,8],f32>

// -----

// lazymlir-stage: torch
module {
  func.func @sum$dim(%arg0: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[4],f32> {
    %int1 = torch.constant.int 1
    %0 = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
    %false = torch.constant.bool false
    %none = torch.constant.none
    %1 = torch.aten.sum.dim_IntList %arg0, %0, %false, %none : !torch.vtensor<[4,8],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[4],f32>
    return %1 : !torch.vtensor<[4],f32>
  }
}
// CHECK-LABEL: func.func @sum$dim
// CHECK-SAME: (%[[ARG0:.*]]: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[4],f32> {
// CHECK: %[[V:.*]] = torch.prim.ListConstruct %{{.*}} : (!torch.int) -> !torch.list<int>
// CHECK: %[[V_2:.*]] = torch.aten.sum.dim_IntList %[[ARG0]], %[[V]], %{{.*}}, %{{.*}} : !torch.vtensor<[4,8],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[4],f32>
// CHECK: return %[[V_2]] : !torch.vtensor<[4],f32>

// -----

// lazymlir-stage: torch
module {
  func.func @mm$basic(%arg0: !torch.vtensor<[4,8],f32>, %arg1: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[4,16],f32> {
    %0 = torch.aten.mm %arg0, %arg1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
    return %0 : !torch.vtensor<[4,16],f32>
  }
}
// CHECK-LABEL: func.func @mm$basic
// CHECK-SAME: (%[[ARG0:.*]]: !torch.vtensor<[4,8],f32>, %[[ARG1:.*]]: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[4,16],f32> {
// CHECK: %[[V:.*]] = torch.aten.mm %[[ARG0]], %[[ARG1]] : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
// CHECK: return %[[V]] : !torch.vtensor<[4,16],f32>
