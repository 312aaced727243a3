// RUN: lazymlir-opt %s --target=cuda --stage=plan | FileCheck %s

// A kernel argument that is a view with a static offset (`x[:, 1:]`) is passed as its
// base buffer: the kernel gets a bare pointer and adds the offset of its memref type
// itself. Passing `base + offset` (an lzrt.view) applied the offset twice.
// `arg_bytes`: what the kernel may touch from the pointer (offset 1 + 3*31 + 29 + 1
// elements of the input = 496 bytes, all of the 4x30 output).
module attributes {gpu.container_module} {
  func.func @slice$cols(%arg0: memref<4x31xf32>, %arg1: memref<4x30xf32>) {
    %c1 = arith.constant 1 : index
    %c120 = arith.constant 120 : index
    %sv = memref.subview %arg0[0, 1] [4, 30] [1, 1] : memref<4x31xf32> to memref<4x30xf32, strided<[31, 1], offset: 1>>
    gpu.launch_func  @k::@k blocks in (%c1, %c1, %c1) threads in (%c120, %c1, %c1)  args(%sv : memref<4x30xf32, strided<[31, 1], offset: 1>>, %arg1 : memref<4x30xf32>)
    return
  }
  gpu.module @k {
    gpu.func @k(%a: memref<4x30xf32, strided<[31, 1], offset: 1>>, %b: memref<4x30xf32>) kernel {
      %c30 = arith.constant 30 : index
      %t = gpu.thread_id  x
      %i = arith.divui %t, %c30 : index
      %j = arith.remui %t, %c30 : index
      %v = memref.load %a[%i, %j] : memref<4x30xf32, strided<[31, 1], offset: 1>>
      memref.store %v, %b[%i, %j] : memref<4x30xf32>
      gpu.return
    }
  }
}
// CHECK-LABEL: func.func @plan()
// CHECK: %[[X:.*]] = "lzrt.arg"() {index = 0 : i64, nbytes = 496 : i64}
// CHECK: %[[Y:.*]] = "lzrt.arg"() {index = 1 : i64, nbytes = 480 : i64}
// CHECK-NOT: lzrt.view
// CHECK: "lzrt.launch"(%[[X]], %[[Y]]) {arg_bytes = array<i64: 496, 480>, args = [unit, unit]
