// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s

// An elementwise op with a broadcast operand: one kernel, 4 consecutive elements per
// thread (rows of 100 are 25 groups of 4: gpu/kernels/vectorize.py), the innermost dim varies
// fastest, 1600 threads = 7 blocks x 256 threads (the last one guarded).
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @relu$broadcast(%arg0: memref<64x100xf32>, %arg1: memref<100xf32>, %arg2: memref<64x100xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : memref<64x100xf32>, memref<100xf32>) outs(%arg2 : memref<64x100xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %0 = arith.addf %in, %in_0 : f32
    %1 = arith.maximumf %0, %cst : f32
    linalg.yield %1 : f32
  }
  return
}
// CHECK-LABEL: func.func @relu$broadcast
// CHECK-SAME: (%[[X:.*]]: memref<64x100xf32>, %[[B:.*]]: memref<100xf32>, %[[OUT:.*]]: memref<64x100xf32>)
// CHECK-DAG: %[[C7:.*]] = arith.constant 7 : index
// CHECK-DAG: %[[C256:.*]] = arith.constant 256 : index
// CHECK: gpu.launch_func @[[MOD:.*]]::@[[KER:.*]] blocks in (%[[C7]], %{{.*}}, %{{.*}}) threads in (%[[C256]], %{{.*}}, %{{.*}}) args(%[[X]] : memref<64x100xf32>, %[[B]] : memref<100xf32>, %[[OUT]] : memref<64x100xf32>)
// CHECK-NEXT: return
// CHECK: gpu.module @[[MOD]]
// CHECK: gpu.func @[[KER]]({{.*}}) kernel
// CHECK-DAG: gpu.block_id x
// CHECK-DAG: gpu.thread_id x
// CHECK: arith.cmpi ult, %{{.*}}, %c1600
// CHECK: arith.remui %{{.*}}, %c25
// CHECK: vector.load %arg0{{.*}} vector<4xf32>
// CHECK: vector.load %arg1{{.*}} vector<4xf32>
// CHECK-COUNT-4: arith.maximumf
// CHECK: vector.store {{.*}}, %arg2

// -----

// A size that is not a multiple of the block: grid rounds up, a bound guard skips the tail.
// (301 is odd: one element per thread.)
#map = affine_map<(d0) -> (d0)>
func.func @exp$tail(%arg0: memref<301xf32>, %arg1: memref<301xf32>) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : memref<301xf32>) outs(%arg1 : memref<301xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @exp$tail
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
// CHECK: gpu.launch_func @{{.*}} blocks in (%[[C2]], %{{.*}}, %{{.*}}) threads in (%c256
// CHECK: gpu.func
// CHECK: %[[LIN:.*]] = arith.addi
// CHECK: arith.cmpi ult, %[[LIN]], %c301
// CHECK: scf.if
// CHECK: math.exp

// -----

// A zero fill becomes a memset on the host (no kernel); a non-zero fill is a kernel
// (4 elements per thread: 2 threads).
func.func @fill$memset(%arg0: memref<8x8xf32>, %arg1: memref<8xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %one = arith.constant 1.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%arg0 : memref<8x8xf32>)
  linalg.fill ins(%one : f32) outs(%arg1 : memref<8xf32>)
  return
}
// CHECK-LABEL: func.func @fill$memset
// CHECK: gpu.memset %{{.*}}, %{{.*}} : memref<8x8xf32>, f32
// CHECK: gpu.launch_func
// CHECK-SAME: threads in (%c2
// CHECK-NEXT: return

// -----

// `x ** 3` and `x ** n` (math.fpowi with torch's i64 exponents) are expanded in the gpu
// stage: the constant exponent into multiplies, the other into powf(x, float(n)). Left to
// convert-gpu-to-nvvm they call libdevice's __nv_powif(float, i32) with an i64 argument.
#map = affine_map<(d0) -> (d0)>
func.func @pow$int(%arg0: memref<301xf32>, %arg1: memref<301xi64>, %arg2: memref<301xf32>) {
  %c3 = arith.constant 3 : i64
  linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%arg0, %arg1 : memref<301xf32>, memref<301xi64>) outs(%arg2 : memref<301xf32>) {
  ^bb0(%in: f32, %n: i64, %out: f32):
    %0 = math.fpowi %in, %c3 : f32, i64
    %1 = math.fpowi %0, %n : f32, i64
    linalg.yield %1 : f32
  }
  return
}
// CHECK-LABEL: func.func @pow$int
// CHECK: gpu.func @{{.*}} kernel
// CHECK-NOT: math.fpowi
// CHECK: %[[SQ:.*]] = arith.mulf %[[X:.*]], %[[X]] : f32
// CHECK: %[[CUBE:.*]] = arith.mulf %[[SQ]], %[[X]] : f32
// CHECK: %[[N:.*]] = arith.sitofp %{{.*}} : i64 to f32
// CHECK: math.powf %[[CUBE]], %[[N]] : f32
// CHECK-NOT: math.fpowi
