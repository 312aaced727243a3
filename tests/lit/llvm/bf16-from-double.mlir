// RUN: lazymlir-opt %s --stage=llvm | FileCheck %s

// double -> bfloat16 (a float64 value stored into a bf16 buffer) goes through float32
// (lowering/cpu/bf16_rounding.py): LLVM's direct fptrunc calls __truncdfbf2, which nothing
// the CPU .so links provides; eager also rounds to float first.
// lazymlir-stage: loops
module {
  func.func @store$f64_to_bf16(%arg0: memref<4xf64>, %arg1: memref<4xbf16>) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %c4 step %c1 {
      %0 = memref.load %arg0[%i] : memref<4xf64>
      %1 = arith.truncf %0 : f64 to bf16
      memref.store %1, %arg1[%i] : memref<4xbf16>
    }
    return
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_store$f64_to_bf16(
// CHECK: llvm.br ^bb1(
// CHECK: %[[D:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f64
// CHECK: %[[F:.*]] = llvm.fptrunc %[[D]] : f64 to f32
// CHECK: %[[B:.*]] = llvm.fptrunc %[[F]] : f32 to bf16
// CHECK: llvm.store %[[B]], %{{.*}} : bf16, !llvm.ptr
// CHECK-NOT: f64 to bf16
