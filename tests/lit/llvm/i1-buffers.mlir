// RUN: lazymlir-opt %s --to=llvm | FileCheck %s

// A bool buffer written and read through memref.store/load (as in the loops TMTensor ops
// become) goes all the way to LLVM: stored as an i8 (zext), loaded and truncated. Without
// the i1-as-i8 rewrite (lowering/bufferize/i1_storage.py) LLVM 22's memref lowering fails here.
// Input: `linalg` stage output; every stage up to `llvm` runs.
// lazymlir-stage: linalg
module {
  func.func @loop$load_store(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4xi1>
    %1 = scf.for %i = %c0 to %c4 step %c1 iter_args(%t = %0) -> (tensor<4xi1>) {
      %x = tensor.extract %arg0[%i] : tensor<4xf32>
      %b = arith.cmpf ogt, %x, %cst : f32
      %t2 = tensor.insert %b into %t[%i] : tensor<4xi1>
      scf.yield %t2 : tensor<4xi1>
    }
    %2 = tensor.empty() : tensor<4xf32>
    %3 = scf.for %i = %c0 to %c4 step %c1 iter_args(%t = %2) -> (tensor<4xf32>) {
      %b = tensor.extract %1[%i] : tensor<4xi1>
      %x = tensor.extract %arg0[%i] : tensor<4xf32>
      %y = arith.select %b, %x, %cst : f32
      %t2 = tensor.insert %y into %t[%i] : tensor<4xf32>
      scf.yield %t2 : tensor<4xf32>
    }
    return %3 : tensor<4xf32>
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_loop$load_store(
// CHECK: llvm.br ^bb1(
// CHECK: %[[BYTE:.*]] = llvm.zext %{{.*}} : i1 to i8
// CHECK: llvm.store %[[BYTE]], %{{.*}} : i8, !llvm.ptr
// CHECK: %[[LOADED:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i8
// CHECK: llvm.trunc %[[LOADED]] : i8 to i1
// CHECK-NOT: !llvm.ptr -> i1
