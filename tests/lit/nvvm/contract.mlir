// RUN: not lazymlir-opt %s --target=cuda --stage=nvvm 2>&1 | FileCheck %s

// The nvvm stage's contract: kernel modules hold only llvm/nvvm ops. convert-gpu-to-nvvm
// leaves a `memref.atomic_rmw mulf` (no atomicrmw form) behind an unrealized cast; the
// contract names the leftover at this stage instead of letting gpu-module-to-binary
// fail at `ptx` on a cast it cannot translate. (Plan-stage input, so only nvvm runs.)
// lazymlir-stage: plan
module attributes {gpu.container_module} {
  func.func @plan() {
    %0 = "lzrt.arg"() {index = 0 : i64, nbytes = 1024 : i64} : () -> !lzrt.buffer
    %1 = "lzrt.arg"() {index = 1 : i64, nbytes = 4 : i64} : () -> !lzrt.buffer
    "lzrt.launch"(%0, %1) {arg_bytes = array<i64: 0, 0>, args = [unit, unit], block = array<i64: 256, 1, 1>, grid = array<i64: 1, 1, 1>, kernel = "prod$kernel", module = "prod$kernel", module_index = 0 : i64, shared_bytes = 0 : i64} : (!lzrt.buffer, !lzrt.buffer) -> ()
    return
  }
  gpu.module @prod$kernel {
    gpu.func @prod$kernel(%arg0: memref<256xf32>, %arg1: memref<f32>) kernel {
      %thread_id_x = gpu.thread_id  x
      %0 = memref.load %arg0[%thread_id_x] : memref<256xf32>
      %1 = memref.atomic_rmw mulf %0, %arg1[] : (f32, memref<f32>) -> f32
      gpu.return
    }
  }
}
// CHECK: lowering stage 'nvvm' failed (target cuda):
// CHECK-NEXT: op 'builtin.unrealized_conversion_cast' is left in kernel module @prod$kernel after stage 'nvvm': a conversion did not finish
