// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s

// Softmax over rows of 1000 (the bufferized IR torch-mlir gives `torch.softmax(x, -1)`):
// row max, exp(x - max) into the output, row sum, divide in place. Fused into one
// kernel, one block of 256 threads per row, 4 elements per thread (the 4th under a
// guard: 1000 = 3 * 256 + 232). x is loaded once, the row max and sum stay in registers
// (the max buffer and its fill are erased), the exp values are never stored (the divide
// overwrites them), and the output is stored once. Each reduction: a xor-shuffle
// butterfly per warp, lane 0 stores the warp's partial, one barrier, every warp combines
// the 8 partials with shuffles, so every thread holds the total.
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
func.func @softmax(%arg0: memref<64x1000xf32>, %arg1: memref<64x1000xf32>) {
  %cst = arith.constant 0xFF800000 : f32
  %cst_0 = arith.constant 0.000000e+00 : f32
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<64xf32>
  %expand_shape = memref.expand_shape %alloc [[0, 1]] output_shape [64, 1] : memref<64xf32> into memref<64x1xf32>
  linalg.fill ins(%cst : f32) outs(%expand_shape : memref<64x1xf32>)
  %expand_shape_1 = memref.expand_shape %arg0 [[0, 1], [2]] output_shape [64, 1, 1000] : memref<64x1000xf32> into memref<64x1x1000xf32>
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%expand_shape_1 : memref<64x1x1000xf32>) outs(%expand_shape : memref<64x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.maximumf %in, %out : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#map2, #map3, #map2], iterator_types = ["parallel", "parallel"]} ins(%arg0, %expand_shape : memref<64x1000xf32>, memref<64x1xf32>) outs(%arg1 : memref<64x1000xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %0 = arith.subf %in, %in_3 : f32
    %1 = math.exp %0 : f32
    linalg.yield %1 : f32
  }
  %alloc_2 = memref.alloc() {alignment = 64 : i64} : memref<64x1xf32>
  linalg.fill ins(%cst_0 : f32) outs(%alloc_2 : memref<64x1xf32>)
  linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%arg1 : memref<64x1000xf32>) outs(%alloc_2 : memref<64x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#map2, #map3, #map2], iterator_types = ["parallel", "parallel"]} ins(%arg1, %alloc_2 : memref<64x1000xf32>, memref<64x1xf32>) outs(%arg1 : memref<64x1000xf32>) {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %0 = arith.divf %in, %in_3 : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @softmax
// CHECK-NOT: memref.alloc
// CHECK-NOT: gpu.memset
// CHECK: gpu.launch_func @{{.*}} blocks in (%c64, %{{.*}}, %{{.*}}) threads in (%c256, %{{.*}}, %{{.*}})
// CHECK-NEXT: return
// CHECK: gpu.func @{{.*}} workgroup(%[[MAXS:.*]] : memref<8xf32, #gpu.address_space<workgroup>>, %[[SUMS:.*]] : memref<8xf32, #gpu.address_space<workgroup>>)
// CHECK-COUNT-3: memref.load %arg0
// CHECK: scf.if
// CHECK-NEXT: memref.load %arg0
// CHECK-NOT: memref.load %arg0
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.store %{{.*}}, %[[MAXS]]
// CHECK: gpu.barrier
// CHECK-NEXT: %[[I:.*]] = arith.remui
// CHECK-NEXT: memref.load %[[MAXS]][%[[I]]]
// CHECK-NEXT: gpu.shuffle xor
// CHECK-NEXT: arith.maximumf
// CHECK-NEXT: gpu.shuffle xor
// CHECK-NEXT: arith.maximumf
// CHECK-NEXT: gpu.shuffle xor
// CHECK-NEXT: %[[MAX:.*]] = arith.maximumf
// CHECK-NOT: memref.store %{{.*}}, %arg1
// CHECK: arith.subf %{{.*}}, %[[MAX]]
// CHECK: math.exp
// CHECK-NOT: memref.store %{{.*}}, %arg1
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.store %{{.*}}, %[[SUMS]]
// CHECK: gpu.barrier
// CHECK-NEXT: memref.load %[[SUMS]][%[[I]]]
// CHECK-COUNT-3: gpu.shuffle xor
// CHECK-NEXT: %[[TOTAL:.*]] = arith.addf
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[TOTAL]], %cst
// CHECK: arith.divf %{{.*}}, %[[SUM]]
// CHECK-COUNT-3: memref.store %{{.*}}, %arg1
// CHECK: scf.if
// CHECK: arith.divf %{{.*}}, %[[SUM]]
// CHECK-NEXT: memref.store %{{.*}}, %arg1
// CHECK-NOT: memref.load %arg1
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return

// -----

// layer_norm over rows of 300 as the tracer gives it (mean, x - mean, variance, affine
// normalize; the sum's initial value comes through a copy of a zero-filled buffer):
// one kernel, 64 threads per row, 5 elements per thread (the 5th guarded), two warps:
// each reduction is 5 shuffle steps, one barrier and 1 step over the 2 warp partials. The centered
// row (x - mean) stays in registers: its 33x1x300 buffer is erased; only the normalized
// output is stored, straight into the graph output: the copy of the result into %arg3
// is absorbed. The mean/variance buffers, fills and both copies are gone.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0, 0)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map4 = affine_map<(d0, d1, d2) -> (d2)>
module {
  func.func @layer_norm(%arg0: memref<33x300xf32>, %arg1: memref<300xf32>, %arg2: memref<300xf32>, %arg3: memref<33x300xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.000000e-05 : f64
    %cst_1 = arith.constant 3.000000e+02 : f32
    %alloc = memref.alloc() {alignment = 64 : i64} : memref<33x1xf32>
    linalg.fill ins(%cst : f32) outs(%alloc : memref<33x1xf32>)
    %alloc_2 = memref.alloc() {alignment = 64 : i64} : memref<33x1xf32>
    memref.copy %alloc, %alloc_2 : memref<33x1xf32> to memref<33x1xf32>
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<33x300xf32>) outs(%alloc_2 : memref<33x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.addf %in, %out : f32
      linalg.yield %0 : f32
    }
    %expand_shape = memref.expand_shape %arg0 [[0, 1], [2]] output_shape [33, 1, 300] : memref<33x300xf32> into memref<33x1x300xf32>
    %alloc_3 = memref.alloc() {alignment = 64 : i64} : memref<33x1x300xf32>
    linalg.generic {indexing_maps = [#map2, #map3, #map2], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expand_shape, %alloc_2 : memref<33x1x300xf32>, memref<33x1xf32>) outs(%alloc_3 : memref<33x1x300xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %0 = arith.divf %in_6, %cst_1 : f32
      %1 = arith.subf %in, %0 : f32
      linalg.yield %1 : f32
    }
    %collapse_shape = memref.collapse_shape %alloc_3 [[0, 1], [2]] : memref<33x1x300xf32> into memref<33x300xf32>
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%collapse_shape : memref<33x300xf32>) outs(%alloc : memref<33x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.mulf %in, %in : f32
      %1 = arith.addf %0, %out : f32
      linalg.yield %1 : f32
    }
    %alloc_4 = memref.alloc() {alignment = 64 : i64} : memref<33x1x300xf32>
    linalg.generic {indexing_maps = [#map2, #map3, #map4, #map4, #map2], iterator_types = ["parallel", "parallel", "parallel"]} ins(%alloc_3, %alloc, %arg1, %arg2 : memref<33x1x300xf32>, memref<33x1xf32>, memref<300xf32>, memref<300xf32>) outs(%alloc_4 : memref<33x1x300xf32>) {
    ^bb0(%in: f32, %in_6: f32, %in_7: f32, %in_8: f32, %out: f32):
      %0 = arith.divf %in_6, %cst_1 : f32
      %1 = arith.truncf %cst_0 : f64 to f32
      %2 = arith.addf %0, %1 : f32
      %3 = math.rsqrt %2 : f32
      %4 = arith.mulf %in, %3 : f32
      %5 = arith.mulf %4, %in_7 : f32
      %6 = arith.addf %5, %in_8 : f32
      linalg.yield %6 : f32
    }
    %collapse_shape_5 = memref.collapse_shape %alloc_4 [[0, 1], [2]] : memref<33x1x300xf32> into memref<33x300xf32>
    memref.copy %collapse_shape_5, %arg3 : memref<33x300xf32> to memref<33x300xf32>
    return
  }
}

// CHECK-LABEL: func.func @layer_norm
// CHECK-NOT: gpu.memset
// CHECK-NOT: memref.alloc
// CHECK: gpu.launch_func @{{.*}} blocks in (%c33, %{{.*}}, %{{.*}}) threads in (%c64, %{{.*}}, %{{.*}}) args(%arg0 : memref<33x300xf32>, %arg1 : memref<300xf32>, %arg2 : memref<300xf32>, %arg3 : memref<33x300xf32>)
// CHECK-NEXT: return
// CHECK: gpu.func
// CHECK-SAME: workgroup(%{{.*}} : memref<2xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<2xf32, #gpu.address_space<workgroup>>)
// CHECK-COUNT-5: memref.load %arg0
// CHECK-NOT: memref.load %arg0
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK-NOT: gpu.shuffle
// CHECK: gpu.barrier
// CHECK-NEXT: arith.remui
// CHECK-NEXT: memref.load
// CHECK-NEXT: gpu.shuffle xor %{{.*}}, %c1_i32, %c32_i32
// CHECK-NOT: gpu.barrier
// CHECK: arith.subf
// CHECK-NOT: memref.store %{{.*}}, %arg3
// CHECK: arith.mulf
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK: math.rsqrt
// CHECK: memref.store %{{.*}}, %arg3[%{{.*}}, %{{.*}}] : memref<33x300xf32>
// CHECK-NOT: memref.copy
// CHECK: gpu.return

// -----

// Not a row run: the map reads x transposed (x[j, i] for row i), so rows of different
// blocks would depend on each other; the max keeps its own block-per-row kernel and the
// map stays a separate elementwise kernel, reading the max from global memory.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#mapT = affine_map<(d0, d1) -> (d1, d0)>
func.func @transposed(%arg0: memref<64x64xf32>, %arg1: memref<64x64xf32>) {
  %cst = arith.constant 0xFF800000 : f32
  %alloc = memref.alloc() : memref<64xf32>
  linalg.fill ins(%cst : f32) outs(%alloc : memref<64xf32>)
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<64x64xf32>) outs(%alloc : memref<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.maximumf %in, %out : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#mapT, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %alloc : memref<64x64xf32>, memref<64xf32>) outs(%arg1 : memref<64x64xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %0 = arith.subf %in, %m : f32
    linalg.yield %0 : f32
  }
  memref.dealloc %alloc : memref<64xf32>
  return
}
// CHECK-LABEL: func.func @transposed
// CHECK: %[[MAX:.*]] = memref.alloc() : memref<64xf32>
// CHECK: gpu.launch_func @{{.*}} blocks in (%c64, %{{.*}}, %{{.*}}) threads in (%c64, %{{.*}}, %{{.*}}) args(%arg0 : memref<64x64xf32>, %[[MAX]] : memref<64xf32>)
// CHECK: gpu.launch_func @{{.*}} args(%arg0 : memref<64x64xf32>, %[[MAX]] : memref<64xf32>, %arg1 : memref<64x64xf32>)
// CHECK: memref.dealloc %[[MAX]]
