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

// -----

// lazymlir-stage: torch-backend
module {
  func.func @max_dim$values_only(%arg0: !torch.vtensor<[8,64],f32>) -> !torch.vtensor<[8,1],f32> {
    %int1 = torch.constant.int 1
    %true = torch.constant.bool true
    %values, %indices = torch.aten.max.dim %arg0, %int1, %true : !torch.vtensor<[8,64],f32>, !torch.int, !torch.bool -> !torch.vtensor<[8,1],f32>, !torch.vtensor<[8,1],si64>
    return %values : !torch.vtensor<[8,1],f32>
  }
}
// The max of a decomposed amax (every softmax): the argmax half of the reduction
// is unused, so it is dropped (lowering/front/unused_results.py); no i64 index is
// computed or stored per element.
// CHECK-LABEL: func.func @max_dim$values_only
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%{{.*}} : tensor<8x64xf32>) outs(%{{.*}} : tensor<8xf32>) {
// CHECK-NEXT: ^bb0(%[[IN:.*]]: f32, %[[OUT:.*]]: f32):
// CHECK-NEXT: %[[MAX:.*]] = arith.maximumf %[[IN]], %[[OUT]] : f32
// CHECK-NEXT: linalg.yield %[[MAX]] : f32
// CHECK-NOT: i64
// CHECK: return

// -----

// lazymlir-stage: torch-backend
module {
  func.func @max_dim$both(%arg0: !torch.vtensor<[8,64],f32>) -> (!torch.vtensor<[8],f32>, !torch.vtensor<[8],si64>) {
    %int1 = torch.constant.int 1
    %false = torch.constant.bool false
    %values, %indices = torch.aten.max.dim %arg0, %int1, %false : !torch.vtensor<[8,64],f32>, !torch.int, !torch.bool -> !torch.vtensor<[8],f32>, !torch.vtensor<[8],si64>
    return %values, %indices : !torch.vtensor<[8],f32>, !torch.vtensor<[8],si64>
  }
}
// Both halves used: the two-result reduction stays.
// CHECK-LABEL: func.func @max_dim$both
// CHECK: linalg.generic {{.*}} outs(%{{.*}}, %{{.*}} : tensor<8xf32>, tensor<8xi64>)
// CHECK: arith.select
// CHECK: linalg.yield %{{.*}}, %{{.*}} : f32, i64
