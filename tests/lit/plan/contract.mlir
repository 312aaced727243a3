// RUN: not lazymlir-opt %s --target=cuda --stage=plan 2>&1 | FileCheck %s

// The plan stage re-checks the kernels it carries: a gpu-stage file (handwritten or
// from another tool) with an atomic NVVM cannot lower fails here, not at ptx.
module attributes {gpu.container_module} {
  func.func @main(%arg0: memref<256xf32>, %arg1: memref<f32>) {
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    gpu.launch_func  @prod$kernel::@prod$kernel blocks in (%c1, %c1, %c1) threads in (%c256, %c1, %c1)  args(%arg0 : memref<256xf32>, %arg1 : memref<f32>)
    return
  }
  gpu.module @prod$kernel {
    gpu.func @prod$kernel(%arg0: memref<256xf32>, %arg1: memref<f32>) kernel {
      %i = gpu.thread_id  x
      %v = memref.load %arg0[%i] : memref<256xf32>
      %r = memref.atomic_rmw mulf %v, %arg1[] : (f32, memref<f32>) -> f32
      gpu.return
    }
  }
}
// CHECK: lowering stage 'plan' failed (target cuda):
// CHECK-NEXT: op 'memref.atomic_rmw' of kind 'mulf' in kernel module @prod$kernel after stage 'plan'
