// RUN: lazymlir-opt %s --stage=llvm | FileCheck %s

// A run-time assert of torch-mlir's lowerings (here reciprocal's "tensor with zero
// element") sets the module's flag instead of calling abort(), and the module gets
// the flag's getter, which lazymlir/targets/cpu.py calls after a run
// (lowering/cpu/asserts.py).

// lazymlir-stage: loops
module {
  func.func @main(%arg0: memref<4xf32>, %arg1: memref<4xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %zero = arith.constant 0.0 : f32
    scf.for %i = %c0 to %c4 step %c1 {
      %v = memref.load %arg0[%i] : memref<4xf32>
      %ok = arith.cmpf one, %v, %zero : f32
      cf.assert %ok, "unimplemented: tensor with zero element"
      memref.store %v, %arg1[%i] : memref<4xf32>
    }
    return
  }
}
// CHECK: llvm.mlir.global weak hidden @lazymlir_assert_flag(0 : i32)
// CHECK-LABEL: llvm.func @_mlir_ciface_main(
// CHECK-NOT: abort
// CHECK: %[[FLAG:.*]] = llvm.mlir.addressof @lazymlir_assert_flag
// CHECK: llvm.atomicrmw _or %[[FLAG]]
// CHECK-LABEL: llvm.func @lazymlir_failed_asserts() -> i32
// CHECK: llvm.atomicrmw xchg
// CHECK-NOT: abort
