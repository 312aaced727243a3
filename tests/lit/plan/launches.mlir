// RUN: lazymlir-opt %s --target=cuda --stage=plan -split-input-file | FileCheck %s

// gpu-stage input -> lzrt plan: caller buffers, one launch with constant grid/block.
module attributes {gpu.container_module} {
  func.func @relu$basic(%arg0: memref<1024xf32>, %arg1: memref<1024xf32>) {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c256 = arith.constant 256 : index
    gpu.launch_func  @relu$basic_kernel::@relu$basic_kernel blocks in (%c4, %c1, %c1) threads in (%c256, %c1, %c1)  args(%arg0 : memref<1024xf32>, %arg1 : memref<1024xf32>)
    return
  }
  gpu.module @relu$basic_kernel {
    gpu.func @relu$basic_kernel(%arg0: memref<1024xf32>, %arg1: memref<1024xf32>) kernel attributes {known_block_size = array<i32: 256, 1, 1>, known_grid_size = array<i32: 4, 1, 1>} {
      %c256 = arith.constant 256 : index
      %cst = arith.constant 0.000000e+00 : f32
      %block_id_x = gpu.block_id  x
      %thread_id_x = gpu.thread_id  x
      %0 = arith.muli %block_id_x, %c256 : index
      %1 = arith.addi %0, %thread_id_x : index
      %2 = memref.load %arg0[%1] : memref<1024xf32>
      %3 = arith.maximumf %2, %cst : f32
      memref.store %3, %arg1[%1] : memref<1024xf32>
      gpu.return
    }
  }
}
// CHECK-LABEL: func.func @plan()
// CHECK: %[[X:.*]] = "lzrt.arg"() {index = 0 : i64, nbytes = 4096 : i64} : () -> !lzrt.buffer
// CHECK: %[[Y:.*]] = "lzrt.arg"() {index = 1 : i64, nbytes = 4096 : i64} : () -> !lzrt.buffer
// CHECK: "lzrt.launch"(%[[X]], %[[Y]]) {arg_bytes = array<i64: 4096, 4096>, args = [unit, unit], block = array<i64: 256, 1, 1>, grid = array<i64: 4, 1, 1>, kernel = "relu$basic_kernel", module = "relu$basic_kernel", module_index = 0 : i64, shared_bytes = 0 : i64}
// CHECK-NEXT: return

// -----

// A zero fill is a memset on the output before the reduction kernel.
module attributes {gpu.container_module} {
  func.func @sum$all(%arg0: memref<4096xf32>, %arg1: memref<f32>) {
    %c64 = arith.constant 64 : index
    %c1 = arith.constant 1 : index
    %cst = arith.constant 0.000000e+00 : f32
    gpu.memset  %arg1, %cst : memref<f32>, f32
    gpu.launch_func  @sum$all_kernel::@sum$all_kernel blocks in (%c1, %c1, %c1) threads in (%c64, %c1, %c1)  args(%arg0 : memref<4096xf32>, %arg1 : memref<f32>)
    return
  }
  gpu.module @sum$all_kernel {
    gpu.func @sum$all_kernel(%arg0: memref<4096xf32>, %arg1: memref<f32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>, known_grid_size = array<i32: 1, 1, 1>} {
      %c64 = arith.constant 64 : index
      %c1 = arith.constant 1 : index
      %block_id_x = gpu.block_id  x
      %thread_id_x = gpu.thread_id  x
      %0 = arith.muli %block_id_x, %c64 : index
      %1 = arith.addi %0, %thread_id_x : index
      %2 = arith.muli %1, %c64 : index
      %3 = arith.addi %2, %c64 : index
      %4 = memref.load %arg0[%2] : memref<4096xf32>
      %5 = arith.addi %2, %c1 : index
      %6 = scf.for %arg2 = %5 to %3 step %c1 iter_args(%arg3 = %4) -> (f32) {
        %8 = memref.load %arg0[%arg2] : memref<4096xf32>
        %9 = arith.addf %arg3, %8 : f32
        scf.yield %9 : f32
      }
      %7 = memref.atomic_rmw addf %6, %arg1[] : (f32, memref<f32>) -> f32
      gpu.return
    }
  }
}
// CHECK-LABEL: func.func @plan()
// CHECK: %[[IN:.*]] = "lzrt.arg"() {index = 0
// CHECK: %[[OUT:.*]] = "lzrt.arg"() {index = 1 : i64, nbytes = 4 : i64}
// CHECK: "lzrt.memset"(%[[OUT]]) {nbytes = 4 : i64, value = 0 : i64}
// CHECK: "lzrt.launch"(%[[IN]], %[[OUT]]) {arg_bytes = array<i64: 16384, 4>, args = [unit, unit], block = array<i64: 64, 1, 1>, grid = array<i64: 1, 1, 1>
