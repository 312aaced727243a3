// RUN: lazymlir-opt %s --target=cuda --stage=plan -split-input-file | FileCheck %s

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

// -----

// A host copy of a contiguous view (a block of rows) copies a byte range at an offset:
// rows 3..4 of a 5x6 f32 input start 72 bytes in.
module attributes {gpu.container_module} {
  func.func @copy$rows(%arg0: memref<5x6xf32>, %arg1: memref<2x6xf32>) {
    %sv = memref.subview %arg0[3, 0] [2, 6] [1, 1] : memref<5x6xf32> to memref<2x6xf32, strided<[6, 1], offset: 18>>
    memref.copy %sv, %arg1 : memref<2x6xf32, strided<[6, 1], offset: 18>> to memref<2x6xf32>
    return
  }
}
// CHECK-LABEL: func.func @plan()
// CHECK: %[[X:.*]] = "lzrt.arg"() {index = 0 : i64, nbytes = 120 : i64}
// CHECK: %[[Y:.*]] = "lzrt.arg"() {index = 1 : i64, nbytes = 48 : i64}
// CHECK: %[[V:.*]] = "lzrt.view"(%[[X]]) {offset = 72 : i64}
// CHECK: "lzrt.copy"(%[[Y]], %[[V]]) {nbytes = 48 : i64}
