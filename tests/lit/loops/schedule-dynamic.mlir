// RUN: lazymlir-opt %s --stage=loops -split-input-file | FileCheck %s

// The cpu schedule for `?` sizes (lowering/cpu/dynamic.py): register tiles of the
// ISA (AVX-512 here: 8 x 32 accumulators), the tile loop over a dynamic dim peeled so
// that its main part runs whole static tiles, vectorized as in the static schedule
// (accumulators in registers across K), the remainder one row at a time (wider in N),
// and a run-time test of the work choosing the parallel copy (OpenMP) or the in-order one.

// lazymlir-stage: bufferized
module {
  func.func @matmul$dynamic_m(%arg0: memref<?x64xf32>, %arg1: memref<64x128xf32>, %arg2: memref<?x128xf32>) {
    linalg.matmul ins(%arg0, %arg1 : memref<?x64xf32>, memref<64x128xf32>) outs(%arg2 : memref<?x128xf32>)
    return
  }
}
// CHECK-LABEL: func.func @matmul$dynamic_m
// CHECK: %[[M:.*]] = memref.dim %arg0, %c0
// CHECK: %[[WORK:.*]] = arith.muli %[[M]], %c8192
// CHECK: %[[LARGE:.*]] = arith.cmpi sge, %[[WORK]], %c2097152
// CHECK: scf.if %[[LARGE]] {
// CHECK: omp.wsloop
// CHECK: scf.for %{{.*}} = %c0 to %[[FULL:.*]] step %c8 {
// CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x32xf32>)
// CHECK-COUNT-32: vector.fma
// CHECK: scf.for %{{.*}} = %[[FULL]] to %{{.*}} step %c8 {
// CHECK: scf.for {{.*}} step %c1 {
// CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<1x64xf32>)
// CHECK: } else {
// CHECK-NOT: omp.
// CHECK: scf.for %{{.*}} = %c0 to %[[FULL2:.*]] step %c8 {
// CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<8x32xf32>)
// CHECK: scf.for %{{.*}} = %[[FULL2]] to %{{.*}} step %c8 {
// CHECK: scf.for {{.*}} step %c1 {
// CHECK: scf.for {{.*}} iter_args({{.*}}) -> (vector<1x128xf32>)
// CHECK: return

// -----

// Elementwise, both dims dynamic: rows one at a time (in blocks over all cores when
// large), the innermost dim in steps of two vectors, peeled: one element at a time
// for the rest.
// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @add$dynamic(%arg0: memref<?x?xf32>, %arg1: memref<?x?xf32>, %arg2: memref<?x?xf32>) {
    linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : memref<?x?xf32>, memref<?x?xf32>) outs(%arg2 : memref<?x?xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %0 = arith.addf %in, %in_0 : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// CHECK-LABEL: func.func @add$dynamic
// CHECK: scf.if
// CHECK: omp.loop_nest (%{{.*}}) : index = (%c0) to (%c16)
// CHECK: scf.for %{{.*}} = %c0 to %[[FULL:.*]] step %c32 {
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: scf.for %{{.*}} = %[[FULL]] to %{{.*}} step %c32 {
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<1xf32>
// CHECK: } else {
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<1xf32>

// -----

// A row sum with a dynamic row length: vector steps folded by a reduction, the
// peeled rest one element at a time.
// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @sum$dynamic_rows(%arg0: memref<?x?xf32>, %arg1: memref<?xf32>) {
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<?x?xf32>) outs(%arg1 : memref<?xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.addf %in, %out : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// CHECK-LABEL: func.func @sum$dynamic_rows
// CHECK: scf.if
// CHECK: omp.wsloop
// CHECK: vector.reduction <add>, %{{.*}}, %{{.*}} : vector<32xf32> into f32
// CHECK: } else {
// CHECK: scf.for %{{.*}} = %c0 to %[[FULL:.*]] step %c32 {
// CHECK: vector.reduction <add>, %{{.*}}, %{{.*}} : vector<32xf32> into f32
// CHECK: scf.for %{{.*}} = %[[FULL]] to %{{.*}} step %c32 {
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<1xf32>
