// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s

// Matmul: the shared-memory tiled kernel (gpu/kernels/matmul.py). 64x80 fits one 128x128 tile:
// one block of 256 threads, each accumulating 8x8 outputs in registers (64 iter_args of
// the k loop, step 16); A and B tiles go through workgroup memory between two barriers,
// 16 k steps of 64 FMAs each; the zero fill is folded into the final store (no memset).
func.func @matmul$basic(%arg0: memref<64x48xf32>, %arg1: memref<48x80xf32>, %arg2: memref<64x80xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg2 : memref<64x80xf32>)
  linalg.matmul ins(%arg0, %arg1 : memref<64x48xf32>, memref<48x80xf32>) outs(%arg2 : memref<64x80xf32>)
  return
}
// CHECK-LABEL: func.func @matmul$basic
// CHECK-SAME: (%[[A:.*]]: memref<64x48xf32>, %[[B:.*]]: memref<48x80xf32>, %[[C:.*]]: memref<64x80xf32>)
// CHECK-NOT: gpu.memset
// CHECK: gpu.launch_func @[[MOD:.*]]::@{{.*}} blocks in (%c1, %{{.*}}, %{{.*}}) threads in (%c256, %{{.*}}, %{{.*}}) args(%[[A]] : memref<64x48xf32>, %[[B]] : memref<48x80xf32>, %[[C]] : memref<64x80xf32>)
// CHECK: gpu.module @[[MOD]]
// CHECK: workgroup(%[[AS:.*]] : memref<16x128xf32, #gpu.address_space<workgroup>>, %[[BS:.*]] : memref<16x128xf32, #gpu.address_space<workgroup>>)
// CHECK: scf.for %{{.*}} = %c0 to %c48 step %c16 iter_args
// CHECK-SAME: -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)
// CHECK: memref.load %[[A]]
// CHECK: memref.store %{{.*}}, %[[AS]]
// CHECK: memref.load %[[B]]
// CHECK: memref.store %{{.*}}, %[[BS]]
// CHECK: gpu.barrier
// CHECK-COUNT-64: math.fma
// CHECK: gpu.barrier
// CHECK-NEXT: scf.yield
// CHECK: memref.store %{{.*}}, %[[C]]

// -----

// Transpose into a temporary, then a copy: the alloc stays on the host, as a device
// buffer of the plan; memref.copy stays a host-side device copy.
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @transpose$copy(%arg0: memref<8x4xf32>, %arg1: memref<4x8xf32>) {
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
  linalg.transpose ins(%arg0 : memref<8x4xf32>) outs(%alloc : memref<4x8xf32>) permutation = [1, 0]
  memref.copy %alloc, %arg1 : memref<4x8xf32> to memref<4x8xf32>
  return
}
// CHECK-LABEL: func.func @transpose$copy
// CHECK: %[[T:.*]] = memref.alloc() {{.*}} : memref<4x8xf32>
// CHECK: gpu.launch_func @{{.*}} threads in (%c32, %{{.*}}, %{{.*}}) args(%{{.*}} : memref<8x4xf32>, %[[T]] : memref<4x8xf32>)
// CHECK: memref.copy %[[T]], %{{.*}}
