// RUN: lazymlir-opt %s --stage=llvm | FileCheck %s
// RUN: lazymlir-opt %s --stage=llvm | FileCheck %s --check-prefix=NONE

// float -> bfloat16 is eager's integer rounding (lowering/cpu/bf16_rounding.py): add
// 0x7fff plus the lowest kept bit, keep the high half, NaN -> 0xffff. LLVM's own
// `fptrunc float to bfloat` is `vcvtneps2bf16` on CPUs with AVX512-BF16, which flushes
// subnormal inputs to zero (1e-40 -> 0, eager 9.18e-41). bfloat16 arithmetic is float
// arithmetic between an exact widening (a 16-bit shift) and that rounding.
// lazymlir-stage: loops
module {
  func.func @truncf$vector(%arg0: memref<16xf32>, %arg1: memref<16xbf16>) {
    %c0 = arith.constant 0 : index
    %cst = arith.constant 0.000000e+00 : f32
    %0 = vector.transfer_read %arg0[%c0], %cst {in_bounds = [true]} : memref<16xf32>, vector<16xf32>
    %1 = arith.truncf %0 : vector<16xf32> to vector<16xbf16>
    vector.transfer_write %1, %arg1[%c0] {in_bounds = [true]} : vector<16xbf16>, memref<16xbf16>
    return
  }
  func.func @mulf$bf16_then_exp(%arg0: memref<4xbf16>, %arg1: memref<4xbf16>) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %c4 step %c1 {
      %0 = memref.load %arg0[%i] : memref<4xbf16>
      %1 = arith.mulf %0, %0 : bf16
      %2 = math.exp %1 : bf16
      memref.store %2, %arg1[%i] : memref<4xbf16>
    }
    return
  }
  func.func @extf$bf16_to_f64(%arg0: memref<4xbf16>, %arg1: memref<4xf64>) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %c4 step %c1 {
      %0 = memref.load %arg0[%i] : memref<4xbf16>
      %1 = arith.extf %0 : bf16 to f64
      memref.store %1, %arg1[%i] : memref<4xf64>
    }
    return
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_truncf$vector(
// CHECK-DAG: %[[ALL_ONES:.*]] = llvm.mlir.constant(dense<-1> : vector<16xi16>) : vector<16xi16>
// CHECK-DAG: %[[C7FFF:.*]] = llvm.mlir.constant(dense<32767> : vector<16xi32>) : vector<16xi32>
// CHECK-DAG: %[[C1:.*]] = llvm.mlir.constant(dense<1> : vector<16xi32>) : vector<16xi32>
// CHECK-DAG: %[[C16:.*]] = llvm.mlir.constant(dense<16> : vector<16xi32>) : vector<16xi32>
// CHECK: %[[X:.*]] = llvm.load %{{.*}} : !llvm.ptr -> vector<16xf32>
// CHECK: %[[BITS:.*]] = llvm.bitcast %[[X]] : vector<16xf32> to vector<16xi32>
// CHECK: %[[LOW:.*]] = llvm.lshr %[[BITS]], %[[C16]] : vector<16xi32>
// CHECK: %[[ODD:.*]] = llvm.and %[[LOW]], %[[C1]] : vector<16xi32>
// CHECK: %[[BIAS:.*]] = llvm.add %[[ODD]], %[[C7FFF]] : vector<16xi32>
// CHECK: %[[SUM:.*]] = llvm.add %[[BITS]], %[[BIAS]] : vector<16xi32>
// CHECK: %[[HIGH:.*]] = llvm.lshr %[[SUM]], %[[C16]] : vector<16xi32>
// CHECK: %[[HALF:.*]] = llvm.trunc %[[HIGH]] : vector<16xi32> to vector<16xi16>
// CHECK: %[[NAN:.*]] = llvm.fcmp "uno" %[[X]], %[[X]] : vector<16xf32>
// CHECK: %[[PICKED:.*]] = llvm.select %[[NAN]], %[[ALL_ONES]], %[[HALF]] : vector<16xi1>, vector<16xi16>
// CHECK: %[[B:.*]] = llvm.bitcast %[[PICKED]] : vector<16xi16> to vector<16xbf16>
// CHECK: llvm.store %[[B]], %{{.*}} : vector<16xbf16>, !llvm.ptr

// CHECK-LABEL: llvm.func @_mlir_ciface_mulf$bf16_then_exp(
// CHECK: %[[V:.*]] = llvm.load %{{.*}} : !llvm.ptr -> bf16
// CHECK: %[[V16:.*]] = llvm.bitcast %[[V]] : bf16 to i16
// CHECK: %[[V32:.*]] = llvm.zext %[[V16]] : i16 to i32
// CHECK: %[[VBITS:.*]] = llvm.shl %[[V32]], %{{.*}} : i32
// CHECK: %[[VF:.*]] = llvm.bitcast %[[VBITS]] : i32 to f32
// CHECK: %[[SQUARE:.*]] = llvm.fmul %[[VF]], %[[VF]] : f32
// CHECK: llvm.bitcast %[[SQUARE]] : f32 to i32
// CHECK: llvm.fcmp "uno" %[[SQUARE]], %[[SQUARE]] : f32
// CHECK: llvm.intr.exp(%{{.*}}) : (f32) -> f32
// CHECK: %[[OUT:.*]] = llvm.bitcast %{{.*}} : i16 to bf16
// CHECK: llvm.store %[[OUT]], %{{.*}} : bf16, !llvm.ptr

// CHECK-LABEL: llvm.func @_mlir_ciface_extf$bf16_to_f64(
// CHECK: %[[W:.*]] = llvm.load %{{.*}} : !llvm.ptr -> bf16
// CHECK: %[[W16:.*]] = llvm.bitcast %[[W]] : bf16 to i16
// CHECK: %[[W32:.*]] = llvm.zext %[[W16]] : i16 to i32
// CHECK: %[[WBITS:.*]] = llvm.shl %[[W32]], %{{.*}} : i32
// CHECK: %[[WF:.*]] = llvm.bitcast %[[WBITS]] : i32 to f32
// CHECK: %[[WD:.*]] = llvm.fpext %[[WF]] : f32 to f64
// CHECK: llvm.store %[[WD]], %{{.*}} : f64, !llvm.ptr

// Nothing is left for LLVM to round to bfloat16 or to compute on bfloat16 values.
// NONE-NOT: fptrunc
// NONE-NOT: {{fpext.*bf16}}
// NONE-NOT: {{(fadd|fsub|fmul|fdiv|intr\.[a-z]+).*bf16}}
