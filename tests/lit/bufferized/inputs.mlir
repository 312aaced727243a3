// RUN: lazymlir-opt %s --stage=bufferized | FileCheck %s

// Graph inputs are read-only (lowering/bufferize/graph_inputs.py): an op whose destination is an
// input works on a copy. Only a result the graph names an in-place update of an input
// (`lazymlir.in_place`, [input, result]) is written into that input, and it is no longer
// a result: the function has no out-parameter for it.
// lazymlir-stage: linalg
#map = affine_map<(d0, d1) -> (d0, d1)>
#transposed = affine_map<(d0, d1) -> (d1, d0)>
module {
  // slice_scatter(x, y): the insertion works on a copy of x, never on the caller's x.
  // CHECK-LABEL: func.func @scatter$input_read_only
  // CHECK-SAME: (%[[X:.*]]: memref<4x3xf32>, %[[Y:.*]]: memref<2x3xf32>, %[[OUT:.*]]: memref<4x3xf32>)
  // CHECK-NEXT: memref.copy %[[X]], %[[OUT]]
  // CHECK-NEXT: %[[ROWS:.*]] = memref.subview %[[OUT]][0, 0] [2, 3] [1, 1]
  // CHECK-NEXT: memref.copy %[[Y]], %[[ROWS]]
  // CHECK-NEXT: return
  func.func @scatter$input_read_only(%x: tensor<4x3xf32>, %y: tensor<2x3xf32>) -> tensor<4x3xf32> {
    %r = tensor.insert_slice %y into %x[0, 0] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<4x3xf32>
    return %r : tensor<4x3xf32>
  }

  // An SGD-like update of input 0 (result 1), elementwise: computed in the input itself.
  // CHECK-LABEL: func.func @update$in_place
  // CHECK-SAME: (%[[P:[a-z0-9]*]]: memref<4x4xf32>, %[[G:[a-z0-9]*]]: memref<4x4xf32>, %[[OUT0:[a-z0-9]*]]: memref<4x4xf32>)
  // CHECK-NOT: memref.alloc
  // CHECK: linalg.generic {{.*}} ins(%[[P]] : memref<4x4xf32>) outs(%[[OUT0]] : memref<4x4xf32>)
  // CHECK: linalg.generic {{.*}} ins(%[[P]], %[[G]] : memref<4x4xf32>, memref<4x4xf32>) outs(%[[P]] : memref<4x4xf32>)
  // CHECK-NOT: memref.copy
  // CHECK: return
  func.func @update$in_place(%p: tensor<4x4xf32>, %g: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
      attributes {lazymlir.in_place = [[0, 1]]} {
    %e0 = tensor.empty() : tensor<4x4xf32>
    %sq = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
        ins(%p : tensor<4x4xf32>) outs(%e0 : tensor<4x4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %m = arith.mulf %a, %a : f32
      linalg.yield %m : f32
    } -> tensor<4x4xf32>
    %e1 = tensor.empty() : tensor<4x4xf32>
    %new = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]}
        ins(%p, %g : tensor<4x4xf32>, tensor<4x4xf32>) outs(%e1 : tensor<4x4xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      linalg.yield %d : f32
    } -> tensor<4x4xf32>
    return %sq, %new : tensor<4x4xf32>, tensor<4x4xf32>
  }

  // An update that reads its input transposed cannot write it while reading it: it is
  // computed in a temporary, copied into the input at the end.
  // CHECK-LABEL: func.func @transposed$copied_in
  // CHECK-SAME: (%[[P:[a-z0-9]*]]: memref<4x4xf32>)
  // CHECK: %[[TMP:.*]] = memref.alloc
  // CHECK: linalg.generic {{.*}} ins(%[[P]] : memref<4x4xf32>) outs(%[[TMP]] : memref<4x4xf32>)
  // CHECK: memref.copy %[[TMP]], %[[P]]
  // CHECK-NEXT: return
  func.func @transposed$copied_in(%p: tensor<4x4xf32>) -> tensor<4x4xf32>
      attributes {lazymlir.in_place = [[0, 0]]} {
    %e = tensor.empty() : tensor<4x4xf32>
    %t = linalg.generic {indexing_maps = [#transposed, #map], iterator_types = ["parallel", "parallel"]}
        ins(%p : tensor<4x4xf32>) outs(%e : tensor<4x4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %d = arith.addf %a, %a : f32
      linalg.yield %d : f32
    } -> tensor<4x4xf32>
    return %t : tensor<4x4xf32>
  }
}
