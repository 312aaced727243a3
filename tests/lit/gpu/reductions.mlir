// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s

// Full reduction (x.sum()): rows are contiguous, so it takes the block-per-row route
// (gpu/kernels/row_reduce.py) with the one "row" split over 19200 / (256 * 4) = 18 blocks: each
// thread folds a strided slice in a register, each warp combines its 32 values with xor
// shuffles, the 8 warp partials meet in shared memory after the kernel's one barrier
// (3 more shuffle steps), and one atomic add per block goes to the scalar output.
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
// CHECK: gpu.launch_func @[[MOD:.*]]::@{{.*}} blocks in (%c18, %{{.*}}, %{{.*}}) threads in (%c256, %{{.*}}, %{{.*}}) args(%[[IN]] : memref<64x300xf32>, %[[OUT]] : memref<f32>)
// CHECK: gpu.module @[[MOD]]
// CHECK: workgroup(%[[SMEM:.*]] : memref<8xf32, #gpu.address_space<workgroup>>)
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[ACC:.*]] = scf.for {{.*}} step %c4608 iter_args
// CHECK: arith.addf
// CHECK: gpu.shuffle xor %[[ACC]], %c16_i32, %c32_i32 : f32
// CHECK-COUNT-4: gpu.shuffle xor
// CHECK: memref.store %{{.*}}, %[[SMEM]]
// CHECK: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-3: gpu.shuffle xor
// CHECK: %[[TOTAL:.*]] = arith.addf
// CHECK: arith.cmpi eq, %[[TID]], %c0
// CHECK-NEXT: scf.if
// CHECK-NEXT: memref.atomic_rmw addf %[[TOTAL]], %{{.*}}[] : (f32, memref<f32>) -> f32

// -----

// Row max over a long row, few rows: each row is split over 4096 / (256 * 4) = 4 blocks
// (8 x 4 = 32 blocks of 256 threads), each block's maximum combined with an atomic max.
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
// The -inf fill of the 8 outputs: 4 per thread (gpu/kernels/vectorize.py), 2 threads.
// CHECK: gpu.launch_func @{{.*}} threads in (%c2,
// CHECK: gpu.launch_func @{{.*}} blocks in (%c32, %{{.*}}, %{{.*}}) threads in (%c256,
// CHECK: gpu.barrier
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

// -----

// Column sum (a bias gradient: `g.sum(0)` of 2048 x 4096): 4096 outputs would leave most
// of the GPU idle, so the 2048 rows are split into 32 chunks of 64 combined by atomics.
// The chunk index is outermost: consecutive threads take consecutive columns, so every
// load of a warp is one contiguous 128-byte row segment. 32 x 4096 / 256 = 512 blocks.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @sum$cols(%arg0: memref<2048x4096xf32>, %arg1: memref<4096xf32>) {
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "parallel"]} ins(%arg0 : memref<2048x4096xf32>) outs(%arg1 : memref<4096xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @sum$cols
// CHECK: gpu.launch_func @{{.*}} blocks in (%c512, %{{.*}}, %{{.*}}) threads in (%c256,
// CHECK: gpu.func
// CHECK: %[[LIN:.*]] = arith.addi %{{.*}}, %thread_id_x
// CHECK: %[[COL:.*]] = arith.remui %[[LIN]], %c4096
// CHECK: %[[CHUNK:.*]] = arith.divui %[[LIN]], %c4096
// CHECK: %[[ROW0:.*]] = arith.muli %[[CHUNK]], %c64
// CHECK: memref.load %arg0[%[[ROW0]], %[[COL]]]
// CHECK: scf.for
// CHECK: memref.atomic_rmw addf %{{.*}}, %arg1[%[[COL]]]
