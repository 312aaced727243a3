// RUN: lazymlir-opt %s --to=llvm -split-input-file | FileCheck %s

// The vector code of the CPU schedule (lowering/cpu/schedule.py) reaches the
// LLVM dialect as vector instructions. Input: `bufferized` stage output (runs
// the `loops` and `llvm` stages).

// lazymlir-stage: bufferized
module {
  func.func @mm$fma(%arg0: memref<8x8xf32>, %arg1: memref<8x32xf32>, %arg2: memref<8x32xf32>) {
    linalg.matmul ins(%arg0, %arg1 : memref<8x8xf32>, memref<8x32xf32>) outs(%arg2 : memref<8x32xf32>)
    return
  }
}
// CHECK-LABEL: llvm.func @_mlir_ciface_mm$fma(
// CHECK: llvm.br ^bb1(
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> vector<32xf32>
// CHECK: llvm.intr.fmuladd(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<32xf32>, vector<32xf32>, vector<32xf32>) -> vector<32xf32>
// CHECK: llvm.store %{{.*}}, %{{.*}} {{.*}}: vector<32xf32>, !llvm.ptr
// CHECK: llvm.return

// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @sum$rows(%arg0: memref<4x64xf32>, %arg1: memref<4xf32>) {
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<4x64xf32>) outs(%arg1 : memref<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.addf %in, %out : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// Horizontal sums may reassociate (a shuffle tree in the backend).
// CHECK-LABEL: llvm.func @_mlir_ciface_sum$rows(
// CHECK: llvm.br ^bb1(
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> vector<64xf32>
// CHECK: "llvm.intr.vector.reduce.fadd"(%{{.*}}, %{{.*}}) <{fastmathFlags = #llvm.fastmath<reassoc>}> : (f32, vector<64xf32>) -> f32
// CHECK: llvm.return

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$threads(%arg0: memref<128x512xf32>, %arg1: memref<512x512xf32>, %arg2: memref<128x512xf32>) {
    linalg.matmul ins(%arg0, %arg1 : memref<128x512xf32>, memref<512x512xf32>) outs(%arg2 : memref<128x512xf32>)
    return
  }
}
// A parallel loop (lowering/cpu/parallel.py) stays an OpenMP region with LLVM
// types: mlir-translate outlines it into __kmpc_fork_call/static-schedule calls,
// which lazymlir/targets/cpu_threads.py implements on PyTorch's libgomp.
// CHECK-LABEL: llvm.func @_mlir_ciface_mm$threads(
// CHECK: llvm.br ^bb1(
// CHECK: omp.parallel {
// CHECK: omp.wsloop {
// CHECK: omp.loop_nest
// CHECK: llvm.intr.fmuladd
// CHECK: omp.terminator
// CHECK: llvm.return
