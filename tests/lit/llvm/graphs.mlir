// RUN: lazymlir-opt %s --stage=llvm -split-input-file | FileCheck %s

// Input: `loops` stage output (marker line kept: each case resumes from a dump).
// lazymlir-stage: loops
module {
  func.func @view$transpose(%arg0: memref<4x8xf32>, %arg1: memref<8x4xf32>) {
    %c0 = arith.constant 0 : index
    %c8 = arith.constant 8 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    scf.for %arg2 = %c0 to %c8 step %c1 {
      scf.for %arg3 = %c0 to %c4 step %c1 {
        %0 = memref.load %arg0[%arg3, %arg2] : memref<4x8xf32>
        memref.store %0, %arg1[%arg2, %arg3] : memref<8x4xf32>
      }
    }
    return
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_view$transpose(
// CHECK-SAME: %{{.*}}: !llvm.ptr) attributes {llvm.emit_c_interface, tune_cpu = "generic"} {
// CHECK: llvm.br ^bb1(
// CHECK: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr
// CHECK: llvm.return

// -----

// lazymlir-stage: loops
module {
  func.func @mlp$multi(%arg0: memref<4x8xf32>, %arg1: memref<8x16xf32>, %arg2: memref<16xf32>, %arg3: memref<4xf32>) {
    %c8 = arith.constant 8 : index
    %c16 = arith.constant 16 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c0 = arith.constant 0 : index
    %cst = arith.constant 0.000000e+00 : f32
    %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x16xf32>
    scf.for %arg4 = %c0 to %c4 step %c1 {
      scf.for %arg5 = %c0 to %c16 step %c1 {
        memref.store %cst, %alloc[%arg4, %arg5] : memref<4x16xf32>
      }
    }
    scf.for %arg4 = %c0 to %c4 step %c1 {
      scf.for %arg5 = %c0 to %c16 step %c1 {
        scf.for %arg6 = %c0 to %c8 step %c1 {
          %0 = memref.load %arg0[%arg4, %arg6] : memref<4x8xf32>
          %1 = memref.load %arg1[%arg6, %arg5] : memref<8x16xf32>
          %2 = memref.load %alloc[%arg4, %arg5] : memref<4x16xf32>
          %3 = arith.mulf %0, %1 : f32
          %4 = arith.addf %2, %3 : f32
          memref.store %4, %alloc[%arg4, %arg5] : memref<4x16xf32>
        }
      }
    }
    scf.for %arg4 = %c0 to %c4 step %c1 {
      memref.store %cst, %arg3[%arg4] : memref<4xf32>
    }
    scf.for %arg4 = %c0 to %c4 step %c1 {
      scf.for %arg5 = %c0 to %c16 step %c1 {
        %0 = memref.load %alloc[%arg4, %arg5] : memref<4x16xf32>
        %1 = memref.load %arg2[%arg5] : memref<16xf32>
        %2 = memref.load %arg3[%arg4] : memref<4xf32>
        %3 = arith.addf %0, %1 : f32
        %4 = arith.cmpf ugt, %3, %cst : f32
        %5 = arith.select %4, %3, %cst : f32
        %6 = arith.addf %5, %2 : f32
        memref.store %6, %arg3[%arg4] : memref<4xf32>
      }
    }
    memref.dealloc %alloc : memref<4x16xf32>
    return
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_mlp$multi(
// CHECK-SAME: %{{.*}}: !llvm.ptr) attributes {llvm.emit_c_interface, tune_cpu = "generic"} {
// CHECK: llvm.br ^bb1(
// Temporaries come from lazymlir/targets/cpu_alloc.py's caching allocator, not malloc/free.
// CHECK-NOT: @malloc
// CHECK: %[[V:.*]] = llvm.call @_mlir_memref_to_llvm_alloc(%{{.*}}) : (i64) -> !llvm.ptr
// CHECK: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr
// CHECK: %[[V_2:.*]] = llvm.fmul %{{.*}}, %{{.*}} : f32
// CHECK: %[[V_3:.*]] = llvm.fadd %{{.*}}, %[[V_2]] : f32
// CHECK: %[[V_4:.*]] = llvm.fcmp "ugt" %{{.*}}, %{{.*}} : f32
// CHECK: %[[V_5:.*]] = llvm.select %[[V_4]], %{{.*}}, %{{.*}} : i1, f32
// CHECK: llvm.call @_mlir_memref_to_llvm_free(%{{.*}}) : (!llvm.ptr) -> ()
// CHECK: llvm.return
