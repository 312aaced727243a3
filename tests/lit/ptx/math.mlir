// RUN: lazymlir-opt %s --target=cuda --stage=ptx --emit=ptx -split-input-file | FileCheck %s

// math.exp lowers to a libdevice call (__nv_expf) that is linked and inlined: no
// unresolved extern in the PTX, so ptxas accepts it.
#map = affine_map<(d0) -> (d0)>
func.func @exp$libdevice(%arg0: memref<512xf32>, %arg1: memref<512xf32>) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : memref<512xf32>) outs(%arg1 : memref<512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    linalg.yield %0 : f32
  }
  return
}
// CHECK: .visible .entry exp$libdevice_kernel(
// CHECK-NOT: __nv_expf
// CHECK: ex2.approx
// CHECK-NOT: .extern
