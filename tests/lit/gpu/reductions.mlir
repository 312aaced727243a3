// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s

// Full reduction (x.sum()): split into chunks of 64 folded per thread, then one atomic
// add per thread into the scalar output. 19200 / 64 = 300 threads, 2 blocks of 256.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> ()>
func.func @sum$all(%arg0: memref<64x300xf32>, %arg1: memref<f32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg1 : memref<f32>)
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "reduction"]} ins(%arg0 : memref<64x300xf32>) outs(%arg1 : memref<f32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @sum$all
// CHECK-SAME: (%[[IN:.*]]: memref<64x300xf32>, %[[OUT:.*]]: memref<f32>)
// CHECK: gpu.memset %[[OUT]]
// CHECK: gpu.launch_func @[[MOD:.*]]::@{{.*}} blocks in (%c2, %{{.*}}, %{{.*}}) threads in (%c256, %{{.*}}, %{{.*}}) args(%[[IN]] : memref<64x300xf32>, %[[OUT]] : memref<f32>)
// CHECK: gpu.module @[[MOD]]
// CHECK: scf.if
// CHECK: %[[ACC:.*]] = scf.for {{.*}} iter_args
// CHECK: arith.addf
// CHECK: memref.atomic_rmw addf %[[ACC]], %{{.*}}[] : (f32, memref<f32>) -> f32

// -----

// Row max over a long row: 8 rows x (4096 / 64) chunks, combined with atomic max.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @amax$rows(%arg0: memref<8x4096xf32>, %arg1: memref<8xf32>) {
  %cst = arith.constant 0xFF800000 : f32
  linalg.fill ins(%cst : f32) outs(%arg1 : memref<8xf32>)
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<8x4096xf32>) outs(%arg1 : memref<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.maximumf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @amax$rows
// CHECK: gpu.launch_func @{{.*}} threads in (%c8,
// CHECK: gpu.launch_func @{{.*}} blocks in (%c2, %{{.*}}, %{{.*}}) threads in (%c256,
// CHECK: memref.atomic_rmw maximumf

// -----

// Reduction over dim 0 (reduction iterator first): interchanged so the kept dim (48) is
// parallel across threads, the 32 reduced elements are a loop inside each thread.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @sum$dim0(%arg0: memref<32x48xf32>, %arg1: memref<48xf32>) {
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "parallel"]} ins(%arg0 : memref<32x48xf32>) outs(%arg1 : memref<48xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @sum$dim0
// CHECK: gpu.launch_func @{{.*}} blocks in (%c1, %{{.*}}, %{{.*}}) threads in (%c48,
// CHECK-NEXT: return
// CHECK: gpu.func
// CHECK: gpu.thread_id x
// CHECK: scf.for
// CHECK: memref.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<32x48xf32>
// CHECK-NOT: memref.atomic_rmw
