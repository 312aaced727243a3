// RUN: lazymlir-opt %s --target=cuda --stage=nvvm | FileCheck %s
// RUN: lazymlir-opt %s --target=cuda --to=ptx --emit=ptx | FileCheck %s --check-prefix=PTX

// Kernel pointer arguments get `llvm.align = 16` (PTX `.ptr .align 16`) where the plan
// passes them at a multiple of 16 bytes from a buffer's start (lowering/gpu/kernels/vectorize.py:
// buffers are 256-byte aligned). A view 4 bytes in (the lzrt.view at offset 4) gets no
// claim; one 32 bytes in does; the kernel launched twice keeps the claim only for the
// argument aligned at both launches. Without the claim a 16-byte vector.load is not
// provably aligned and NVPTX splits it into 4-byte loads (correct at any offset).
// lazymlir-stage: plan
module attributes {gpu.container_module} {
  func.func @plan() {
    %0 = "lzrt.arg"() {index = 0 : i64, nbytes = 1040 : i64} : () -> !lzrt.buffer
    %1 = "lzrt.arg"() {index = 1 : i64, nbytes = 1024 : i64} : () -> !lzrt.buffer
    %v4 = "lzrt.view"(%0) {offset = 4 : i64} : (!lzrt.buffer) -> !lzrt.buffer
    %v32 = "lzrt.view"(%0) {offset = 32 : i64} : (!lzrt.buffer) -> !lzrt.buffer
    "lzrt.launch"(%v4, %1) {arg_bytes = array<i64: 1024, 1024>, args = [unit, unit], block = array<i64: 256, 1, 1>, grid = array<i64: 1, 1, 1>, kernel = "k", module = "k", module_index = 0 : i64, shared_bytes = 0 : i64} : (!lzrt.buffer, !lzrt.buffer) -> ()
    "lzrt.launch"(%v32, %1) {arg_bytes = array<i64: 1024, 1024>, args = [unit, unit], block = array<i64: 256, 1, 1>, grid = array<i64: 1, 1, 1>, kernel = "k2", module = "k2", module_index = 1 : i64, shared_bytes = 0 : i64} : (!lzrt.buffer, !lzrt.buffer) -> ()
    "lzrt.launch"(%0, %1) {arg_bytes = array<i64: 1024, 1024>, args = [unit, unit], block = array<i64: 256, 1, 1>, grid = array<i64: 1, 1, 1>, kernel = "k2", module = "k2", module_index = 1 : i64, shared_bytes = 0 : i64} : (!lzrt.buffer, !lzrt.buffer) -> ()
    "lzrt.launch"(%0, %v4) {arg_bytes = array<i64: 1024, 1024>, args = [unit, unit], block = array<i64: 256, 1, 1>, grid = array<i64: 1, 1, 1>, kernel = "k3", module = "k3", module_index = 2 : i64, shared_bytes = 0 : i64} : (!lzrt.buffer, !lzrt.buffer) -> ()
    "lzrt.launch"(%0, %1) {arg_bytes = array<i64: 1024, 1024>, args = [unit, unit], block = array<i64: 256, 1, 1>, grid = array<i64: 1, 1, 1>, kernel = "k3", module = "k3", module_index = 2 : i64, shared_bytes = 0 : i64} : (!lzrt.buffer, !lzrt.buffer) -> ()
    return
  }
  gpu.module @k {
    gpu.func @k(%arg0: memref<256xf32>, %arg1: memref<256xf32>) kernel {
      %c4 = arith.constant 4 : index
      %t = gpu.thread_id  x
      %i = arith.muli %t, %c4 : index
      %0 = vector.load %arg0[%i] : memref<256xf32>, vector<4xf32>
      vector.store %0, %arg1[%i] : memref<256xf32>, vector<4xf32>
      gpu.return
    }
  }
  gpu.module @k2 {
    gpu.func @k2(%arg0: memref<256xf32>, %arg1: memref<256xf32>) kernel {
      %t = gpu.thread_id  x
      %0 = memref.load %arg0[%t] : memref<256xf32>
      memref.store %0, %arg1[%t] : memref<256xf32>
      gpu.return
    }
  }
  gpu.module @k3 {
    gpu.func @k3(%arg0: memref<256xf32>, %arg1: memref<256xf32>) kernel {
      %t = gpu.thread_id  x
      %0 = memref.load %arg0[%t] : memref<256xf32>
      memref.store %0, %arg1[%t] : memref<256xf32>
      gpu.return
    }
  }
}
// CHECK: gpu.module @k
// CHECK: llvm.func @k(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr {llvm.align = 16 : i64})
// CHECK: gpu.module @k2
// CHECK: llvm.func @k2(%{{.*}}: !llvm.ptr {llvm.align = 16 : i64}, %{{.*}}: !llvm.ptr {llvm.align = 16 : i64})
// CHECK: gpu.module @k3
// CHECK: llvm.func @k3(%{{.*}}: !llvm.ptr {llvm.align = 16 : i64}, %{{.*}}: !llvm.ptr)
// PTX-LABEL: .entry k(
// PTX: .param .u64 .ptr .align 1 k_param_0,
// PTX: .param .u64 .ptr .align 16 k_param_1
// PTX-NOT: ld.global.v4
// PTX: ld.global.b32
// PTX-NOT: ld.global.v4
// PTX: st.global.v4.b32
// PTX: ret;
