// RUN: lazymlir-opt %s --stage=loops -split-input-file | FileCheck %s

// The CPU schedule (lowering/cpu/schedule.py) on shapes big enough for its
// full tiles. Input: `bufferized` stage output.

// lazymlir-stage: bufferized
module {
  func.func @mm$tiled(%arg0: memref<128x512xf32>, %arg1: memref<512x512xf32>, %arg2: memref<128x512xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    linalg.fill ins(%cst : f32) outs(%arg2 : memref<128x512xf32>)
    linalg.matmul ins(%arg0, %arg1 : memref<128x512xf32>, memref<512x512xf32>) outs(%arg2 : memref<128x512xf32>)
    return
  }
}
// Cache tiles of 64 x 256 x 256 (M x N x K) around 8 x 32 register tiles
// over 4 steps of K; the 8 x 32 accumulator stays in registers across K.
// Large enough for threads (cpu.parallel): the 2 x 2 blocks of 64 rows and 256
// columns are the iterations of an OpenMP worksharing loop (run on PyTorch's
// OpenMP threads).
// CHECK-LABEL: func.func @mm$tiled
// CHECK-SAME: (%[[A:[a-z0-9]*]]: memref<128x512xf32>, %[[B:[a-z0-9]*]]: memref<512x512xf32>, %[[C:[a-z0-9]*]]: memref<128x512xf32>) {
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG: %[[C256:.*]] = arith.constant 256 : index
// CHECK: omp.parallel {
// CHECK: omp.wsloop {
// CHECK: omp.loop_nest (%{{.*}}, %{{.*}}) : index = (%{{.*}}, %{{.*}}) to (%[[C2]], %[[C2]]) step (%{{.*}}, %{{.*}}) collapse(2) {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C256]] {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C8]] {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C32]] {
// CHECK: %[[ACC:.*]] = vector.transfer_read %[[C]]{{.*}} : memref<128x512xf32>, vector<8x32xf32>
// CHECK: %[[RES:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C4]] iter_args(%{{.*}} = %[[ACC]]) -> (vector<8x32xf32>) {
// CHECK: vector.transfer_read %[[A]]{{.*}} : memref<128x512xf32>, vector<8x4xf32>
// CHECK: vector.transfer_read %[[B]]{{.*}} : memref<512x512xf32>, vector<4x32xf32>
// CHECK-NOT: vector.transfer_write
// CHECK-COUNT-32: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: scf.yield
// CHECK: vector.transfer_write %[[RES]], %[[C]]
// CHECK: return

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$small(%arg0: memref<64x64xf32>, %arg1: memref<64x64xf32>, %arg2: memref<64x64xf32>) {
    linalg.matmul ins(%arg0, %arg1 : memref<64x64xf32>, memref<64x64xf32>) outs(%arg2 : memref<64x64xf32>)
    return
  }
}
// Too small to pay for a dispatch to another thread: the same tiles, in order.
// CHECK-LABEL: func.func @mm$small
// CHECK-SAME: (%[[A:.*]]: memref<64x64xf32>, %[[B:.*]]: memref<64x64xf32>, %[[C:.*]]: memref<64x64xf32>) {
// CHECK-NOT: omp.
// CHECK: scf.for
// CHECK: %[[ACC:.*]] = vector.transfer_read %[[C]]{{.*}} : memref<64x64xf32>, vector<8x32xf32>
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[ACC]]) -> (vector<8x32xf32>) {
// CHECK-COUNT-32: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: vector.transfer_write
// CHECK-NOT: omp.
// CHECK: return

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$a_transposed(%arg0: memref<64x64xf32>, %arg1: memref<64x64xf32>, %arg2: memref<64x64xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    linalg.fill ins(%cst : f32) outs(%arg2 : memref<64x64xf32>)
    linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d2, d0)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%arg0, %arg1 : memref<64x64xf32>, memref<64x64xf32>) outs(%arg2 : memref<64x64xf32>)
    return
  }
}
// A read transposed (`h.t() @ grad`, folded by transposed_operands.py): the plain
// kernel, its A tile read as the 4 x 8 (K x M) slab it broadcasts from, with no
// shuffles; zero-initialized accumulators instead of the fill.
// CHECK-LABEL: func.func @mm$a_transposed
// CHECK-SAME: (%[[A:.*]]: memref<64x64xf32>, %[[B:.*]]: memref<64x64xf32>, %[[C:.*]]: memref<64x64xf32>) {
// CHECK-NOT: linalg.fill
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<8x32xf32>) {
// CHECK: vector.transfer_read %[[A]]{{.*}} : memref<64x64xf32>, vector<4x8xf32>
// CHECK: vector.transfer_read %[[B]]{{.*}} : memref<64x64xf32>, vector<4x32xf32>
// CHECK-NOT: vector.shuffle
// CHECK-NOT: vector.transpose
// CHECK-COUNT-32: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: scf.yield
// CHECK: vector.transfer_write
// CHECK: return

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$b_transposed_keeps_loops(%arg0: memref<64x64xf32>, %arg1: memref<64x64xf32>, %arg2: memref<64x64xf32>) {
    linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%arg0, %arg1 : memref<64x64xf32>, memref<64x64xf32>) outs(%arg2 : memref<64x64xf32>)
    return
  }
}
// CHECK-LABEL: func.func @mm$b_transposed_keeps_loops
// CHECK-NOT: vector.
// CHECK: memref.load
// CHECK: return

// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @max$rows(%arg0: memref<32x1024xf32>, %arg1: memref<32xf32>) {
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<32x1024xf32>) outs(%arg1 : memref<32xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.maximumf %in, %out : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// Innermost reductions: 256 elements per step (a tree of independent ops in
// the backend), one update of the row's accumulator each.
// CHECK-LABEL: func.func @max$rows
// CHECK-DAG: %[[C256:.*]] = arith.constant 256 : index
// CHECK: scf.for
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C256]] {
// CHECK: vector.load %{{.*}} : memref<1x256xf32, strided<[1024, 1], offset: ?>>, vector<256xf32>
// CHECK: vector.reduction <maximumf>, %{{.*}}, %{{.*}} : vector<256xf32> into f32
// CHECK: return

// -----

// lazymlir-stage: bufferized
module {
  func.func @transpose$tiled(%arg0: memref<512x256xf32>, %arg1: memref<256x512xf32>) {
    linalg.transpose ins(%arg0 : memref<512x256xf32>) outs(%arg1 : memref<256x512xf32>) permutation = [1, 0]
    return
  }
}
// A transpose of the innermost dims (a Linear's W.t()): 16 x 16 tiles read as
// 16 rows of 16 contiguous floats, transposed in registers by shuffles, written
// as 16 rows (not one strided element at a time). Large enough for threads: the
// result's 256 rows are 16 blocks of one tile row each, an OpenMP loop; a block
// walks cache tiles of 16 x 32 (32 input rows at a time).
// CHECK-LABEL: func.func @transpose$tiled
// CHECK-SAME: (%[[IN:.*]]: memref<512x256xf32>, %[[OUT:.*]]: memref<256x512xf32>) {
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: omp.parallel {
// CHECK: omp.loop_nest (%[[B:.*]]) : index = (%{{.*}}) to (%[[C16]]) step
// CHECK: %[[I:.*]] = affine.apply #{{.*}}(%[[B]])
// CHECK: %[[BIN:.*]] = memref.subview %[[IN]][0, %[[I]]] [512, 16] [1, 1]
// CHECK: %[[BOUT:.*]] = memref.subview %[[OUT]][%[[I]], 0] [16, 512] [1, 1]
// CHECK: scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step %[[C32]] {
// CHECK: %[[TIN:.*]] = memref.subview %[[BIN]][%[[T]], 0] [32, 16] [1, 1]
// CHECK: %[[TOUT:.*]] = memref.subview %[[BOUT]][0, %[[T]]] [16, 32] [1, 1]
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %[[C32]] step %[[C16]] {
// CHECK: %[[SRC:.*]] = memref.subview %[[TIN]][%[[J]], 0] [16, 16] [1, 1]
// CHECK: %[[DST:.*]] = memref.subview %[[TOUT]][0, %[[J]]] [16, 16] [1, 1]
// CHECK: vector.transfer_read %[[SRC]]{{.*}} : memref<16x16xf32, strided<[256, 1], offset: ?>>, vector<16x16xf32>
// CHECK-COUNT-64: vector.shuffle
// CHECK: vector.transfer_write %{{.*}}, %[[DST]]{{.*}} : vector<16x16xf32>, memref<16x16xf32, strided<[512, 1], offset: ?>>
// CHECK-NOT: linalg.transpose
// CHECK: return

// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @exp$threads(%arg0: memref<512x256xf32>, %arg1: memref<512x256xf32>) {
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<512x256xf32>) outs(%arg1 : memref<512x256xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = math.exp %in : f32
      linalg.yield %0 : f32
    }
    return
  }
  func.func @rowsum$threads(%arg0: memref<512x256xf32>, %arg1: memref<512xf32>) {
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<512x256xf32>) outs(%arg1 : memref<512xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = arith.addf %in, %out : f32
      linalg.yield %0 : f32
    }
    return
  }
  func.func @exp$small(%arg0: memref<64x256xf32>, %arg1: memref<64x256xf32>) {
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<64x256xf32>) outs(%arg1 : memref<64x256xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = math.exp %in : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// At least 64K elements (cpu.parallel.MIN_PARALLEL_ELEMENTS): the outermost loop
// is split into 16 blocks of 32 rows, the iterations of an OpenMP loop.
// CHECK-LABEL: func.func @exp$threads
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK: omp.parallel {
// CHECK: omp.loop_nest (%[[B:.*]]) : index = (%{{.*}}) to (%[[C16]])
// CHECK: memref.subview %{{.*}}[%{{.*}}, 0] [32, 256] [1, 1]
// CHECK: math.exp
// CHECK: omp.terminator
// The row reduction keeps its vectorized rows inside the blocks.
// CHECK-LABEL: func.func @rowsum$threads
// CHECK: omp.parallel {
// CHECK: omp.loop_nest (%{{.*}}) : index = (%{{.*}}) to (%{{.*}})
// CHECK: vector.reduction <add>, %{{.*}}, %{{.*}} : vector<256xf32> into f32
// CHECK: omp.terminator
// 16K elements: in order on the calling thread.
// CHECK-LABEL: func.func @exp$small
// CHECK-NOT: omp.
// CHECK: return

// -----

// lazymlir-stage: bufferized
module {
  func.func @copy$strided(%arg0: memref<8x64x128xf32>, %arg1: memref<8x64x384xf32>) {
    %subview = memref.subview %arg1[0, 0, 128] [8, 64, 128] [1, 1, 1] : memref<8x64x384xf32> to memref<8x64x128xf32, strided<[24576, 384, 1], offset: 128>>
    memref.copy %arg0, %subview : memref<8x64x128xf32> to memref<8x64x128xf32, strided<[24576, 384, 1], offset: 128>>
    return
  }
}
// A copy into a strided slice (lowering/bufferize/buffer_copies.py): loops over the
// contiguous innermost dim, not MLIR's runtime memrefCopy (one memcpy call per
// element for such layouts).
// CHECK-LABEL: func.func @copy$strided
// CHECK-SAME: (%[[SRC:.*]]: memref<8x64x128xf32>, %[[DST:.*]]: memref<8x64x384xf32>)
// CHECK-NOT: memref.copy
// CHECK: %[[SLICE:.*]] = memref.subview %[[DST]][0, 0, 128] [8, 64, 128] [1, 1, 1]
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[V:.*]] = memref.load %[[SRC]]
// CHECK: memref.store %[[V]], %[[SLICE]]
// CHECK-NOT: memref.copy
// CHECK: return

// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0) -> (d0)>
module {
  func.func @exp$dynamic(%arg0: memref<?xf32>, %arg1: memref<?xf32>, %arg2: f32) {
    linalg.generic {indexing_maps = [#map, affine_map<(d0) -> ()>, #map], iterator_types = ["parallel"]} ins(%arg0, %arg2 : memref<?xf32>, f32) outs(%arg1 : memref<?xf32>) {
    ^bb0(%in: f32, %s: f32, %out: f32):
      %0 = arith.mulf %in, %s : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// A dynamic size (a boolean-mask index) and a scalar operand: the schedule for
// `?` sizes (schedule-dynamic.mlir): the scalar broadcast once, vector steps with a
// peeled rest, on all cores only when the size at run time is large enough.
// CHECK-LABEL: func.func @exp$dynamic
// CHECK: %[[N:.*]] = memref.dim %arg0, %c0
// CHECK: %[[LARGE:.*]] = arith.cmpi sge, %[[N]], %c65536
// CHECK: scf.if %[[LARGE]] {
// CHECK: omp.parallel
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: } else {
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<1xf32>
// CHECK: return

// -----

// lazymlir-stage: bufferized
module {
  func.func @mm$viewed_result(%arg0: memref<64x512xf32>, %arg1: memref<512x256xf32>, %arg2: memref<16384xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %alloc = memref.alloc() {alignment = 64 : i64} : memref<64x256xf32>
    linalg.fill ins(%cst : f32) outs(%alloc : memref<64x256xf32>)
    linalg.matmul ins(%arg0, %arg1 : memref<64x512xf32>, memref<512x256xf32>) outs(%alloc : memref<64x256xf32>)
    %flat = memref.collapse_shape %alloc [[0, 1]] : memref<64x256xf32> into memref<16384xf32>
    memref.copy %flat, %arg2 : memref<16384xf32> to memref<16384xf32>
    return
  }
}
// A matmul whose result buffer is also reshaped (an MLP's loss flattens it): its
// accumulator still stays in registers across K (upstream's hoisting alone keeps
// it in memory when the buffer has any view), and its single 64 x 256 cache tile
// is split into 4 blocks of 64 x 64 for the threads.
// CHECK-LABEL: func.func @mm$viewed_result
// CHECK-NOT: lazymlir.accumulator
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK: %[[ACC:.*]] = memref.alloc() {{.*}} : memref<64x256xf32>
// CHECK: omp.parallel {
// CHECK: omp.loop_nest (%{{.*}}) : index = (%{{.*}}) to (%[[C4]]) step
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[TILE:.*]] = vector.transfer_read %[[ACC]]{{.*}} vector<8x32xf32>
// CHECK: %[[RES:.*]] = scf.for {{.*}} iter_args(%{{.*}} = %[[TILE]]) -> (vector<8x32xf32>) {
// CHECK-NOT: vector.transfer_write
// CHECK: scf.yield
// CHECK: vector.transfer_write %[[RES]], %[[ACC]]
// CHECK: memref.collapse_shape %[[ACC]]


// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @expsum$rows(%arg0: memref<64x1024xf32>, %arg1: memref<64xf32>) {
    linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<64x1024xf32>) outs(%arg1 : memref<64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = math.exp %in : f32
      %1 = arith.addf %0, %out : f32
      linalg.yield %1 : f32
    }
    return
  }
}
// A row reduction whose payload calls libm (a softmax's exp-sum): steps of 8
// floats even with AVX-512 tiles, so each exp is one libmvec call (LLVM maps float
// math at 8 lanes, not 16); a vector<256xf32> or vector<16xf32> exp became one
// scalar expf call per element.
// CHECK-LABEL: func.func @expsum$rows
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C8]]
// CHECK: math.exp %{{.*}} : vector<8xf32>
// CHECK-NOT: vector<256xf32>
// CHECK: vector.reduction <add>, %{{.*}}, %{{.*}} : vector<8xf32> into f32

// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @argmax$threads(%arg0: memref<512x256xf32>, %arg1: memref<512xf32>, %arg2: memref<512xi64>) {
    linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : memref<512x256xf32>) outs(%arg1, %arg2 : memref<512xf32>, memref<512xi64>) {
    ^bb0(%in: f32, %out: f32, %out_0: i64):
      %0 = linalg.index 1 : index
      %1 = arith.index_cast %0 : index to i64
      %2 = arith.maximumf %in, %out : f32
      %3 = arith.cmpf ogt, %in, %out : f32
      %4 = arith.select %3, %1, %out_0 : i64
      linalg.yield %2, %4 : f32, i64
    }
    return
  }
}
// A row reduction no vector strategy takes (an argmax, with its i64 index):
// its rows still split into 16 blocks for the threads, each block scalar loops.
// CHECK-LABEL: func.func @argmax$threads
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK: omp.parallel {
// CHECK: omp.loop_nest (%{{.*}}) : index = (%{{.*}}) to (%[[C16]]) step
// CHECK: scf.for
// CHECK: scf.for
// CHECK: arith.select

// -----

// lazymlir-stage: bufferized
#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#scalar = affine_map<(d0, d1) -> ()>
#t = affine_map<(d0, d1) -> (d1, d0)>
#v = affine_map<(d0) -> (d0)>
module {
  func.func @adamw$vector(%p: memref<512x256xf32>, %m: memref<256xf32>, %step: memref<f32>, %out: memref<512x256xf32>) {
    %beta = arith.constant 0.9 : f32
    linalg.generic {indexing_maps = [#map, #row, #scalar, #map], iterator_types = ["parallel", "parallel"]} ins(%p, %m, %step : memref<512x256xf32>, memref<256xf32>, memref<f32>) outs(%out : memref<512x256xf32>) {
    ^bb0(%in: f32, %r: f32, %s: f32, %o: f32):
      %0 = math.powf %beta, %s : f32
      %1 = arith.mulf %in, %0 : f32
      %2 = arith.addf %1, %r : f32
      %3 = math.sqrt %2 : f32
      linalg.yield %3 : f32
    }
    return
  }
  func.func @add$vector(%a: memref<64x256xf32>, %b: memref<64x256xf32>, %out: memref<64x256xf32>) {
    linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : memref<64x256xf32>, memref<64x256xf32>) outs(%out : memref<64x256xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %0 = arith.addf %x, %y : f32
      linalg.yield %0 : f32
    }
    return
  }
  func.func @scale$flat(%a: memref<131072xf32>, %out: memref<131072xf32>) {
    %c = arith.constant 2.0 : f32
    linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]} ins(%a : memref<131072xf32>) outs(%out : memref<131072xf32>) {
    ^bb0(%x: f32, %o: f32):
      %0 = arith.mulf %x, %c : f32
      linalg.yield %0 : f32
    }
    return
  }
  func.func @add$transposed(%a: memref<256x64xf32>, %b: memref<64x256xf32>, %out: memref<64x256xf32>) {
    linalg.generic {indexing_maps = [#t, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : memref<256x64xf32>, memref<64x256xf32>) outs(%out : memref<64x256xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %0 = arith.addf %x, %y : f32
      linalg.yield %0 : f32
    }
    return
  }
  func.func @tanh$scalar(%a: memref<64x256xf32>, %out: memref<64x256xf32>) {
    linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%a : memref<64x256xf32>) outs(%out : memref<64x256xf32>) {
    ^bb0(%x: f32, %o: f32):
      %0 = math.tanh %x : f32
      linalg.yield %0 : f32
    }
    return
  }
}
// Elementwise ops vectorized along their innermost dim (cpu.schedule's
// _elementwise_vector_plan), not left to LLVM's loop vectorizer with a runtime alias
// check and a scalar copy per loop. A 0-d input is read once before the loops, so
// what is computed from it alone (AdamW's beta ** step) is computed once; a payload
// calling libm steps 8 lanes (one libmvec call), others four registers.
// CHECK-LABEL: func.func @adamw$vector
// CHECK-SAME: %[[STEP:[a-z0-9]+]]: memref<f32>
// CHECK: %[[S:.*]] = memref.load %[[STEP]][] : memref<f32>
// CHECK: %[[POW:.*]] = math.powf %{{.*}}, %[[S]] : f32
// CHECK: omp.parallel {
// CHECK: scf.for %{{.*}} step %c8
// CHECK: vector.load %{{.*}} vector<8xf32>
// CHECK: vector.broadcast %[[POW]] : f32 to vector<8xf32>
// CHECK: math.sqrt %{{.*}} : vector<8xf32>
// CHECK: vector.store
// CHECK: omp.terminator
// CHECK-LABEL: func.func @add$vector
// CHECK-NOT: omp.
// CHECK: scf.for %{{.*}} step %c64
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<64xf32>
// One loop: 16 parallel blocks of whole vector steps.
// CHECK-LABEL: func.func @scale$flat
// CHECK: omp.loop_nest
// CHECK: memref.subview %{{.*}}[%{{.*}}] [8192] [1]
// CHECK: scf.for %{{.*}} = %c0 to %c8192 step %c64
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<64xf32>
// A transposed operand and a libm call without a vector mapping (tanh) keep the
// scalar loops.
// CHECK-LABEL: func.func @add$transposed
// CHECK-NOT: vector<
// CHECK: memref.load
// CHECK-LABEL: func.func @tanh$scalar
// CHECK-NOT: vector<
// CHECK: math.tanh %{{.*}} : f32
