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

// -----

// An accumulating scatter (scatter_add / index_put(accumulate=True) as tm-tensor-to-loops
// writes it): one loop over the updates, each reading, adding to and writing back the
// element its indices name. Two updates may name one element, so the loop is not
// independent; the read-add-write becomes one atomic add and the loop one thread per update.
// lazymlir-stage: bufferized
module {
  func.func @main(%upd: memref<40xf32>, %idx: memref<40x2xi64>, %out: memref<8x20xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c40 = arith.constant 40 : index
    scf.for %k = %c0 to %c40 step %c1 {
      %u = memref.load %upd[%k] : memref<40xf32>
      %r64 = memref.load %idx[%k, %c0] : memref<40x2xi64>
      %r = arith.index_cast %r64 : i64 to index
      %c64 = memref.load %idx[%k, %c1] : memref<40x2xi64>
      %c = arith.index_cast %c64 : i64 to index
      %old = memref.load %out[%r, %c] : memref<8x20xf32>
      %new = arith.addf %old, %u : f32
      memref.store %new, %out[%r, %c] : memref<8x20xf32>
    }
    return
  }
}
// CHECK-LABEL: func.func @main(
// CHECK-NOT: scf.for
// CHECK: gpu.launch_func
// CHECK: gpu.func @main_kernel(
// CHECK-NOT: memref.store
// CHECK: memref.atomic_rmw addf
// CHECK-NOT: memref.store

// -----

// index_put without accumulation: the rows named by the indices are overwritten in order
// (the last of repeated indices wins), so only the loop along the row is independent;
// the values and indices are read through views of the inputs (expand_shape), which the
// nest does not write.
// lazymlir-stage: bufferized
module {
  func.func @main(%vals: memref<8x20xf32>, %rows: memref<8xi64>, %out: memref<8x20xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %c20 = arith.constant 20 : index
    %v3 = memref.expand_shape %vals [[0, 1], [2]] output_shape [8, 1, 20] : memref<8x20xf32> into memref<8x1x20xf32>
    %r2 = memref.expand_shape %rows [[0, 1]] output_shape [8, 1] : memref<8xi64> into memref<8x1xi64>
    scf.for %i = %c0 to %c8 step %c1 {
      scf.for %j = %c0 to %c20 step %c1 {
        %v = memref.load %v3[%i, %c0, %j] : memref<8x1x20xf32>
        %r64 = memref.load %r2[%i, %c0] : memref<8x1xi64>
        %r = arith.index_cast %r64 : i64 to index
        memref.store %v, %out[%r, %j] : memref<8x20xf32>
      }
    }
    return
  }
}
// CHECK-LABEL: func.func @main(
// CHECK-NOT: scf.for
// CHECK: gpu.launch_func
// CHECK: gpu.func @main_kernel(
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step
// CHECK: memref.store
