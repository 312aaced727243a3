// RUN: lazymlir-opt %s --stage=bufferized -split-input-file | FileCheck %s
// RUN: lazymlir-opt %s --stage=bufferized -split-input-file | FileCheck %s --check-prefix=NO-I1

// Bool (i1) buffers are stored as bytes (lowering/bufferize/i1_storage.py): no i1 memref is left,
// accesses narrow (trunci) what they read and widen (extui) what they write.
// Input: `linalg` stage output.
// NO-I1-NOT: xi1>

#map = affine_map<(d0, d1) -> (d1)>
#map1 = affine_map<(d0, d1) -> (d0, 0)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
#map3 = affine_map<(d0, d1, d2) -> (0, d1, d2)>
#map4 = affine_map<(d0, d1, d2) -> (d0, 0, d2)>
#map5 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module {
  func.func @diag_embed$i1_temporary(%arg0: tensor<2x3xf32>, %arg1: tensor<3xi64>) -> tensor<2x3x3xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %expanded = tensor.expand_shape %arg1 [[0, 1]] output_shape [3, 1] : tensor<3xi64> into tensor<3x1xi64>
    %0 = tensor.empty() : tensor<3x3xi1>
    %1 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel"]} ins(%arg1, %expanded : tensor<3xi64>, tensor<3x1xi64>) outs(%0 : tensor<3x3xi1>) {
    ^bb0(%in: i64, %in_0: i64, %out: i1):
      %5 = arith.cmpi eq, %in, %in_0 : i64
      linalg.yield %5 : i1
    } -> tensor<3x3xi1>
    %expanded_1 = tensor.expand_shape %1 [[0, 1], [2]] output_shape [1, 3, 3] : tensor<3x3xi1> into tensor<1x3x3xi1>
    %expanded_2 = tensor.expand_shape %arg0 [[0], [1, 2]] output_shape [2, 1, 3] : tensor<2x3xf32> into tensor<2x1x3xf32>
    %2 = tensor.empty() : tensor<2x3x3xf32>
    %3 = linalg.generic {indexing_maps = [#map3, #map4, #map5], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expanded_1, %expanded_2 : tensor<1x3x3xi1>, tensor<2x1x3xf32>) outs(%2 : tensor<2x3x3xf32>) {
    ^bb0(%in: i1, %in_0: f32, %out: f32):
      %5 = arith.select %in, %in_0, %cst : f32
      linalg.yield %5 : f32
    } -> tensor<2x3x3xf32>
    return %3 : tensor<2x3x3xf32>
  }
}
// CHECK-LABEL: func.func @diag_embed$i1_temporary
// CHECK: %[[MASK:.*]] = memref.alloc() {alignment = 64 : i64} : memref<3x3xi8>
// CHECK: outs(%[[MASK]] : memref<3x3xi8>) {
// CHECK-NEXT: ^bb0(%{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i8):
// CHECK-NEXT: %[[EQ:.*]] = arith.cmpi eq
// CHECK-NEXT: %[[BYTE:.*]] = arith.extui %[[EQ]] : i1 to i8
// CHECK-NEXT: linalg.yield %[[BYTE]] : i8
// CHECK: %[[VIEW:.*]] = memref.expand_shape %[[MASK]] {{.*}} : memref<3x3xi8> into memref<1x3x3xi8>
// CHECK: ins(%[[VIEW]], %{{.*}} : memref<1x3x3xi8>, memref<2x1x3xf32>)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: i8, %{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[BIT:.*]] = arith.trunci %[[IN]] : i8 to i1
// CHECK-NEXT: arith.select %[[BIT]]

// -----

#map = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0, 0)>
module {
  func.func @where$constant_mask(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %cst = arith.constant dense<[true, false, true, true]> : tensor<4xi1>
    %zero = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%cst, %arg0 : tensor<4xi1>, tensor<4xf32>) outs(%0 : tensor<4xf32>) {
    ^bb0(%in: i1, %in_0: f32, %out: f32):
      %2 = arith.select %in, %in_0, %zero : f32
      linalg.yield %2 : f32
    } -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}
// CHECK: memref.global "private" constant @{{.*}} : memref<4xi8> = dense<[1, 0, 1, 1]>
// CHECK-LABEL: func.func @where$constant_mask
// CHECK: memref.get_global @{{.*}} : memref<4xi8>
// CHECK: arith.trunci %{{.*}} : i8 to i1

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0, d1) -> (d1, d0)>
module {
  func.func @all$fill_and_transpose(%arg0: tensor<4x8xf32>) -> tensor<8x4xf32> {
    %true = arith.constant true
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4xi1>
    %1 = linalg.fill ins(%true : i1) outs(%0 : tensor<4xi1>) -> tensor<4xi1>
    %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf32>) outs(%1 : tensor<4xi1>) {
    ^bb0(%in: f32, %out: i1):
      %5 = arith.cmpf oeq, %in, %cst : f32
      %6 = arith.andi %5, %out : i1
      linalg.yield %6 : i1
    } -> tensor<4xi1>
    %3 = tensor.empty() : tensor<4x8xi1>
    %4 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %2 : tensor<4x8xf32>, tensor<4xi1>) outs(%3 : tensor<4x8xi1>) {
    ^bb0(%in: f32, %in_0: i1, %out: i1):
      %5 = arith.cmpf ogt, %in, %cst : f32
      %6 = arith.ori %5, %in_0 : i1
      linalg.yield %6 : i1
    } -> tensor<4x8xi1>
    %7 = tensor.empty() : tensor<8x4xi1>
    %t = linalg.transpose ins(%4 : tensor<4x8xi1>) outs(%7 : tensor<8x4xi1>) permutation = [1, 0]
    %8 = tensor.empty() : tensor<8x4xf32>
    %9 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%t : tensor<8x4xi1>) outs(%8 : tensor<8x4xf32>) {
    ^bb0(%in: i1, %out: f32):
      %10 = arith.uitofp %in : i1 to f32
      linalg.yield %10 : f32
    } -> tensor<8x4xf32>
    return %9 : tensor<8x4xf32>
  }
}
// CHECK-LABEL: func.func @all$fill_and_transpose
// CHECK: %[[TRUE:.*]] = arith.constant true
// CHECK: %[[ALL:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4xi8>
// CHECK: %[[ONE:.*]] = arith.extui %[[TRUE]] : i1 to i8
// CHECK: linalg.fill ins(%[[ONE]] : i8) outs(%[[ALL]] : memref<4xi8>)
// CHECK: outs(%[[ALL]] : memref<4xi8>) {
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %[[ACC:.*]]: i8):
// CHECK-NEXT: %[[ACC1:.*]] = arith.trunci %[[ACC]] : i8 to i1
// CHECK: %[[AND:.*]] = arith.andi %{{.*}}, %[[ACC1]] : i1
// CHECK-NEXT: %[[AND8:.*]] = arith.extui %[[AND]] : i1 to i8
// CHECK-NEXT: linalg.yield %[[AND8]] : i8
// CHECK: linalg.transpose ins(%{{.*}} : memref<4x8xi8>) outs(%{{.*}} : memref<8x4xi8>) permutation = [1, 0]
// CHECK: arith.uitofp %{{.*}} : i1 to f32

// -----

module {
  func.func @loop$load_store(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4xi1>
    %1 = scf.for %i = %c0 to %c4 step %c1 iter_args(%t = %0) -> (tensor<4xi1>) {
      %x = tensor.extract %arg0[%i] : tensor<4xf32>
      %b = arith.cmpf ogt, %x, %cst : f32
      %t2 = tensor.insert %b into %t[%i] : tensor<4xi1>
      scf.yield %t2 : tensor<4xi1>
    }
    %2 = tensor.empty() : tensor<4xf32>
    %3 = scf.for %i = %c0 to %c4 step %c1 iter_args(%t = %2) -> (tensor<4xf32>) {
      %b = tensor.extract %1[%i] : tensor<4xi1>
      %x = tensor.extract %arg0[%i] : tensor<4xf32>
      %y = arith.select %b, %x, %cst : f32
      %t2 = tensor.insert %y into %t[%i] : tensor<4xf32>
      scf.yield %t2 : tensor<4xf32>
    }
    return %3 : tensor<4xf32>
  }
}
// CHECK-LABEL: func.func @loop$load_store
// CHECK: %[[MASK:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4xi8>
// CHECK: %[[GT:.*]] = arith.cmpf ogt
// CHECK-NEXT: %[[GT8:.*]] = arith.extui %[[GT]] : i1 to i8
// CHECK-NEXT: memref.store %[[GT8]], %[[MASK]][%{{.*}}] : memref<4xi8>
// CHECK: %[[LOADED:.*]] = memref.load %[[MASK]][%{{.*}}] : memref<4xi8>
// CHECK-NEXT: %[[BIT:.*]] = arith.trunci %[[LOADED]] : i8 to i1
// CHECK: arith.select %[[BIT]]
