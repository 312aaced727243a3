// RUN: lazymlir-opt %s --target=cuda --from bufferized --to ptx --emit=ptx | FileCheck %s

// The f16 tensor-core kernel in PTX (sm_90): WMMA loads from shared memory (leading
// dimensions 40 and 136), m16n16k16 with f32 accumulators, stores to the staging tile;
// workgroup buffers 32-byte aligned (wmma.load/store require it).
func.func @mm$f16(%arg0: memref<64x96xf16>, %arg1: memref<96x80xf16>, %arg2: memref<64x80xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg2 : memref<64x80xf32>)
  linalg.matmul ins(%arg0, %arg1 : memref<64x96xf16>, memref<96x80xf16>) outs(%arg2 : memref<64x80xf32>)
  return
}
// CHECK: .shared .align 32 .b8 {{.*}}[10240];
// CHECK: .shared .align 32 .b8 {{.*}}[8704];
// CHECK: .shared .align 32 .b8 {{.*}}[8192];
// CHECK: bar.sync
// CHECK: mov.b32 %[[LDA:r[0-9]+]], 40;
// CHECK: wmma.load.a.sync.aligned.row.m16n16k16.shared.f16 {{.*}}, %[[LDA]];
// CHECK: mov.b32 %[[LDB:r[0-9]+]], 136;
// CHECK: wmma.load.b.sync.aligned.row.m16n16k16.shared.f16 {{.*}}, %[[LDB]];
// CHECK: wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32
// CHECK: wmma.store.d.sync.aligned.row.m16n16k16.shared.f32
