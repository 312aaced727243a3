// RUN: lazymlir-opt %s --target=cuda --stage=gpu -split-input-file | FileCheck %s
// RUN: lazymlir-opt %s --target=cuda --to=ptx --emit=ptx -split-input-file | FileCheck %s --check-prefix=PTX

// Elementwise kernels with a contiguous innermost dim divisible by 4 (f32): each thread
// takes 4 consecutive elements (lowering/gpu/kernels/vectorize.py): one vector.load per operand
// and one vector.store, the scalar body once per lane in between. With the 16-byte
// alignment of the pointer arguments (nvvm stage) they are 16-byte accesses in PTX.
// 64x64: 1024 threads.
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @add$vec4(%arg0: memref<64x64xf32>, %arg1: memref<64x64xf32>, %arg2: memref<64x64xf32>) {
  linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : memref<64x64xf32>, memref<64x64xf32>) outs(%arg2 : memref<64x64xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %0 = arith.addf %in, %in_0 : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @add$vec4
// CHECK: gpu.launch_func @{{.*}} blocks in (%c4, %c1, %c1) threads in (%c256, %c1, %c1)
// CHECK: gpu.func
// CHECK: %[[I:.*]] = arith.divui %{{.*}}, %c16 : index
// CHECK: %[[J:.*]] = arith.muli %{{.*}}, %c4 : index
// CHECK: %[[A:.*]] = vector.load %arg0[%[[I]], %[[J]]] : memref<64x64xf32>, vector<4xf32>
// CHECK-COUNT-4: vector.extract %[[A]]
// CHECK: %[[B:.*]] = vector.load %arg1[%[[I]], %[[J]]] : memref<64x64xf32>, vector<4xf32>
// CHECK-COUNT-4: vector.extract %[[B]]
// CHECK-COUNT-4: arith.addf
// CHECK: %[[C:.*]] = vector.from_elements
// CHECK: vector.store %[[C]], %arg2[%[[I]], %[[J]]] : memref<64x64xf32>, vector<4xf32>
// CHECK-NOT: memref.load
// CHECK-NOT: memref.store
// CHECK: gpu.return
// PTX-LABEL: .entry add$vec4_kernel(
// PTX: .param .u64 .ptr .align 16 add$vec4_kernel_param_0,
// PTX: ld.global.v4.b32
// PTX: ld.global.v4.b32
// PTX: st.global.v4.b32

// -----

// `x[:, 1:] * 2`: the view starts 4 bytes into x (and rows are 65 floats apart), so
// groups of 4 are not 16-byte aligned: one element per thread, scalar accesses. The
// kernel gets x's own (aligned) pointer and adds the offset of its memref type itself.
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @slice$cols(%arg0: memref<8x65xf32>, %arg1: memref<8x64xf32>) {
  %cst = arith.constant 2.000000e+00 : f32
  %sv = memref.subview %arg0[0, 1] [8, 64] [1, 1] : memref<8x65xf32> to memref<8x64xf32, strided<[65, 1], offset: 1>>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%sv : memref<8x64xf32, strided<[65, 1], offset: 1>>) outs(%arg1 : memref<8x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %cst : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @slice$cols
// CHECK: gpu.launch_func @{{.*}} blocks in (%c2, %c1, %c1) threads in (%c256, %c1, %c1)
// CHECK: gpu.func
// CHECK-NOT: vector.
// CHECK-COUNT-1: memref.load
// CHECK-NOT: memref.load
// CHECK-NOT: vector.
// CHECK: gpu.return
// PTX-LABEL: .entry slice$cols_kernel(
// PTX-NOT: .v4
// PTX: ld.global.b32 {{.*}}+4]
// PTX-NOT: .v4
// PTX: st.global.b32
// PTX-NOT: .v4
// PTX: ret;

// -----

// An odd innermost extent (9) keeps one element per thread.
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @odd$scalar(%arg0: memref<7x9xf32>, %arg1: memref<7x9xf32>) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<7x9xf32>) outs(%arg1 : memref<7x9xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK-LABEL: func.func @odd$scalar
// CHECK: gpu.launch_func @{{.*}} blocks in (%c1, %c1, %c1) threads in (%c63, %c1, %c1)
// CHECK: gpu.func
// CHECK-NOT: vector.
// CHECK-COUNT-1: memref.load
// CHECK-NOT: memref.load
// CHECK-NOT: vector.
// CHECK: gpu.return
// PTX-LABEL: .entry odd$scalar_kernel(
// PTX-NOT: .v4
// PTX: ret;
