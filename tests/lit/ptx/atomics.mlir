// RUN: lazymlir-opt %s --target=cuda --stage=ptx --emit=ptx | FileCheck %s

// Reduction atomics are relaxed at device scope: the float max CAS loop is
// `atom.relaxed.gpu` (it was `atom.acq_rel.sys`), the add a plain `atom.global.add`.
module attributes {gpu.container_module} {
  func.func @f(%arg0: memref<4096xf32>, %arg1: memref<f32>) {
    %c64 = arith.constant 64 : index
    %c1 = arith.constant 1 : index
    gpu.launch_func  @k::@k blocks in (%c1, %c1, %c1) threads in (%c64, %c1, %c1)  args(%arg0 : memref<4096xf32>, %arg1 : memref<f32>)
    return
  }
  gpu.module @k {
    gpu.func @k(%arg0: memref<4096xf32>, %arg1: memref<f32>) kernel {
      %t = gpu.thread_id  x
      %4 = memref.load %arg0[%t] : memref<4096xf32>
      %7 = memref.atomic_rmw maximumf %4, %arg1[] : (f32, memref<f32>) -> f32
      %8 = memref.atomic_rmw addf %4, %arg1[] : (f32, memref<f32>) -> f32
      gpu.return
    }
  }
}
// CHECK: .visible .entry k(
// CHECK: max.NaN.f32
// CHECK-NEXT: atom.relaxed.gpu.global.cas.b32
// CHECK: atom.global.add.f32
// CHECK-NOT: .sys
