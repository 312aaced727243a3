// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s

// A host copy out of a strided view (`x[:, 1:]` copied whole) is no byte range the
// launch plan can copy: it becomes a kernel (gpu.stages.host_copies_to_linalg).
func.func @copy$strided(%arg0: memref<4x31xf32>, %arg1: memref<4x30xf32>) {
  %sv = memref.subview %arg0[0, 1] [4, 30] [1, 1] : memref<4x31xf32> to memref<4x30xf32, strided<[31, 1], offset: 1>>
  memref.copy %sv, %arg1 : memref<4x30xf32, strided<[31, 1], offset: 1>> to memref<4x30xf32>
  return
}
// CHECK-LABEL: func.func @copy$strided
// CHECK-NOT: memref.copy
// CHECK: gpu.launch_func @copy$strided_kernel::@copy$strided_kernel
// CHECK: gpu.func @copy$strided_kernel
// CHECK: memref.load {{.*}} : memref<4x30xf32, strided<[31, 1], offset: 1>>

// -----

// A block of rows is one contiguous byte range: it stays a host copy (the plan copies
// at an offset; tests/lit/plan/views.mlir).
func.func @copy$rows(%arg0: memref<5x6xf32>, %arg1: memref<2x6xf32>) {
  %sv = memref.subview %arg0[3, 0] [2, 6] [1, 1] : memref<5x6xf32> to memref<2x6xf32, strided<[6, 1], offset: 18>>
  memref.copy %sv, %arg1 : memref<2x6xf32, strided<[6, 1], offset: 18>> to memref<2x6xf32>
  return
}
// CHECK-LABEL: func.func @copy$rows
// CHECK: memref.copy
// CHECK-NOT: gpu.launch_func

// -----

// A constant copied to an output (`torch.zeros(2, 3) + 1` folds to one): the plan
// cannot upload data, so a kernel reads the global, which moves into its gpu.module
// and leaves the host (symbol-dce).
memref.global "private" constant @__constant_2x3xf32 : memref<2x3xf32> = dense<1.000000e+00>
func.func @copy$constant(%arg0: memref<2x3xf32>) {
  %0 = memref.get_global @__constant_2x3xf32 : memref<2x3xf32>
  memref.copy %0, %arg0 : memref<2x3xf32> to memref<2x3xf32>
  return
}
// CHECK-NOT: memref.global "private" constant @__constant_2x3xf32 : memref<2x3xf32> = dense<1.000000e+00>
// CHECK-LABEL: func.func @copy$constant
// CHECK-NOT: memref.get_global
// CHECK: gpu.launch_func
// CHECK: gpu.module
// CHECK: memref.get_global @__constant_2x3xf32
// CHECK: memref.global "private" constant @__constant_2x3xf32

