// RUN: lazymlir-opt %s --stage=bufferized | FileCheck %s

// What a TMTensor op becomes in the `linalg` stage (lowering/front/tmtensor.py): loops over a
// fresh buffer wrapped in a `restrict` to_tensor, inputs read through `read_only` to_buffer (graph
// inputs are not writable: without the marker each input was copied first). One-shot
// bufferization resolves both: here the loops write the result out-parameter directly.
// lazymlir-stage: linalg
module {
  func.func @index_put$loops_on_buffers(%arg0: tensor<4x5xf32>, %arg1: tensor<2xi64>, %arg2: tensor<2x5xf32>) -> tensor<4x5xf32> {
    %c5 = arith.constant 5 : index
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    %c0 = arith.constant 0 : index
    %0 = bufferization.to_buffer %arg0 read_only : tensor<4x5xf32> to memref<4x5xf32>
    %1 = bufferization.to_buffer %arg1 read_only : tensor<2xi64> to memref<2xi64>
    %2 = bufferization.to_buffer %arg2 read_only : tensor<2x5xf32> to memref<2x5xf32>
    %alloc = memref.alloc() : memref<4x5xf32>
    %3 = bufferization.to_tensor %alloc restrict : memref<4x5xf32> to tensor<4x5xf32>
    memref.copy %0, %alloc : memref<4x5xf32> to memref<4x5xf32>
    scf.for %arg3 = %c0 to %c2 step %c1 {
      scf.for %arg5 = %c0 to %c5 step %c1 {
        %4 = memref.load %2[%arg3, %arg5] : memref<2x5xf32>
        %5 = memref.load %1[%arg3] : memref<2xi64>
        %6 = arith.index_cast %5 : i64 to index
        %8 = memref.load %alloc[%6, %arg5] : memref<4x5xf32>
        %9 = arith.addf %8, %4 : f32
        memref.store %9, %alloc[%6, %arg5] : memref<4x5xf32>
      }
    }
    return %3 : tensor<4x5xf32>
  }
}
// CHECK-LABEL: func.func @index_put$loops_on_buffers
// CHECK-SAME: (%[[ARG0:.*]]: memref<4x5xf32>, %[[ARG1:.*]]: memref<2xi64>, %[[ARG2:.*]]: memref<2x5xf32>, %[[OUT:.*]]: memref<4x5xf32>) attributes {lazymlir.results = {{[0-9]+}} : i64} {
// CHECK-NOT: bufferization.
// CHECK: memref.copy %[[ARG0]], %[[OUT]] : memref<4x5xf32> to memref<4x5xf32>
// CHECK: scf.for
// CHECK: %[[OLD:.*]] = memref.load %[[OUT]]
// CHECK: %[[NEW:.*]] = arith.addf %[[OLD]]
// CHECK: memref.store %[[NEW]], %[[OUT]]
// CHECK-NOT: bufferization.
// CHECK: return
