// RUN: lazymlir-opt %s --stage=loops -split-input-file | FileCheck %s

// lowering/cpu/output_signals.py: the graph function calls lazymlir_output_ready(k)
// right after the last op that touches out-parameter k (through a view too), so a
// read of that output on the background thread need not wait for the rest.
// Input: `bufferized` stage output (marker line kept: each case resumes from a dump).

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @signals$order(%arg0: memref<4x8xf32>, %arg1: memref<4x8xf32>, %arg2: memref<4xf32>) attributes {lazymlir.results = 2 : i64} {
    %cst = arith.constant 0.000000e+00 : f32
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<4x8xf32>) outs(%arg1 : memref<4x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = math.exp %in : f32
      linalg.yield %0 : f32
    }
    linalg.fill ins(%cst : f32) outs(%arg2 : memref<4xf32>)
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<4x8xf32>) outs(%arg2 : memref<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.addf %in, %out : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// CHECK: func.func private @lazymlir_output_ready(i64)
// CHECK-LABEL: func.func @signals$order
// CHECK: math.exp
// CHECK: %[[K0:.*]] = arith.constant 0 : i64
// CHECK-NEXT: call @lazymlir_output_ready(%[[K0]]) : (i64) -> ()
// CHECK: vector.reduction <add>
// CHECK: %[[K1:.*]] = arith.constant 1 : i64
// CHECK-NEXT: call @lazymlir_output_ready(%[[K1]]) : (i64) -> ()
// CHECK-NEXT: return

// -----

// Output 0 is read later through a view (the sum of its elements): its signal comes
// after that read (the load of the view), output 1's after the sum.
// lazymlir-stage: bufferized
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0) -> ()>
module {
  func.func @signals$view(%arg0: memref<4x8xf32>, %arg1: memref<4x8xf32>, %arg2: memref<f32>) attributes {lazymlir.results = 2 : i64} {
    %cst = arith.constant 0.000000e+00 : f32
    memref.copy %arg0, %arg1 : memref<4x8xf32> to memref<4x8xf32>
    %flat = memref.collapse_shape %arg1 [[0, 1]] : memref<4x8xf32> into memref<32xf32>
    linalg.fill ins(%cst : f32) outs(%arg2 : memref<f32>)
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction"]} ins(%flat : memref<32xf32>) outs(%arg2 : memref<f32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.addf %in, %out : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// CHECK-LABEL: func.func @signals$view
// CHECK-NOT: call @lazymlir_output_ready
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %arg1
// CHECK-NOT: call @lazymlir_output_ready
// CHECK: vector.load %[[FLAT]]
// CHECK-NEXT: %[[K0:.*]] = arith.constant 0 : i64
// CHECK-NEXT: call @lazymlir_output_ready(%[[K0]])
// CHECK: vector.reduction <add>
// CHECK: vector.store
// CHECK-NEXT: %[[K1:.*]] = arith.constant 1 : i64
// CHECK-NEXT: call @lazymlir_output_ready(%[[K1]])
// CHECK-NEXT: return

// -----

// Result 0 updates input 0 in place: it has no out-parameter, and result 1's
// out-parameter (the last argument) is number 0.
// lazymlir-stage: bufferized
#map = affine_map<(d0) -> (d0)>
module {
  func.func @signals$in_place(%arg0: memref<8xf32>, %arg1: memref<8xf32>) attributes {lazymlir.in_place = [[0, 0]], lazymlir.results = 2 : i64} {
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : memref<8xf32>) outs(%arg1 : memref<8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = math.exp %in : f32
      linalg.yield %0 : f32
    }
    linalg.generic {indexing_maps = [#map], iterator_types = ["parallel"]} outs(%arg0 : memref<8xf32>) {
    ^bb0(%out: f32):
      %0 = arith.addf %out, %out : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// CHECK-LABEL: func.func @signals$in_place
// CHECK: math.exp
// CHECK: %[[K:.*]] = arith.constant 0 : i64
// CHECK-NEXT: call @lazymlir_output_ready(%[[K]]) : (i64) -> ()
// CHECK: arith.addf
// CHECK-NOT: call @lazymlir_output_ready
// CHECK: return

// -----

// A function the bufferized stage did not mark (no lazymlir.results): no signals.
// lazymlir-stage: bufferized
module {
  func.func @signals$unmarked(%arg0: memref<8xf32>, %arg1: memref<8xf32>) {
    memref.copy %arg0, %arg1 : memref<8xf32> to memref<8xf32>
    return
  }
}
// CHECK-LABEL: func.func @signals$unmarked
// CHECK-NOT: lazymlir_output_ready
// CHECK: return
