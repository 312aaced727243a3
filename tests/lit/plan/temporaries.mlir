// RUN: lazymlir-opt %s --target=cuda --stage=plan -split-input-file | FileCheck %s

// Temporaries: allocated before first use, copied with lzrt.copy, each freed right
// after its last use (the bufferized stage has no memref.dealloc; the runtime's
// one stream orders the reuse of a freed block).
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @transpose$temp(%arg0: memref<8x4xf32>, %arg1: memref<4x8xf32>) {
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
  linalg.transpose ins(%arg0 : memref<8x4xf32>) outs(%alloc : memref<4x8xf32>) permutation = [1, 0]
  %alloc_1 = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%alloc : memref<4x8xf32>) outs(%alloc_1 : memref<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.negf %in : f32
    linalg.yield %0 : f32
  }
  memref.copy %alloc_1, %arg1 : memref<4x8xf32> to memref<4x8xf32>
  return
}
// CHECK-LABEL: func.func @plan()
// CHECK: %[[IN:.*]] = "lzrt.arg"() {index = 0
// CHECK: %[[OUT:.*]] = "lzrt.arg"() {index = 1
// CHECK: %[[T0:.*]] = "lzrt.alloc"() {nbytes = 128 : i64}
// CHECK: "lzrt.launch"(%[[IN]], %[[T0]]) {{.*}}module_index = 0 : i64
// CHECK: %[[T1:.*]] = "lzrt.alloc"() {nbytes = 128 : i64}
// CHECK: "lzrt.launch"(%[[T0]], %[[T1]]) {{.*}}module_index = 1 : i64
// CHECK-NEXT: "lzrt.free"(%[[T0]])
// CHECK-NEXT: "lzrt.copy"(%[[OUT]], %[[T1]]) {nbytes = 128 : i64}
// CHECK-NEXT: "lzrt.free"(%[[T1]])
// CHECK-NEXT: return

// -----

// An explicit memref.dealloc: the free still follows the last use (here, where the
// dealloc stands).
func.func @dealloc$explicit(%arg0: memref<16xf32>) {
  %alloc = memref.alloc() : memref<16xf32>
  memref.copy %arg0, %alloc : memref<16xf32> to memref<16xf32>
  memref.copy %alloc, %arg0 : memref<16xf32> to memref<16xf32>
  memref.dealloc %alloc : memref<16xf32>
  return
}
// CHECK-LABEL: func.func @plan()
// CHECK: %[[A:.*]] = "lzrt.arg"() {index = 0 : i64, nbytes = 64 : i64}
// CHECK: %[[T:.*]] = "lzrt.alloc"() {nbytes = 64 : i64}
// CHECK: "lzrt.copy"(%[[T]], %[[A]])
// CHECK: "lzrt.copy"(%[[A]], %[[T]])
// CHECK: "lzrt.free"(%[[T]])
// CHECK-NOT: lzrt.free
// CHECK: return
