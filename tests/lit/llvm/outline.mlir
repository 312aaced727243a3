// RUN: lazymlir-opt %s --stage=llvm | FileCheck %s

// lowering/cpu_outline.py: with at least 8 top-level loop nests, each nest of
// a public function becomes an internal noinline function (LLVM's loop passes
// re-analyse a whole function per loop: a GPT graph's `opt` time halved), its
// constant bounds cloned in, and the aligned pointer of a temporary no other
// argument views marked noalias (the graph's own arguments may alias: not marked).

// lazymlir-stage: loops
module {
  func.func @nests(%arg0: memref<64xf32>, %arg1: memref<64xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %tmp = memref.alloc() {alignment = 64 : i64} : memref<64xf32>
    scf.for %i0 = %c0 to %c64 step %c1 {
      %v0 = memref.load %arg0[%i0] : memref<64xf32>
      %w0 = arith.addf %v0, %v0 : f32
      memref.store %w0, %tmp[%i0] : memref<64xf32>
      memref.store %w0, %arg1[%i0] : memref<64xf32>
    }
    scf.for %i1 = %c0 to %c64 step %c1 {
      %v1 = memref.load %arg0[%i1] : memref<64xf32>
      %w1 = arith.addf %v1, %v1 : f32
      memref.store %w1, %tmp[%i1] : memref<64xf32>
      memref.store %w1, %arg1[%i1] : memref<64xf32>
    }
    scf.for %i2 = %c0 to %c64 step %c1 {
      %v2 = memref.load %arg0[%i2] : memref<64xf32>
      %w2 = arith.addf %v2, %v2 : f32
      memref.store %w2, %tmp[%i2] : memref<64xf32>
      memref.store %w2, %arg1[%i2] : memref<64xf32>
    }
    scf.for %i3 = %c0 to %c64 step %c1 {
      %v3 = memref.load %arg0[%i3] : memref<64xf32>
      %w3 = arith.addf %v3, %v3 : f32
      memref.store %w3, %tmp[%i3] : memref<64xf32>
      memref.store %w3, %arg1[%i3] : memref<64xf32>
    }
    scf.for %i4 = %c0 to %c64 step %c1 {
      %v4 = memref.load %arg0[%i4] : memref<64xf32>
      %w4 = arith.addf %v4, %v4 : f32
      memref.store %w4, %tmp[%i4] : memref<64xf32>
      memref.store %w4, %arg1[%i4] : memref<64xf32>
    }
    scf.for %i5 = %c0 to %c64 step %c1 {
      %v5 = memref.load %arg0[%i5] : memref<64xf32>
      %w5 = arith.addf %v5, %v5 : f32
      memref.store %w5, %tmp[%i5] : memref<64xf32>
      memref.store %w5, %arg1[%i5] : memref<64xf32>
    }
    scf.for %i6 = %c0 to %c64 step %c1 {
      %v6 = memref.load %arg0[%i6] : memref<64xf32>
      %w6 = arith.addf %v6, %v6 : f32
      memref.store %w6, %tmp[%i6] : memref<64xf32>
      memref.store %w6, %arg1[%i6] : memref<64xf32>
    }
    scf.for %i7 = %c0 to %c64 step %c1 {
      %v7 = memref.load %arg0[%i7] : memref<64xf32>
      %w7 = arith.addf %v7, %v7 : f32
      memref.store %w7, %tmp[%i7] : memref<64xf32>
      memref.store %w7, %arg1[%i7] : memref<64xf32>
    }
    memref.dealloc %tmp : memref<64xf32>
    return
  }
}
// The temporary (second argument: allocated, aligned pointer, offset, size,
// stride) is noalias; the graph's arguments are not.
// CHECK-LABEL: llvm.func internal @nests$nest0(
// CHECK-SAME: %{{[a-z0-9]*}}: !llvm.ptr, %{{[a-z0-9]*}}: !llvm.ptr, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: !llvm.ptr, %{{[a-z0-9]*}}: !llvm.ptr {llvm.noalias}, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: !llvm.ptr, %{{[a-z0-9]*}}: !llvm.ptr, %{{.*}}) attributes {passthrough = ["noinline"]
// The loop bound is a constant inside, not an argument.
// CHECK: llvm.mlir.constant(64 : index)
// CHECK-LABEL: llvm.func internal @nests$nest7(
// CHECK-LABEL: llvm.func @nests(
// CHECK-COUNT-8: llvm.call @nests$nest{{[0-7]}}(
// CHECK: llvm.return
// CHECK-NOT: _mlir_ciface_nests$nest
