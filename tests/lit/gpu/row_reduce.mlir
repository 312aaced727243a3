// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s

// Softmax's row max at 4096 x 1024: one block of 256 threads per row (4096 rows fill the
// GPU, no split), 4 elements per thread in a loop of constant trip count (unrolled by
// LLVM), a shared-memory tree with barriers, and thread 0 stores the row's maximum: no
// atomic. The -inf fill is folded into that store (maximumf(-inf, m) = m): no fill
// kernel, no read of the output.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @rowmax(%arg0: memref<4096x1024xf32>, %arg1: memref<4096xf32>) {
  %cst = arith.constant 0xFF800000 : f32
  linalg.fill ins(%cst : f32) outs(%arg1 : memref<4096xf32>)
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<4096x1024xf32>) outs(%arg1 : memref<4096xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.maximumf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @rowmax
// CHECK-NOT: gpu.launch_func
// CHECK: gpu.launch_func @{{.*}} blocks in (%c4096, %{{.*}}, %{{.*}}) threads in (%c256,
// CHECK-NEXT: return
// CHECK: gpu.func @{{.*}} workgroup(%[[SMEM:.*]] : memref<256xf32, #gpu.address_space<workgroup>>)
// CHECK-DAG: %[[ROW:.*]] = gpu.block_id x
// CHECK-DAG: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[FIRST:.*]] = memref.load %arg0[%[[ROW]], %[[TID]]]
// CHECK: %[[ACC:.*]] = scf.for %{{.*}} = %c1 to %c4 step %c1 iter_args(%{{.*}} = %[[FIRST]])
// CHECK: arith.maximumf
// CHECK: memref.store %[[ACC]], %[[SMEM]][%[[TID]]]
// CHECK-NEXT: gpu.barrier
// CHECK-COUNT-8: gpu.barrier
// CHECK: scf.if
// CHECK: %[[TOTAL:.*]] = memref.load %[[SMEM]][%c0]
// CHECK-NEXT: memref.store %[[TOTAL]], %arg1[%[[ROW]]]
// CHECK-NOT: memref.atomic_rmw
// CHECK: gpu.return

// -----

// Sum of (x - mean[row])^2 (layer_norm's variance): the broadcast mean is a second input
// that does not walk the row; 77 is not a power of two: 64 threads, the per-thread loop
// has a dynamic start and a bound of 77 (threads 0..12 take a second element). The
// output has no fill right before: thread 0 reads its initial value and adds the sum.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @var(%arg0: memref<300x77xf32>, %arg1: memref<300xf32>, %arg2: memref<300xf32>) {
  linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0, %arg1 : memref<300x77xf32>, memref<300xf32>) outs(%arg2 : memref<300xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %0 = arith.subf %in, %m : f32
    %1 = arith.mulf %0, %0 : f32
    %2 = arith.addf %1, %out : f32
    linalg.yield %2 : f32
  }
  return
}
// CHECK-LABEL: func.func @var
// CHECK: gpu.launch_func @{{.*}} blocks in (%c300, %{{.*}}, %{{.*}}) threads in (%c64,
// CHECK: gpu.func
// CHECK: workgroup(%{{.*}} : memref<64xf32, #gpu.address_space<workgroup>>)
// CHECK: scf.for %{{.*}} = %{{.*}} to %c77 step %c64
// CHECK: arith.subf
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK-COUNT-7: gpu.barrier
// CHECK: %[[OLD:.*]] = memref.load %arg2[%{{.*}}] : memref<300xf32>
// CHECK: arith.addf %[[OLD]]
// CHECK-NOT: memref.atomic_rmw
// CHECK: gpu.return

// -----

// Row product (no atomic for mulf): never split, one block per row even for 3 rows.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @prod(%arg0: memref<3x500xf32>, %arg1: memref<3xf32>) {
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<3x500xf32>) outs(%arg1 : memref<3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @prod
// CHECK: gpu.launch_func @{{.*}} blocks in (%c3, %{{.*}}, %{{.*}}) threads in (%c256,
// CHECK-NEXT: return
// CHECK: gpu.barrier
// CHECK-NOT: memref.atomic_rmw
// CHECK: gpu.return

// -----

// Rows shorter than 32 elements stay one thread per row (no block, no shared memory).
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @short(%arg0: memref<5000x9xf32>, %arg1: memref<5000xf32>) {
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<5000x9xf32>) outs(%arg1 : memref<5000xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @short
// CHECK: gpu.launch_func @{{.*}} blocks in (%c20, %{{.*}}, %{{.*}}) threads in (%c256,
// CHECK: gpu.func
// CHECK-NOT: workgroup
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return

// -----

// Row sum with a zero fill: the fill would become a memset (one more plan step); with one
// block per row it is folded into thread 0's store instead (0.0 + sum keeps -0.0 rows
// as eager does).
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @rowsum(%arg0: memref<2048x512xf32>, %arg1: memref<2048xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg1 : memref<2048xf32>)
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<2048x512xf32>) outs(%arg1 : memref<2048xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @rowsum
// CHECK-NOT: gpu.memset
// CHECK: gpu.launch_func @{{.*}} blocks in (%c2048, %{{.*}}, %{{.*}}) threads in (%c256,
// CHECK-NEXT: return
// Two elements per thread: the one-iteration loop is canonicalized to straight-line code.
// CHECK: memref.load %arg0
// CHECK: memref.load %arg0
// CHECK: %[[TOTAL:.*]] = memref.load %{{.*}}[%c0] : memref<256xf32, #gpu.address_space<workgroup>>
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[TOTAL]], %cst
// CHECK-NEXT: memref.store %[[SUM]], %arg1[
