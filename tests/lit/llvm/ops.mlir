// RUN: lazymlir-opt %s --stage=llvm -split-input-file | FileCheck %s

// Input: `loops` stage output (marker line kept: each case resumes from a dump).
// lazymlir-stage: loops
module {
  func.func @relu$basic(%arg0: memref<4x8xf32>, %arg1: memref<4x8xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    scf.for %arg2 = %c0 to %c4 step %c1 {
      scf.for %arg3 = %c0 to %c8 step %c1 {
        %0 = memref.load %arg0[%arg2, %arg3] : memref<4x8xf32>
        %1 = arith.cmpf ugt, %0, %cst : f32
        %2 = arith.select %1, %0, %cst : f32
        memref.store %2, %arg1[%arg2, %arg3] : memref<4x8xf32>
      }
    }
    return
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_relu$basic(
// CHECK-SAME: %{{.*}}: !llvm.ptr) attributes {llvm.emit_c_interface, tune_cpu = "generic"} {
// CHECK: llvm.br ^bb1(
// CHECK: %[[V:.*]] = llvm.fcmp "ugt" %{{.*}}, %{{.*}} : f32
// CHECK: %[[V_2:.*]] = llvm.select %[[V]], %{{.*}}, %{{.*}} : i1, f32
// CHECK: llvm.store %[[V_2]], %{{.*}} : f32, !llvm.ptr
// CHECK: llvm.return
// The function's body moved into its C interface (lowering/cpu/c_interface.py): no call with
// every descriptor field as an argument, no second function.
// CHECK-NOT: llvm.call @relu$basic
// CHECK-NOT: llvm.func @relu$basic(

// -----

// lazymlir-stage: loops
module {
  func.func @add$broadcast(%arg0: memref<4x8xf32>, %arg1: memref<8xf32>, %arg2: memref<4x8xf32>) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    scf.for %arg3 = %c0 to %c4 step %c1 {
      scf.for %arg4 = %c0 to %c8 step %c1 {
        %0 = memref.load %arg0[%arg3, %arg4] : memref<4x8xf32>
        %1 = memref.load %arg1[%arg4] : memref<8xf32>
        %2 = arith.addf %0, %1 : f32
        memref.store %2, %arg2[%arg3, %arg4] : memref<4x8xf32>
      }
    }
    return
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_add$broadcast(
// CHECK-SAME: %{{.*}}: !llvm.ptr) attributes {llvm.emit_c_interface, tune_cpu = "generic"} {
// CHECK: llvm.br ^bb1(
// CHECK: %[[V:.*]] = llvm.fadd %{{.*}}, %{{.*}} : f32
// CHECK: llvm.store %[[V]], %{{.*}} : f32, !llvm.ptr
// CHECK: llvm.return

// -----

// lazymlir-stage: loops
module {
  func.func @sum$dim(%arg0: memref<4x8xf32>, %arg1: memref<4xf32>) {
    %c8 = arith.constant 8 : index
    %cst = arith.constant 0.000000e+00 : f32
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    scf.for %arg2 = %c0 to %c4 step %c1 {
      memref.store %cst, %arg1[%arg2] : memref<4xf32>
    }
    scf.for %arg2 = %c0 to %c4 step %c1 {
      scf.for %arg3 = %c0 to %c8 step %c1 {
        %0 = memref.load %arg0[%arg2, %arg3] : memref<4x8xf32>
        %1 = memref.load %arg1[%arg2] : memref<4xf32>
        %2 = arith.addf %0, %1 : f32
        memref.store %2, %arg1[%arg2] : memref<4xf32>
      }
    }
    return
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_sum$dim(
// CHECK-SAME: %{{.*}}: !llvm.ptr) attributes {llvm.emit_c_interface, tune_cpu = "generic"} {
// CHECK: llvm.br ^bb1(
// CHECK: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr
// CHECK: %[[V:.*]] = llvm.fadd %{{.*}}, %{{.*}} : f32
// CHECK: llvm.return

// -----

// lazymlir-stage: loops
module {
  func.func @mm$basic(%arg0: memref<4x8xf32>, %arg1: memref<8x16xf32>, %arg2: memref<4x16xf32>) {
    %c8 = arith.constant 8 : index
    %cst = arith.constant 0.000000e+00 : f32
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    scf.for %arg3 = %c0 to %c4 step %c1 {
      scf.for %arg4 = %c0 to %c16 step %c1 {
        memref.store %cst, %arg2[%arg3, %arg4] : memref<4x16xf32>
      }
    }
    scf.for %arg3 = %c0 to %c4 step %c1 {
      scf.for %arg4 = %c0 to %c16 step %c1 {
        scf.for %arg5 = %c0 to %c8 step %c1 {
          %0 = memref.load %arg0[%arg3, %arg5] : memref<4x8xf32>
          %1 = memref.load %arg1[%arg5, %arg4] : memref<8x16xf32>
          %2 = memref.load %arg2[%arg3, %arg4] : memref<4x16xf32>
          %3 = arith.mulf %0, %1 : f32
          %4 = arith.addf %2, %3 : f32
          memref.store %4, %arg2[%arg3, %arg4] : memref<4x16xf32>
        }
      }
    }
    return
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_mm$basic(
// CHECK-SAME: %{{.*}}: !llvm.ptr) attributes {llvm.emit_c_interface, tune_cpu = "generic"} {
// CHECK: llvm.br ^bb1(
// CHECK: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr
// CHECK: %[[V:.*]] = llvm.fmul %{{.*}}, %{{.*}} : f32
// CHECK: %[[V_2:.*]] = llvm.fadd %{{.*}}, %[[V]] : f32
// CHECK: llvm.return
