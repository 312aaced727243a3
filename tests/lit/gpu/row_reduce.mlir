// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s

// Softmax's row max at 4096 x 1024: one block of 256 threads per row (4096 rows fill the
// GPU, no split), 4 elements per thread in a loop of constant trip count (unrolled by
// LLVM), a xor-shuffle butterfly per warp (5 steps), lane 0 of each warp stores its
// maximum to shared memory, one barrier, every warp combines the 8 partials with 3 more
// shuffle steps, and thread 0 stores the row's maximum: no atomic. The -inf fill is folded into that store (maximumf(-inf, m) = m): no fill
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
// CHECK: gpu.func @{{.*}} workgroup(%[[SMEM:.*]] : memref<8xf32, #gpu.address_space<workgroup>>)
// CHECK-DAG: %[[ROW:.*]] = gpu.block_id x
// CHECK-DAG: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[FIRST:.*]] = memref.load %arg0[%[[ROW]], %[[TID]]]
// CHECK: %[[ACC:.*]] = scf.for %{{.*}} = %c1 to %c4 step %c1 iter_args(%{{.*}} = %[[FIRST]])
// CHECK: arith.maximumf
// CHECK-NOT: gpu.barrier
// CHECK: %[[S16:.*]], %{{.*}} = gpu.shuffle xor %[[ACC]], %c16_i32, %c32_i32 : f32
// CHECK-NEXT: %[[M16:.*]] = arith.maximumf %[[ACC]], %[[S16]] : f32
// CHECK-NEXT: %[[S8:.*]], %{{.*}} = gpu.shuffle xor %[[M16]], %c8_i32, %c32_i32 : f32
// CHECK-NEXT: arith.maximumf %[[M16]], %[[S8]]
// CHECK-NEXT: gpu.shuffle xor %{{.*}}, %c4_i32, %c32_i32
// CHECK-NEXT: arith.maximumf
// CHECK-NEXT: gpu.shuffle xor %{{.*}}, %c2_i32, %c32_i32
// CHECK-NEXT: arith.maximumf
// CHECK-NEXT: gpu.shuffle xor %{{.*}}, %c1_i32, %c32_i32
// CHECK-NEXT: %[[WARP:.*]] = arith.maximumf
// CHECK: %[[LANE:.*]] = arith.remui %[[TID]], %c32
// CHECK: scf.if
// CHECK-NEXT: %[[W:.*]] = arith.divui %[[TID]], %c32
// CHECK-NEXT: memref.store %[[WARP]], %[[SMEM]][%[[W]]]
// CHECK: gpu.barrier
// CHECK-NEXT: %[[I:.*]] = arith.remui %[[LANE]], %c8
// CHECK-NEXT: %[[P:.*]] = memref.load %[[SMEM]][%[[I]]]
// CHECK-NEXT: gpu.shuffle xor %[[P]], %c4_i32, %c32_i32
// CHECK-NEXT: arith.maximumf
// CHECK-NEXT: gpu.shuffle xor %{{.*}}, %c2_i32, %c32_i32
// CHECK-NEXT: arith.maximumf
// CHECK-NEXT: gpu.shuffle xor %{{.*}}, %c1_i32, %c32_i32
// CHECK-NEXT: %[[TOTAL:.*]] = arith.maximumf
// CHECK-NOT: gpu.barrier
// CHECK: scf.if
// CHECK-NEXT: memref.store %[[TOTAL]], %arg1[%[[ROW]]]
// CHECK-NOT: memref.atomic_rmw
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return

// -----

// Sum of (x - mean[row])^2 (layer_norm's variance): the broadcast mean is a second input
// that does not walk the row; 77 is not a power of two: 64 threads, the per-thread loop
// has a dynamic start and a bound of 77 (threads 0..12 take a second element); two
// warps: 5 shuffle steps, one barrier, 1 step over the 2 partials. The output has no
// fill right before: thread 0 reads its initial value and adds the sum.
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
// CHECK: workgroup(%{{.*}} : memref<2xf32, #gpu.address_space<workgroup>>)
// CHECK: scf.for %{{.*}} = %{{.*}} to %c77 step %c64
// CHECK: arith.subf
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK-NOT: gpu.shuffle
// CHECK: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK: gpu.shuffle xor %{{.*}}, %c1_i32, %c32_i32
// CHECK-NOT: gpu.shuffle
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
// CHECK: gpu.shuffle xor %{{.*}}, %c1_i32, %c32_i32
// CHECK: gpu.shuffle xor %{{.*}}, %c1_i32, %c32_i32
// CHECK-NEXT: %[[TOTAL:.*]] = arith.addf
// CHECK: scf.if
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[TOTAL]], %cst
// CHECK-NEXT: memref.store %[[SUM]], %arg1[

// -----

// Rows of 40: one warp of 32 threads per row, 8 rows per block of 256 threads (warp w of
// block b owns row 8b + w), no shared memory and no barrier: the warp's butterfly leaves
// the row's sum in every lane. 1001 rows: the last block's 7 spare warps re-read row
// 1000 (clamped, no guard around loads and shuffles) and store nothing.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @warp(%arg0: memref<1001x40xf32>, %arg1: memref<1001xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg1 : memref<1001xf32>)
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<1001x40xf32>) outs(%arg1 : memref<1001xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @warp
// CHECK: gpu.launch_func @{{.*}} blocks in (%c126, %{{.*}}, %{{.*}}) threads in (%c256,
// CHECK: gpu.func
// CHECK-NOT: workgroup
// CHECK-SAME: kernel
// CHECK-DAG: %[[B:.*]] = gpu.block_id x
// CHECK-DAG: %[[T:.*]] = gpu.thread_id x
// CHECK: %[[FIRST:.*]] = arith.muli %[[B]], %c8
// CHECK-NEXT: %[[WARP:.*]] = arith.divui %[[T]], %c32
// CHECK-NEXT: %[[SLOT:.*]] = arith.addi %[[FIRST]], %[[WARP]]
// CHECK-NEXT: %[[ROW:.*]] = arith.minui %[[SLOT]], %c1000
// CHECK-NEXT: %[[OWNER:.*]] = arith.cmpi ult, %[[SLOT]], %c1001
// CHECK-NEXT: %[[LANE:.*]] = arith.remui %[[T]], %c32
// CHECK-NEXT: memref.load %arg0[%[[ROW]], %[[LANE]]]
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK-NEXT: %[[SUM:.*]] = arith.addf
// CHECK-NEXT: %[[LEAD:.*]] = arith.cmpi eq, %[[LANE]], %c0
// CHECK-NEXT: %[[STORE:.*]] = arith.andi %[[LEAD]], %[[OWNER]]
// CHECK-NEXT: scf.if %[[STORE]]
// CHECK-NEXT: %[[OUT:.*]] = arith.addf %[[SUM]], %cst
// CHECK-NEXT: memref.store %[[OUT]], %arg1[%[[ROW]]]
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return

// -----

// 64-bit accumulators move as two 32-bit shuffles (the bits, exactly): an i64 row sum.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @sum$i64(%arg0: memref<4096x64xi64>, %arg1: memref<4096xi64>) {
  %c0 = arith.constant 0 : i64
  linalg.fill ins(%c0 : i64) outs(%arg1 : memref<4096xi64>)
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<4096x64xi64>) outs(%arg1 : memref<4096xi64>) {
  ^bb0(%in: i64, %out: i64):
    %0 = arith.addi %in, %out : i64
    linalg.yield %0 : i64
  }
  return
}
// CHECK-LABEL: func.func @sum$i64
// CHECK: gpu.func
// CHECK-SAME: workgroup(%{{.*}} : memref<2xi64, #gpu.address_space<workgroup>>)
// CHECK: %[[LO:.*]] = arith.trunci %[[V:.*]] : i64 to i32
// CHECK-NEXT: %[[LOS:.*]], %{{.*}} = gpu.shuffle xor %[[LO]], %c16_i32, %c32_i32 : i32
// CHECK-NEXT: %[[SH:.*]] = arith.shrui %[[V]], %c32_i64
// CHECK-NEXT: %[[HI:.*]] = arith.trunci %[[SH]] : i64 to i32
// CHECK-NEXT: %[[HIS:.*]], %{{.*}} = gpu.shuffle xor %[[HI]], %c16_i32, %c32_i32 : i32
// CHECK-NEXT: %[[HI64:.*]] = arith.extui %[[HIS]] : i32 to i64
// CHECK-NEXT: %[[UP:.*]] = arith.shli %[[HI64]], %c32_i64
// CHECK-NEXT: %[[LO64:.*]] = arith.extui %[[LOS]] : i32 to i64
// CHECK-NEXT: %[[W:.*]] = arith.ori %[[UP]], %[[LO64]] : i64
// CHECK-NEXT: arith.addi %[[V]], %[[W]] : i64
// CHECK-COUNT-8: gpu.shuffle xor
// CHECK: gpu.barrier
// CHECK-COUNT-2: gpu.shuffle xor
// CHECK-NOT: gpu.shuffle
// CHECK: gpu.return

// -----

// 16-bit values move as the low half of a 32-bit shuffle (bitcast, zero-extend, shuffle,
// truncate, bitcast back: the same bits); the max stays in f16 as before.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @amax$f16(%arg0: memref<4096x256xf16>, %arg1: memref<4096xf16>) {
  %cst = arith.constant 0xFC00 : f16
  linalg.fill ins(%cst : f16) outs(%arg1 : memref<4096xf16>)
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<4096x256xf16>) outs(%arg1 : memref<4096xf16>) {
  ^bb0(%in: f16, %out: f16):
    %0 = arith.maximumf %in, %out : f16
    linalg.yield %0 : f16
  }
  return
}
// CHECK-LABEL: func.func @amax$f16
// CHECK: gpu.func
// CHECK-SAME: workgroup(%{{.*}} : memref<8xf16, #gpu.address_space<workgroup>>)
// CHECK: %[[V:.*]] = memref.load %arg0
// CHECK-NEXT: %[[B:.*]] = arith.bitcast %[[V]] : f16 to i16
// CHECK-NEXT: %[[E:.*]] = arith.extui %[[B]] : i16 to i32
// CHECK-NEXT: %[[S:.*]], %{{.*}} = gpu.shuffle xor %[[E]], %c16_i32, %c32_i32 : i32
// CHECK-NEXT: %[[T:.*]] = arith.trunci %[[S]] : i32 to i16
// CHECK-NEXT: %[[H:.*]] = arith.bitcast %[[T]] : i16 to f16
// CHECK-NEXT: arith.maximumf %[[V]], %[[H]] : f16
// CHECK-COUNT-4: gpu.shuffle xor
// CHECK: gpu.barrier
// CHECK-COUNT-3: gpu.shuffle xor
// CHECK-NOT: gpu.shuffle
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return
