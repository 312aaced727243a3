// RUN: lazymlir-opt %s --stage=llvm | FileCheck %s

// double -> bfloat16 and double -> float16 (a float64 value stored into a bf16 or f16
// buffer) go through float32 (lowering/cpu/bf16_rounding.py), as eager rounds: LLVM's
// direct fptrunc to bfloat calls __truncdfbf2, which nothing the CPU .so links provides,
// and its direct fptrunc to half rounds once (1.4901161194e-07 -> 1.79e-07, eager
// 1.19e-07). The float -> bfloat16 step is then the integer rounding (bf16-rounding.mlir).
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
  func.func @store$f64_to_f16(%arg0: memref<4xf64>, %arg1: memref<4xf16>) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %c4 step %c1 {
      %0 = memref.load %arg0[%i] : memref<4xf64>
      %1 = arith.truncf %0 : f64 to f16
      memref.store %1, %arg1[%i] : memref<4xf16>
    }
    return
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_store$f64_to_bf16(
// CHECK: llvm.br ^bb1(
// CHECK: %[[D:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f64
// CHECK: %[[F:.*]] = llvm.fptrunc %[[D]] : f64 to f32
// CHECK: %[[BITS:.*]] = llvm.bitcast %[[F]] : f32 to i32
// CHECK: %[[B:.*]] = llvm.bitcast %{{.*}} : i16 to bf16
// CHECK: llvm.store %[[B]], %{{.*}} : bf16, !llvm.ptr

// CHECK-LABEL: llvm.func @_mlir_ciface_store$f64_to_f16(
// CHECK: %[[D:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f64
// CHECK: %[[F:.*]] = llvm.fptrunc %[[D]] : f64 to f32
// CHECK: %[[H:.*]] = llvm.fptrunc %[[F]] : f32 to f16
// CHECK: llvm.store %[[H]], %{{.*}} : f16, !llvm.ptr
// CHECK-NOT: f64 to bf16
// CHECK-NOT: f64 to f16
