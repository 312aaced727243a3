// RUN: lazymlir-opt %s --stage=llvm | FileCheck %s

// The nests outlined at the loops stage (lowering/cpu/outline.py, lit
// loops/outline.mlir) at the llvm stage: the temporary recorded as noalias gets
// `llvm.noalias` on its aligned pointer (allocated pointer, aligned pointer,
// offset, size, stride per memref argument; convert-func-to-llvm drops the
// attribute on memref arguments it expands), and only the public function gets
// a C interface.

// lazymlir-stage: loops
module {
  func.func private @nests$nest0(%arg0: memref<64xf32>, %arg1: memref<64xf32>) attributes {lazymlir.noalias_args = [1], llvm.linkage = #llvm.linkage<internal>, passthrough = ["noinline"]} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    scf.for %i = %c0 to %c64 step %c1 {
      %v = memref.load %arg0[%i] : memref<64xf32>
      %w = arith.addf %v, %v : f32
      memref.store %w, %arg1[%i] : memref<64xf32>
    }
    return
  }
  func.func @nests(%arg0: memref<64xf32>, %arg1: memref<64xf32>) {
    %alloc = memref.alloc() {alignment = 64 : i64} : memref<64xf32>
    call @nests$nest0(%arg0, %alloc) : (memref<64xf32>, memref<64xf32>) -> ()
    call @nests$nest0(%arg0, %alloc) : (memref<64xf32>, memref<64xf32>) -> ()
    memref.copy %alloc, %arg1 : memref<64xf32> to memref<64xf32>
    memref.dealloc %alloc : memref<64xf32>
    return
  }
}
// CHECK-LABEL: llvm.func internal @nests$nest0(
// CHECK-SAME: %{{[a-z0-9]*}}: !llvm.ptr, %{{[a-z0-9]*}}: !llvm.ptr, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: !llvm.ptr, %{{[a-z0-9]*}}: !llvm.ptr {llvm.noalias}, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: i64, %{{[a-z0-9]*}}: i64) attributes {passthrough = ["noinline"]
// CHECK: llvm.mlir.constant(64 : index)
// CHECK-LABEL: llvm.func @_mlir_ciface_nests(
// CHECK: llvm.br ^bb1(
// CHECK-COUNT-2: llvm.call @nests$nest0(
// CHECK: llvm.return
// CHECK-NOT: _mlir_ciface_nests$nest
