// RUN: lazymlir-opt %s --target=cuda --stage=gpu | FileCheck %s

// Index bounds checks (torch-mlir's gather) reach the kernel as cf.assert (lowered to
// __assertfail by the nvvm stage): upstream convert-parallel-loops-to-gpu would leave
// a loop holding one on the host (gpu.stages.hide_asserts / restore_asserts).
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @gather$asserts(%arg0: memref<3x4xf32>, %arg1: memref<3x2xi64>, %arg2: memref<3x2xf32>) {
  %c4 = arith.constant 4 : index
  %c0_i64 = arith.constant 0 : i64
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg1 : memref<3x2xi64>) outs(%arg2 : memref<3x2xf32>) {
  ^bb0(%in: i64, %out: f32):
    %0 = linalg.index 0 : index
    %1 = arith.index_cast %in : i64 to index
    %2 = arith.cmpi slt, %1, %c4 : index
    cf.assert %2, "index must be smaller than dim size"
    %3 = arith.cmpi sge, %in, %c0_i64 : i64
    cf.assert %3, "index must be larger or equal to 0"
    %4 = memref.load %arg0[%0, %1] : memref<3x4xf32>
    linalg.yield %4 : f32
  }
  return
}
// CHECK-LABEL: func.func @gather$asserts
// CHECK-NOT: cf.assert
// CHECK: gpu.launch_func
// CHECK: gpu.func @gather$asserts_kernel
// CHECK-NOT: gpu.printf
// CHECK: cf.assert %{{.*}}, "index must be smaller than dim size"
// CHECK: cf.assert %{{.*}}, "index must be larger or equal to 0"
// CHECK: memref.load
