// RUN: not lazymlir-opt %s --target=cuda --stage=gpu 2>&1 | FileCheck %s

// The gpu stage's contract: kernel bodies hold only ops the nvvm stage can lower. A
// multiplicative atomic (what `prod()` once produced) has no NVVM lowering, so the
// stage that creates the kernel fails, naming the op, instead of the ptx stage failing
// on an unrealized_conversion_cast it cannot explain.
// lazymlir-stage: bufferized
func.func @prod$atomic_mulf(%arg0: memref<256xf32>, %arg1: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c256 = arith.constant 256 : index
  scf.parallel (%i) = (%c0) to (%c256) step (%c1) {
    %v = memref.load %arg0[%i] : memref<256xf32>
    %r = memref.atomic_rmw mulf %v, %arg1[] : (f32, memref<f32>) -> f32
    scf.reduce
  }
  return
}
// CHECK: lowering stage 'gpu' failed (target cuda):
// CHECK-SAME: {{$}}
// CHECK-NEXT: op 'memref.atomic_rmw' of kind 'mulf' in kernel module @prod$atomic_mulf_kernel after stage 'gpu': NVVM has no lowering for it
// CHECK: reproduce with: lazymlir-opt --target=cuda --stage=gpu {{.*}}.mlir
