"""benchmarks/roofline.py: the static kernel model on hand-written gpu-stage kernels."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from mlir import ir

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from benchmarks import roofline  # noqa: E402

# 1M floats: y = x * 2, one thread per element (coalesced), 4096 x 256.
COPY = """
gpu.module @m {
  gpu.func @k(%x: memref<1048576xf32>, %y: memref<1048576xf32>) kernel {
    %c256 = arith.constant 256 : index
    %two = arith.constant 2.0 : f32
    %b = gpu.block_id x
    %t = gpu.thread_id x
    %base = arith.muli %b, %c256 : index
    %i = arith.addi %base, %t : index
    %v = memref.load %x[%i] : memref<1048576xf32>
    %w = arith.mulf %v, %two : f32
    memref.store %w, %y[%i] : memref<1048576xf32>
    gpu.return
  }
}
"""

# One thread per row of a 4096 x 256 matrix: a serial loop, stride-256 warp accesses.
ROWSUM = """
gpu.module @m {
  gpu.func @k(%x: memref<4096x256xf32>, %y: memref<4096xf32>) kernel {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %zero = arith.constant 0.0 : f32
    %b = gpu.block_id x
    %t = gpu.thread_id x
    %base = arith.muli %b, %c256 : index
    %row = arith.addi %base, %t : index
    %s = scf.for %k = %c0 to %c256 step %c1 iter_args(%acc = %zero) -> (f32) {
      %v = memref.load %x[%row, %k] : memref<4096x256xf32>
      %n = arith.addf %acc, %v : f32
      scf.yield %n : f32
    }
    memref.store %s, %y[%row] : memref<4096xf32>
    gpu.return
  }
}
"""


def _func(text):
    ctx = ir.Context()
    module = ir.Module.parse(text, ctx)
    gm = module.body.operations[0]
    return ctx, module, gm.regions[0].blocks[0].operations[0]


def test_coalesced_elementwise():
    ctx, _module, func = _func(COPY)
    with ctx:
        stats = roofline.analyse_kernel(func, (4096, 1, 1), (256, 1, 1), [4 << 20, 4 << 20])
    assert stats.threads == 1 << 20
    assert stats.bytes == 8 << 20  # x read once, y written once
    assert stats.fp == 1 << 20 and stats.instrs == 1 << 20
    assert stats.sector_bytes == 8 << 20  # stride 1: no wasted sector bytes
    assert stats.rounds == 1 and stats.barriers == 0
    est = roofline.estimate(stats)
    # 4 waves of one round trip (2.8 us) against 8 MB at HBM speed (2.5 us): close.
    assert est["bound"] in ("hbm", "latency") and 0.5 < est["fraction"] < 1


def test_thread_per_row_is_uncoalesced_and_latency_bound():
    ctx, _module, func = _func(ROWSUM)
    with ctx:
        stats = roofline.analyse_kernel(func, (16, 1, 1), (256, 1, 1), [4 << 20, 16384])
    assert stats.bytes == (4 << 20) + 16384
    # Neighbouring threads read 1 KiB apart: a full 32-byte sector per 4-byte load.
    assert stats.sector_bytes == pytest.approx(8 * (4 << 20) + 16384)
    assert stats.rounds == 256  # a dependent round trip per iteration (dynamic loop)
    est = roofline.estimate(stats)
    assert est["bound"] == "latency" and est["fraction"] < 0.05


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
def test_ptxas_info_parses_registers_and_shared_memory():
    ptx = """
.version 7.8
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
  .shared .align 4 .b8 buf[1024];
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  mov.u32 %r1, %tid.x;
  shl.b32 %r2, %r1, 2;
  mov.u64 %rd1, buf;
  st.shared.u32 [buf], %r2;
  bar.sync 0;
  ret;
}
"""
    info = roofline.ptxas_info(ptx)
    assert info["k"]["smem"] == 1024
    assert info["k"]["spill_stores"] == 0 and info["k"]["regs"] > 0


# A k loop with a tile load, a barrier and compute: one round trip per iteration.
TILED = """
gpu.module @m {
  gpu.func @k(%x: memref<4096xf32>, %y: memref<256xf32>)
      workgroup(%sh: memref<256xf32, #gpu.address_space<workgroup>>) kernel {
    %c0 = arith.constant 0 : index
    %c256 = arith.constant 256 : index
    %c4096 = arith.constant 4096 : index
    %zero = arith.constant 0.0 : f32
    %t = gpu.thread_id x
    %s = scf.for %k = %c0 to %c4096 step %c256 iter_args(%acc = %zero) -> (f32) {
      %i = arith.addi %k, %t : index
      %v = memref.load %x[%i] : memref<4096xf32>
      memref.store %v, %sh[%t] : memref<256xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %w = memref.load %sh[%t] : memref<256xf32, #gpu.address_space<workgroup>>
      %n = math.fma %w, %w, %acc : f32
      gpu.barrier
      scf.yield %n : f32
    }
    memref.store %s, %y[%t] : memref<256xf32>
    gpu.return
  }
}
"""


def test_loop_with_barriers_costs_a_round_per_iteration():
    ctx, _module, func = _func(TILED)
    with ctx:
        stats = roofline.analyse_kernel(func, (1, 1, 1), (256, 1, 1), [16384, 1024])
    assert stats.rounds == 16 and stats.barriers == 32
    assert stats.fp == 2 * 4096 and stats.instrs == 4096  # fma: 2 flops, 1 instruction
    assert stats.shared_bytes == 2 * 4 * 4096


# A warp-level matrix kernel: 64 blocks x 8 warps, each warp 4 k steps of one f16
# m16n16k16 fragment product from shared memory (the shape gpu_mma.py emits).
MMA = """
!S = memref<16x16xf16, #gpu.address_space<workgroup>>
!A = !gpu.mma_matrix<16x16xf16, "AOp">
!B = !gpu.mma_matrix<16x16xf16, "BOp">
!C = !gpu.mma_matrix<16x16xf32, "COp">
gpu.module @m {
  gpu.func @k(%c: memref<16x16xf32>) workgroup(%a: !S, %b: !S) kernel {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %zero = arith.constant 0.0 : f32
    %init = gpu.subgroup_mma_constant_matrix %zero : !C
    %acc = scf.for %k = %c0 to %c4 step %c1 iter_args(%d = %init) -> (!C) {
      %fa = gpu.subgroup_mma_load_matrix %a[%c0, %c0] {leadDimension = 16 : index} : !S -> !A
      %fb = gpu.subgroup_mma_load_matrix %b[%c0, %c0] {leadDimension = 16 : index} : !S -> !B
      %n = gpu.subgroup_mma_compute %fa, %fb, %d : !A, !B -> !C
      scf.yield %n : !C
    }
    gpu.return
  }
}
"""


def test_warp_matrix_ops_count_at_the_tensor_core_rate():
    ctx, _module, func = _func(MMA)
    with ctx:
        stats = roofline.analyse_kernel(func, (64, 1, 1), (256, 1, 1), [1024])
    warps = 64 * 8
    assert stats.mma_fp == pytest.approx(warps * 4 * 2 * 16 * 16 * 16)
    assert stats.fp == 0
    assert stats.mma_time == pytest.approx(stats.mma_fp / roofline.TC_F16_PEAK)
    # Two 16x16 f16 fragments (512 B each) loaded per warp and k step.
    assert stats.shared_bytes == pytest.approx(warps * 4 * 2 * 512)
    est = roofline.estimate(stats)
    assert est["t_roof"] == pytest.approx(stats.mma_fp / roofline.TC_F16_PEAK)


# A warp sum by xor shuffles (the butterfly of gpu_warp_reduce.py): 5 dependent steps.
WARP_SUM = """
gpu.module @m {
  gpu.func @k(%x: memref<1048576xf32>, %y: memref<32768xf32>) kernel {
    %c32 = arith.constant 32 : index
    %c256 = arith.constant 256 : index
    %w = arith.constant 32 : i32
    %b = gpu.block_id x
    %t = gpu.thread_id x
    %base = arith.muli %b, %c256 : index
    %i = arith.addi %base, %t : index
    %v = memref.load %x[%i] : memref<1048576xf32>
    %o16 = arith.constant 16 : i32
    %s16, %p16 = gpu.shuffle xor %v, %o16, %w : f32
    %v16 = arith.addf %v, %s16 : f32
    %o8 = arith.constant 8 : i32
    %s8, %p8 = gpu.shuffle xor %v16, %o8, %w : f32
    %v8 = arith.addf %v16, %s8 : f32
    %o4 = arith.constant 4 : i32
    %s4, %p4 = gpu.shuffle xor %v8, %o4, %w : f32
    %v4 = arith.addf %v8, %s4 : f32
    %o2 = arith.constant 2 : i32
    %s2, %p2 = gpu.shuffle xor %v4, %o2, %w : f32
    %v2 = arith.addf %v4, %s2 : f32
    %o1 = arith.constant 1 : i32
    %s1, %p1 = gpu.shuffle xor %v2, %o1, %w : f32
    %v1 = arith.addf %v2, %s1 : f32
    %warp = arith.divui %i, %c32 : index
    memref.store %v1, %y[%warp] : memref<32768xf32>
    gpu.return
  }
}
"""


def test_shuffle_steps_count_in_the_latency_term():
    ctx, _module, func = _func(WARP_SUM)
    with ctx:
        stats = roofline.analyse_kernel(func, (4096, 1, 1), (256, 1, 1), [4 << 20, 1 << 17])
    assert stats.shuffles == 5 and stats.barriers == 0 and stats.rounds == 1
    assert stats.fp == 5 * (1 << 20)
    est = roofline.estimate(stats)
    without = roofline.estimate(roofline.KernelStats(**{**stats.__dict__, "shuffles": 0}))
    # 4 waves of one round trip: latency-bound; each wave adds its 5 dependent steps.
    assert est["bound"] == without["bound"] == "latency" and est["waves"] == 4
    assert est["t_est"] - without["t_est"] == pytest.approx(4 * 5 * roofline.SHUFFLE_COST)
