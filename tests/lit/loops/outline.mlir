// RUN: lazymlir-opt %s --stage=loops | FileCheck %s

// lowering/cpu/outline.py, at the end of the loops stage: with at least 8
// top-level loop nests, each nest of a public function (scf.for, and scf.forall
// before it becomes an OpenMP region) becomes a private noinline function (LLVM's
// loop passes re-analyse a whole function per loop: a GPT graph's `opt` time
// halved), its constant bounds cloned in, a temporary no other argument views
// recorded as noalias (the graph's own arguments may alias: not recorded), and
// nests that are the same function once (a model's layers repeat their nests).

// lazymlir-stage: bufferized
module {
  func.func @nests(%arg0: memref<64xf32>, %arg1: memref<64xf32>, %arg2: memref<65536xf32>, %arg3: memref<65536xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c1024 = arith.constant 1024 : index
    %tmp = memref.alloc() {alignment = 64 : i64} : memref<64xf32>
    scf.for %i0 = %c0 to %c64 step %c1 {
      %v0 = memref.load %arg0[%i0] : memref<64xf32>
      %w0 = arith.addf %v0, %v0 : f32
      memref.store %w0, %tmp[%i0] : memref<64xf32>
    }
    scf.for %i1 = %c0 to %c64 step %c1 {
      %v1 = memref.load %arg0[%i1] : memref<64xf32>
      %w1 = arith.addf %v1, %v1 : f32
      memref.store %w1, %tmp[%i1] : memref<64xf32>
    }
    scf.for %i2 = %c0 to %c64 step %c1 {
      %v2 = memref.load %arg0[%i2] : memref<64xf32>
      %w2 = arith.addf %v2, %v2 : f32
      memref.store %w2, %tmp[%i2] : memref<64xf32>
    }
    scf.for %i3 = %c0 to %c64 step %c1 {
      %v3 = memref.load %arg0[%i3] : memref<64xf32>
      %w3 = arith.addf %v3, %v3 : f32
      memref.store %w3, %tmp[%i3] : memref<64xf32>
    }
    scf.for %i4 = %c0 to %c64 step %c1 {
      %v4 = memref.load %arg0[%i4] : memref<64xf32>
      %w4 = arith.addf %v4, %v4 : f32
      memref.store %w4, %tmp[%i4] : memref<64xf32>
    }
    scf.for %i5 = %c0 to %c64 step %c1 {
      %v5 = memref.load %arg0[%i5] : memref<64xf32>
      %w5 = arith.addf %v5, %v5 : f32
      memref.store %w5, %tmp[%i5] : memref<64xf32>
    }
    scf.for %i6 = %c0 to %c64 step %c1 {
      %v6 = memref.load %arg0[%i6] : memref<64xf32>
      %w6 = arith.mulf %v6, %v6 : f32
      memref.store %w6, %tmp[%i6] : memref<64xf32>
    }
    scf.for %i7 = %c0 to %c64 step %c1 {
      %v7 = memref.load %arg0[%i7] : memref<64xf32>
      %w7 = arith.subf %v7, %v7 : f32
      memref.store %w7, %tmp[%i7] : memref<64xf32>
    }
    scf.forall (%p) in (64) {
      %r = arith.muli %p, %c1024 : index
      scf.for %j = %c0 to %c1024 step %c1 {
        %q = arith.addi %r, %j : index
        %a = memref.load %arg2[%q] : memref<65536xf32>
        %b = arith.addf %a, %a : f32
        memref.store %b, %arg3[%q] : memref<65536xf32>
      }
    }
    memref.copy %tmp, %arg1 : memref<64xf32> to memref<64xf32>
    return
  }
}
// Six identical nests are one function; the mulf and subf nests and the parallel
// nest are three more. The temporary (argument 1 of the nests) is noalias.
// CHECK-LABEL: func.func private @nests$nest0(
// CHECK-SAME: lazymlir.noalias_args = [1]
// CHECK-SAME: passthrough = ["noinline"]
// CHECK: arith.constant 64 : index
// CHECK: arith.addf
// CHECK-NOT: func.func private @nests$nest{{[1-5]}}(
// CHECK-LABEL: func.func private @nests$nest6(
// CHECK: arith.mulf
// CHECK-LABEL: func.func private @nests$nest7(
// CHECK: arith.subf
// CHECK-LABEL: func.func private @nests$nest8(
// CHECK: omp.parallel
// CHECK-LABEL: func.func @nests(
// CHECK-COUNT-6: call @nests$nest0(%arg0, %alloc
// CHECK: call @nests$nest6(
// CHECK: call @nests$nest7(
// CHECK: call @nests$nest8(
// CHECK-NOT: omp.parallel
// CHECK: return
