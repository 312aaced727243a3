// RUN: lazymlir-opt %s --target=cuda --stage=nvvm -split-input-file | FileCheck %s

// bufferized input through gpu and plan to nvvm: math.exp becomes a libdevice call, bound guard
// (301 elements: odd, one per thread; 2 blocks of 256) a conditional branch.
#map = affine_map<(d0) -> (d0)>
func.func @exp$guard(%arg0: memref<301xf32>, %arg1: memref<301xf32>) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : memref<301xf32>) outs(%arg1 : memref<301xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @plan()
// CHECK: "lzrt.launch"{{.*}}block = array<i64: 256, 1, 1>, grid = array<i64: 2, 1, 1>
// CHECK: llvm.func @__nv_expf(f32) -> f32
// CHECK: llvm.func @exp$guard_kernel
// CHECK: llvm.icmp "ult"
// CHECK: llvm.cond_br
// CHECK: llvm.call @__nv_expf
