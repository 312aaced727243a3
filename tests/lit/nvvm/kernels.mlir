// RUN: lazymlir-opt %s --target=cuda --stage=nvvm -split-input-file | FileCheck %s

// gpu-stage input (plan stage runs first): kernel bodies become NVVM/LLVM with bare-pointer
// arguments; the host side is the lzrt plan.
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
// CHECK: "lzrt.launch"{{.*}}kernel = "relu$basic_kernel", module = "relu$basic_kernel"
// CHECK: gpu.module @relu$basic_kernel [#nvvm.target<O = 3, chip = "sm_90"
// Buffers the plan passes at offset 0 are 16-byte aligned (gpu.kernels.vectorize.align_kernel_params).
// CHECK: llvm.func @relu$basic_kernel(%[[IN:[^:]*]]: !llvm.ptr {llvm.align = 16 : i64}, %[[OUT:[^:]*]]: !llvm.ptr {llvm.align = 16 : i64}) attributes {gpu.kernel
// CHECK-DAG: nvvm.read.ptx.sreg.ctaid.x
// CHECK-DAG: nvvm.read.ptx.sreg.tid.x
// CHECK: llvm.getelementptr {{.*}}%[[IN]][
// CHECK: llvm.intr.maximum
// CHECK: llvm.store
// CHECK-NOT: memref.

// -----

// The two-level reduction: scf.for becomes branches, memref.atomic_rmw an llvm.atomicrmw.
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
// CHECK: "lzrt.memset"
// CHECK: gpu.module @sum$all_kernel
// CHECK: llvm.func @sum$all_kernel(%{{[^:]*}}: !llvm.ptr {llvm.align = 16 : i64}, %[[OUT:[^:]*]]: !llvm.ptr {llvm.align = 16 : i64})
// CHECK: llvm.cond_br
// CHECK: llvm.fadd
// CHECK: llvm.atomicrmw fadd %[[OUT]]
