// RUN: lazymlir-opt %s --stage=torch-backend -split-input-file | FileCheck %s

// Input: `torch` stage output (marker line kept: each case resumes from a dump).
// lazymlir-stage: torch
module {
  func.func @view$transpose(%arg0: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[8,4],f32> {
    %0 = torch.aten.t %arg0 : !torch.vtensor<[4,8],f32> -> !torch.vtensor<[8,4],f32>
    %none = torch.constant.none
    %1 = torch.aten.clone %0, %none : !torch.vtensor<[8,4],f32>, !torch.none -> !torch.vtensor<[8,4],f32>
    return %1 : !torch.vtensor<[8,4],f32>
  }
}
// CHECK-LABEL: func.func @view$transpose
// CHECK-SAME: (%[[ARG0:.*]]: !torch.vtensor<[4,8],f32>) -> !torch.vtensor<[8,4],f32> {
// CHECK: %[[V:.*]] = torch.aten.transpose.int %[[ARG0]], %{{.*}}, %{{.*}} : !torch.vtensor<[4,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[8,4],f32>
// CHECK: return %[[V]] : !torch.vtensor<[8,4],f32>

// -----

// lazymlir-stage: torch
module {
  func.func @mlp$multi(%arg0: !torch.vtensor<[4,8],f32>, %arg1: !torch.vtensor<[8,16],f32>, %arg2: !torch.vtensor<[16],f32>) -> !torch.vtensor<[4],f32> {
    %0 = torch.aten.mm %arg0, %arg1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
    %int1 = torch.constant.int 1
    %1 = torch.aten.add.Tensor %0, %arg2, %int1 : !torch.vtensor<[4,16],f32>, !torch.vtensor<[16],f32>, !torch.int -> !torch.vtensor<[4,16],f32>
    %2 = torch.aten.relu %1 : !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32>
    %int1_0 = torch.constant.int 1
    %3 = torch.prim.ListConstruct %int1_0 : (!torch.int) -> !torch.list<int>
    %false = torch.constant.bool false
    %none = torch.constant.none
    %4 = torch.aten.sum.dim_IntList %2, %3, %false, %none : !torch.vtensor<[4,16],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[4],f32>
    return %4 : !torch.vtensor<[4],f32>
  }
}
// CHECK-LABEL: func.func @mlp$multi
// CHECK-SAME: (%[[ARG0:.*]]: !torch.vtensor<[4,8],f32>, %[[ARG1:.*]]: !torch.vtensor<[8,16],f32>, %[[ARG2:.*]]: !torch.vtensor<[16],f32>) -> !torch.vtensor<[4],f32> {
// CHECK: %[[V:.*]] = torch.aten.mm %[[ARG0]], %[[ARG1]] : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
// CHECK: %[[V_2:.*]] = torch.prim.ListConstruct %{{.*}} : (!torch.int) -> !torch.list<int>
// CHECK: return %{{.*}} : !torch.vtensor<[4],f32>
