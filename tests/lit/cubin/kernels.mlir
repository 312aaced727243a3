// RUN: lazymlir-opt %s --target=cuda --stage=cubin | FileCheck %s
// REQUIRES: ptxas

// gpu-stage input -> the cubin stage: each gpu.module becomes a gpu.binary holding a cubin
// (an ELF image that ptxas assembled), next to the launch plan the host side became.
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
// CHECK: // lazymlir-stage: cubin
// CHECK: func.func @plan()
// CHECK: "lzrt.launch"
// CHECK-SAME: kernel = "relu$basic_kernel"
// CHECK: gpu.binary @relu$basic_kernel [#gpu.object<#nvvm.target<{{.*}}chip = "sm_90"{{.*}}bin = "\7FELF
// CHECK-NOT: gpu.module
