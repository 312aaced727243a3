// RUN: lazymlir-opt %s --stage=llvm | FileCheck %s

// expm1 and log1p without cancellation (lowering/cpu/small_math.py): convert-math-to-llvm
// lowers them to exp(x) - 1 and log(1 + x) (float32 expm1(1e-10) was 0). And float16
// math is the float32 op rounded once (cpu/bf16_rounding.py HALF_MATH_PIPELINE): left on
// f16, rsqrt became 1 / sqrt with LLVM rounding each step to float16.
// lazymlir-stage: loops
module {
  func.func @expm1$f32(%arg0: memref<4xf32>, %arg1: memref<4xf32>) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %c4 step %c1 {
      %0 = memref.load %arg0[%i] : memref<4xf32>
      %1 = math.expm1 %0 : f32
      memref.store %1, %arg1[%i] : memref<4xf32>
    }
    return
  }
  func.func @log1p$vector(%arg0: memref<8xf32>, %arg1: memref<8xf32>) {
    %c0 = arith.constant 0 : index
    %cst = arith.constant 0.000000e+00 : f32
    %0 = vector.transfer_read %arg0[%c0], %cst {in_bounds = [true]} : memref<8xf32>, vector<8xf32>
    %1 = math.log1p %0 : vector<8xf32>
    vector.transfer_write %1, %arg1[%c0] {in_bounds = [true]} : vector<8xf32>, memref<8xf32>
    return
  }
  func.func @rsqrt$f16(%arg0: memref<4xf16>, %arg1: memref<4xf16>) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %c4 step %c1 {
      %0 = memref.load %arg0[%i] : memref<4xf16>
      %1 = math.rsqrt %0 : f16
      memref.store %1, %arg1[%i] : memref<4xf16>
    }
    return
  }
}
// expm1(x): u = exp(x); x where u == 1, -1 where u - 1 == -1, u where u == inf,
// else (u - 1) * (x / log(u)).
// CHECK-LABEL: llvm.func @_mlir_ciface_expm1$f32(
// CHECK: %[[X:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK: %[[U:.*]] = llvm.intr.exp(%[[X]]) : (f32) -> f32
// CHECK: %[[UM1:.*]] = llvm.fsub %[[U]], %{{.*}} : f32
// CHECK: %[[LOG:.*]] = llvm.intr.log(%[[U]]) : (f32) -> f32
// CHECK: %[[Q:.*]] = llvm.fdiv %[[X]], %[[LOG]] : f32
// CHECK: %[[G:.*]] = llvm.fmul %[[UM1]], %[[Q]] : f32
// CHECK-DAG: %[[INF:.*]] = llvm.fcmp "oeq" %[[U]], %{{.*}} : f32
// CHECK-DAG: %[[M1:.*]] = llvm.fcmp "oeq" %[[UM1]], %{{.*}} : f32
// CHECK-DAG: %[[ONE:.*]] = llvm.fcmp "oeq" %[[U]], %{{.*}} : f32
// CHECK: %[[R1:.*]] = llvm.select %[[INF]], %[[U]], %[[G]] : i1, f32
// CHECK: %[[R2:.*]] = llvm.select %[[M1]], %{{.*}}, %[[R1]] : i1, f32
// CHECK: %[[R3:.*]] = llvm.select %[[ONE]], %[[X]], %[[R2]] : i1, f32
// CHECK: llvm.store %[[R3]], %{{.*}} : f32, !llvm.ptr

// log1p(x): u = 1 + x; x where u == 1, u where u == inf, else log(u) * (x / (u - 1)).
// CHECK-LABEL: llvm.func @_mlir_ciface_log1p$vector(
// CHECK: %[[X:.*]] = llvm.load %{{.*}} : !llvm.ptr -> vector<8xf32>
// CHECK: %[[U:.*]] = llvm.fadd %[[X]], %{{.*}} : vector<8xf32>
// CHECK: %[[LOG:.*]] = llvm.intr.log(%[[U]]) : (vector<8xf32>) -> vector<8xf32>
// CHECK: %[[UM1:.*]] = llvm.fsub %[[U]], %{{.*}} : vector<8xf32>
// CHECK: %[[Q:.*]] = llvm.fdiv %[[X]], %[[UM1]] : vector<8xf32>
// CHECK: %[[G:.*]] = llvm.fmul %[[LOG]], %[[Q]] : vector<8xf32>
// CHECK: llvm.select %{{.*}}, %[[U]], %[[G]] : vector<8xi1>, vector<8xf32>
// CHECK: llvm.select %{{.*}}, %[[X]], %{{.*}} : vector<8xi1>, vector<8xf32>
// CHECK-NOT: math.log1p

// CHECK-LABEL: llvm.func @_mlir_ciface_rsqrt$f16(
// CHECK: %[[H:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f16
// CHECK: %[[W:.*]] = llvm.fpext %[[H]] : f16 to f32
// CHECK: %[[S:.*]] = llvm.intr.sqrt(%[[W]]) : (f32) -> f32
// CHECK: %[[R:.*]] = llvm.fdiv %{{.*}}, %[[S]] : f32
// CHECK: %[[N:.*]] = llvm.fptrunc %[[R]] : f32 to f16
// CHECK: llvm.store %[[N]], %{{.*}} : f16, !llvm.ptr
