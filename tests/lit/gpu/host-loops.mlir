// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s

// lowering/gpu/kernels/host_loops.py: TMTensor scans/scatters leave serial scf.for nests on
// the host. A loop whose iterations touch disjoint slices of every written buffer
// becomes the kernel's parallel dim; the serial loop runs inside each thread.

// A scan along the last dim (cumsum(x, 1) as tm-tensor-to-loops writes it): one
// thread per row, the scan loop inside the kernel.
// lazymlir-stage: bufferized
module {
  func.func @main(%arg0: memref<8x16xf32>, %arg1: memref<8x16xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %c16 = arith.constant 16 : index
    %out = memref.alloc() : memref<8x16xf32>
    scf.for %i = %c0 to %c8 step %c1 {
      scf.for %j = %c0 to %c16 step %c1 {
        %first = arith.cmpi eq, %j, %c0 : index
        %v = memref.load %arg0[%i, %j] : memref<8x16xf32>
        scf.if %first {
          memref.store %v, %out[%i, %j] : memref<8x16xf32>
        } else {
          %jm = arith.subi %j, %c1 : index
          %p = memref.load %out[%i, %jm] : memref<8x16xf32>
          %s = arith.addf %p, %v : f32
          memref.store %s, %out[%i, %j] : memref<8x16xf32>
        }
      }
    }
    memref.copy %out, %arg1 : memref<8x16xf32> to memref<8x16xf32>
    return
  }
}
// CHECK-LABEL: func.func @main(
// CHECK-NOT: scf.for
// CHECK: gpu.launch_func
// CHECK-NOT: scf.for
// CHECK: return
// CHECK: gpu.func @main_kernel(
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step
// CHECK: arith.addf

// -----

// The same scan along dim 0: the independent loop is the inner one; it is moved
// outermost (one thread per column).
// lazymlir-stage: bufferized
module {
  func.func @main(%arg0: memref<16x8xf32>, %arg1: memref<16x8xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %c16 = arith.constant 16 : index
    %out = memref.alloc() : memref<16x8xf32>
    scf.for %i = %c0 to %c16 step %c1 {
      scf.for %j = %c0 to %c8 step %c1 {
        %first = arith.cmpi eq, %i, %c0 : index
        %v = memref.load %arg0[%i, %j] : memref<16x8xf32>
        scf.if %first {
          memref.store %v, %out[%i, %j] : memref<16x8xf32>
        } else {
          %im = arith.subi %i, %c1 : index
          %p = memref.load %out[%im, %j] : memref<16x8xf32>
          %s = arith.addf %p, %v : f32
          memref.store %s, %out[%i, %j] : memref<16x8xf32>
        }
      }
    }
    memref.copy %out, %arg1 : memref<16x8xf32> to memref<16x8xf32>
    return
  }
}
// CHECK-LABEL: func.func @main(
// CHECK-NOT: scf.for
// CHECK: gpu.launch_func
// CHECK: gpu.func @main_kernel(
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step
// CHECK: arith.addf
