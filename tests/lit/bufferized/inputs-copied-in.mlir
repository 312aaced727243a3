// RUN: lazymlir-opt %s --stage=bufferized | FileCheck %s

// An in-place update (lowering/bufferize/graph_inputs.py) that bufferization refuses to
// materialize in its input: the graph is bufferized again with every input read-only,
// and the update goes to a temporary copied into the input last.
// lazymlir-stage: linalg
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  // x[1:].mul_(3); return x: the updated x is also an ordinary result, and bufferization
  // refuses to materialize the copy of it in x ("cannot avoid RaW conflict"). The graph
  // is bufferized again with every input read-only: the update goes to a temporary
  // copied into x last.
  // CHECK-LABEL: func.func @view_update$copied_in
  // CHECK-SAME: (%[[X:[a-z0-9]*]]: memref<3x4xf32>, %[[OUT:[a-z0-9]*]]: memref<3x4xf32>)
  // CHECK: %[[TMP:.*]] = memref.alloc() : memref<3x4xf32>
  // CHECK: memref.copy %[[X]], %[[OUT]]
  // (the repeated result's copy: bufferization.alloc_tensor, lowering/bufferize/unique_results.py)
  // CHECK: memref.copy %[[OUT]], %[[TMP]]
  // CHECK-NEXT: memref.copy %[[TMP]], %[[X]]
  // CHECK-NEXT: return
  func.func @view_update$copied_in(%arg0: tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>)
      attributes {lazymlir.in_place = [[0, 1]]} {
    %cst = arith.constant 3.000000e+00 : f32
    %rows = tensor.extract_slice %arg0[1, 0] [2, 4] [1, 1] : tensor<3x4xf32> to tensor<2x4xf32>
    %e = tensor.empty() : tensor<2x4xf32>
    %tripled = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
        ins(%rows : tensor<2x4xf32>) outs(%e : tensor<2x4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %m = arith.mulf %in, %cst : f32
      linalg.yield %m : f32
    } -> tensor<2x4xf32>
    %updated = tensor.insert_slice %tripled into %arg0[1, 0] [2, 4] [1, 1] : tensor<2x4xf32> into tensor<3x4xf32>
    return %updated, %updated : tensor<3x4xf32>, tensor<3x4xf32>
  }
}
