"""Static roofline report of the CUDA kernels: an estimate from the generated code, no GPU.

    PYTHONPATH=. python benchmarks/roofline.py [--only NAME] [--out FILE]

Traces a set of graphs on the `lazy_mlir` device (cpu target, child process, fx graphs
dumped), compiles each fx graph for the cuda target (gpu stage, launch plan, PTX) and
assembles each kernel with `ptxas -v -arch=sm_90`. For every launch (and every copy and
memset of the plan) it prints the bytes the kernel must move, the flops it executes,
registers/spills/shared memory from ptxas, and an estimated fraction of the H100
roofline. Nothing here ran on a GPU: every time below is a model, stated in MODEL.

The kernel is read from its gpu-stage IR (the IR the PTX is made from): its index
arithmetic is evaluated for sampled threads (block 0, the last block and blocks between;
in each, thread 0, the last thread and threads between, each with its warp neighbour),
so loop trip counts, guards, tree steps and the address stride between neighbouring
threads come from the code, not from the graph.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# ---------------------------------------------------------------------------------------
# The machine model (H100 SXM5, sm_90). Stated in the report.

HBM_BW = 3.35e12  # bytes/s
L2_BW = 5.5e12  # bytes/s, assumed L2 -> SM bandwidth (published microbenchmarks ~5.5 TB/s)
FP32_PEAK = 67e12  # flop/s (SXM: 132 SMs x 128 FP32 lanes x 1.98 GHz x 2 for FMA)
FP32_ISSUE = FP32_PEAK / 2  # FP32 instructions/s (an add, mul or fma is one)
SMS = 132
MAX_THREADS_SM = 2048
REGS_SM = 65536
SMEM_SM = 228 * 1024
MAX_BLOCKS_SM = 32
DRAM_LATENCY = 0.7e-6  # s, one dependent global-memory round trip
BARRIER_COST = 0.03e-6  # s, one barrier + shared-memory step of a block
# s, one dependent warp-shuffle step (shfl.sync ~25 cycles + the combine, at 1.98 GHz)
SHUFFLE_COST = 0.015e-6
LAUNCH_GAP = 1.0e-6  # s, back-to-back launch gap per kernel
UNROLL_LIMIT = 16  # constant-trip loops up to this many iterations are assumed unrolled
SMEM_BW = SMS * 128 * 1.98e9  # bytes/s: 128 B/clk/SM at the 1.98 GHz boost clock
# Dense tensor-core peaks (H100 SXM5 datasheet, no sparsity): f16/bf16 inputs with f32
# accumulation 989.4 TFLOP/s (132 SMs x 4 tensor cores x 512 FMA/clk x 2 x 1.83 GHz),
# tf32 half of it.
TC_F16_PEAK = 989.4e12
TC_TF32_PEAK = TC_F16_PEAK / 2

MODEL = f"""\
Model (an estimate from the generated code; no GPU ran any of it). H100 SXM5:
HBM {HBM_BW / 1e12:.2f} TB/s, FP32 {FP32_PEAK / 1e12:.0f} TFLOP/s (FMA = 2 flops; an FP32
add/mul/fma issues at {FP32_ISSUE / 1e12:.1f} T instr/s), {SMS} SMs, {MAX_THREADS_SM}
threads / {REGS_SM} registers / {SMEM_SM // 1024} KiB shared memory per SM, assumed L2
bandwidth {L2_BW / 1e12:.1f} TB/s, shared memory {SMEM_BW / 1e12:.1f} TB/s (128 B/clk/SM),
DRAM round trip {DRAM_LATENCY * 1e6:.1f} us, barrier
step {BARRIER_COST * 1e6:.2f} us, warp shuffle step {SHUFFLE_COST * 1e6:.3f} us,
launch gap {LAUNCH_GAP * 1e6:.1f} us. Dense tensor cores: f16/bf16
{TC_F16_PEAK / 1e12:.1f} TFLOP/s, tf32 {TC_TF32_PEAK / 1e12:.1f} TFLOP/s.

Per kernel:
* bytes = compulsory HBM traffic: every buffer argument the kernel loads from counts its
  size once, every buffer it stores to (or updates atomically) once more (perfect
  caching: a lower bound of the real traffic).
* flops = floating-point arith/math ops executed (from the IR, per sampled thread,
  times the threads; a mul and an add are two flops and two instructions, an fma two
  flops and one instruction).
* sector bytes = the 32-byte sectors a warp touches per global access (from the address
  stride between neighbouring threads: stride 1 -> 4 sectors per 32 f32 loads, stride
  >= 8 -> 32 sectors, same address -> 1), summed over all accesses: L2 traffic.
* waves = threads / (132 x resident threads per SM), resident threads limited by
  registers and shared memory from ptxas, 2048 threads and 32 blocks per SM.
* rounds = dependent global round trips per thread: a loop with a global load costs
  one per iteration unless its trip count is constant and <= {UNROLL_LIMIT} and it has
  no barrier (assumed unrolled: straight-line code); the straight-line loads between
  two barriers cost one round together (independent loads are in flight at once).
* shared bytes = bytes loaded from and stored to workgroup memory by all threads.
* mma flops = 2 x M x N x K of every warp-level matrix op (`gpu.subgroup_mma_compute`,
  WMMA, one per warp: a thread's share is 1/32), counted apart from the FP32 flops;
  its fragment loads/stores count as shared bytes (M x N x element size per warp).
* t_mma (issue model of the mma instructions) = mma flops / the dense tensor-core rate
  of the instruction's input type: f16 m16n16k16 at the f16/bf16 peak, tf32 m16n16k8
  (bf16 matmuls: MLIR's WMMA fragments have no bf16, so bf16 is widened to tf32) at the
  tf32 peak. Optimistic: it assumes the synchronous warp-level path (wmma/mma.sync)
  issues at the full rate, which on H100 only the asynchronous wgmma reaches.
* t_est = max(bytes / HBM, sector bytes / L2, shared bytes / shared bandwidth,
  fp instrs / issue rate, t_mma, waves x (rounds x round trip + barriers x barrier
  step + shuffles x shuffle step)) + launch gap (a 64-bit value's two shuffles count
  as two steps).
* t_roof = max(bytes / HBM, flops / FP32 peak + mma flops / f16-bf16 tensor peak) (the
  roofline of an f16/bf16 matmul is the dense BF16 tensor-core peak whatever
  instruction the kernel uses); fraction = t_roof / t_est.
Copies count 2 x bytes, memsets 1 x bytes, each with a launch gap. Per graph, t_roof uses
the graph's own inputs and outputs (the bytes a single fused pass must move) and the
sum of kernel flops; the graph fraction is that over the sum of t_est.
"""


# ---------------------------------------------------------------------------------------
# Graphs.


def _mlp_block(x, w1, b1, w2, b2, gout):
    """Transformer MLP block, forward and backward (GELU, two linears)."""
    import torch.nn.functional as F

    params = [p.clone().requires_grad_(True) for p in (w1, b1, w2, b2)]
    w1, b1, w2, b2 = params
    xr = x.clone().requires_grad_(True)
    out = F.linear(F.gelu(F.linear(xr, w1, b1), approximate="tanh"), w2, b2)
    out.backward(gout)
    return [out.detach(), xr.grad, *[p.grad for p in params]]


def cases():
    import torch
    import torch.nn.functional as F

    r = torch.randn
    return {
        "elementwise_4M": (lambda x, y: torch.relu(x * 2.0 + y) - torch.exp(y) / 3.0,
                           lambda: (r(2048, 2048), r(2048, 2048))),
        "softmax_4096x1024": (lambda x: torch.softmax(x, dim=-1), lambda: (r(4096, 1024),)),
        "layer_norm_4096x1024": (lambda x, w, b: F.layer_norm(x, (1024,), w, b),
                                 lambda: (r(4096, 1024), r(1024), r(1024))),
        "row_sum_4096x1024": (lambda x: x.sum(-1), lambda: (r(4096, 1024),)),
        "matmul_1024": (lambda a, b: a @ b, lambda: (r(1024, 1024), r(1024, 1024))),
        "matmul_4096": (lambda a, b: a @ b, lambda: (r(4096, 4096), r(4096, 4096))),
        "matmul_bf16_4096": (lambda a, b: a @ b,
                             lambda: (r(4096, 4096, dtype=torch.bfloat16),
                                      r(4096, 4096, dtype=torch.bfloat16))),
        "mlp_block_fwd_bwd_2048x1024x4096": (
            _mlp_block, lambda: (r(2048, 1024), r(4096, 1024) * 0.03, r(4096),
                                 r(1024, 4096) * 0.015, r(1024), r(2048, 1024))),
    }


def _trace_child(root: str, only: str | None) -> None:
    import torch

    import lazymlir

    torch.manual_seed(0)
    for name, (fn, make) in cases().items():
        if only and only not in name:
            continue
        with lazymlir.dump_to(f"{root}/{name}"):
            inputs = [t.to("lazy_mlir") for t in make()]
            out = fn(*inputs)
            outs = [out] if isinstance(out, torch.Tensor) else list(out)
            lazymlir.mark_step()
            for o in outs:
                o.cpu()


# ---------------------------------------------------------------------------------------
# Static evaluation of one kernel.


@dataclass
class Counts:
    fp: float = 0.0  # float flops
    instrs: float = 0.0  # float instructions
    shared_bytes: float = 0.0
    load_bytes: float = 0.0  # useful global bytes loaded
    store_bytes: float = 0.0
    sector_bytes: float = 0.0  # per-thread share of the warp's sector bytes
    barriers: float = 0.0
    shuffles: float = 0.0  # gpu.shuffle ops executed by one thread
    rounds: float = 0.0
    mma_fp: float = 0.0  # warp-level matrix flops (a thread's 1/32 share)
    mma_time: float = 0.0  # the same at the instruction's tensor-core rate (s)
    loaded: set = field(default_factory=set)  # argument numbers read
    stored: set = field(default_factory=set)


_FP_MATH = ("math.",)
_FP_ARITH = {"arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.maximumf",
             "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.negf",
             "arith.remf"}


def _attr_int(op, name):
    from mlir import ir

    return ir.IntegerAttr(op.attributes[name]).value


def _memref_layout(t):
    from mlir import ir

    mt = ir.MemRefType(t)
    strides, offset = mt.get_strides_and_offset()
    elem = mt.element_type
    width = (ir.IntegerType(elem).width if isinstance(elem, ir.IntegerType)
             else {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}.get(str(elem), 32))
    shared = "workgroup" in str(mt.memory_space) if mt.memory_space is not None else False
    return strides, offset, max(1, width // 8), shared


class KernelEval:
    """Walk a gpu.func for one (block, thread), evaluating index arithmetic."""

    def __init__(self, func, grid, block):
        self.func = func
        self.grid, self.block = grid, block
        body = func.regions[0].blocks[0]
        self.args = {a: i for i, a in enumerate(body.arguments)}

    def run(self, bid: int, tid: int) -> tuple[Counts, dict]:
        self.env = {}
        self.ids = {"block_id": bid, "thread_id": tid}
        self.counts = Counts()
        self.addresses = {}  # access id -> element offset (for the coalescing stride)
        self.access_no = 0
        self._block(self.func.regions[0].blocks[0], 1.0, top=True)
        return self.counts, self.addresses

    def value(self, v):
        return self.env.get(v)

    def _dim(self, op):
        text = str(op.attributes["dimension"])
        return "xyz".index(text.rstrip(">").split()[-1])

    def _eval(self, op):  # noqa: C901 - one case per op kind
        from mlir import ir

        name = op.name
        ins = [self.value(o) for o in op.operands]
        if name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, ir.IntegerAttr) or isinstance(
                    ir.Attribute(attr), ir.IntegerAttr):
                try:
                    return ir.IntegerAttr(attr).value
                except (TypeError, ValueError):
                    return None
            return None
        if name in ("gpu.thread_id", "gpu.block_id"):
            d = self._dim(op)
            key = name.split(".")[1]
            return self.ids[key] if d == 0 else 0
        if name == "gpu.block_dim":
            return self.block[self._dim(op)]
        if name == "gpu.grid_dim":
            return self.grid[self._dim(op)]
        if name == "gpu.global_id":
            return (self.ids["block_id"] * self.block[0] + self.ids["thread_id"]
                    if self._dim(op) == 0 else 0)
        if any(x is None for x in ins):
            return None
        binary = {
            "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
            "arith.muli": lambda a, b: a * b,
            "arith.divui": lambda a, b: a // b if b else None,
            "arith.divsi": lambda a, b: int(a / b) if b else None,
            "arith.floordivsi": lambda a, b: a // b if b else None,
            "arith.ceildivsi": lambda a, b: -(-a // b) if b else None,
            "arith.remui": lambda a, b: a % b if b else None,
            "arith.remsi": lambda a, b: math.fmod(a, b) if b else None,
            "arith.minui": min, "arith.minsi": min, "arith.maxui": max, "arith.maxsi": max,
            "arith.andi": lambda a, b: a & b, "arith.ori": lambda a, b: a | b,
            "arith.shli": lambda a, b: a << b, "arith.shrui": lambda a, b: a >> b,
        }
        if name in binary and len(ins) == 2:
            return binary[name](*ins)
        if name in ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui",
                    "arith.trunci"):
            return ins[0]
        if name == "arith.cmpi":
            pred = _attr_int(op, "predicate")
            a, b = ins
            return [a == b, a != b, a < b, a <= b, a > b, a >= b, a < b, a <= b, a > b,
                    a >= b][pred]
        if name == "arith.select":
            return ins[1] if ins[0] else ins[2]
        return None

    def _access(self, op, memref_value, indices, weight, store, lanes=1):
        """`lanes` > 1: a vector access of that many consecutive elements."""
        strides, offset, elem, shared = _memref_layout(memref_value.type)
        nbytes = elem * lanes
        if shared:
            self.counts.shared_bytes += weight * nbytes
            return
        idx = [self.value(i) for i in indices]
        self.access_no += 1
        if all(i is not None for i in idx):
            self.addresses[self.access_no] = (offset + sum(i * s for i, s in zip(idx, strides)),
                                              elem, nbytes, weight)
        else:
            self.addresses[self.access_no] = (None, elem, nbytes, weight)
        arg = self.args.get(memref_value)
        if store:
            self.counts.store_bytes += weight * nbytes
            if arg is not None:
                self.counts.stored.add(arg)
        else:
            self.counts.load_bytes += weight * nbytes
            if arg is not None:
                self.counts.loaded.add(arg)

    def _block(self, block, weight, top=False) -> bool:
        """Count the ops of `block` executed `weight` times. Returns whether it has global
        loads not yet charged as rounds (straight-line ones, or in unrolled loops)."""
        from mlir import ir

        pending = False  # loads of the current top-level phase (or of this block)
        carried = False  # loads before a barrier inside a loop body: one round per trip
        for op in block.operations:
            op = op.operation
            name = op.name
            if name == "gpu.barrier":
                self.counts.barriers += weight
                if top and pending:
                    self.counts.rounds += 1
                carried |= pending and not top
                pending = False
                continue
            if name == "scf.for":
                lb, ub, st = (self.value(op.operands[i]) for i in range(3))
                trip = max(0, -(-(ub - lb) // st)) if None not in (lb, ub, st) else 1
                if not trip:
                    continue
                body = op.regions[0].blocks[0]
                self.env[body.arguments[0]] = lb
                before = self.counts.rounds
                inner = self._block(body, weight * trip)
                nested = self.counts.rounds - before
                # Unrolling puts a loop's loads in flight together, unless barriers
                # separate the iterations.
                unrolled = (all(_is_const(op.operands[i]) for i in range(3))
                            and trip <= UNROLL_LIMIT and not _has_barrier(op))
                if unrolled:
                    # Straight-line code after unrolling: its loads issue together.
                    self.counts.rounds = before + nested * trip
                    pending |= inner
                elif inner or nested:
                    self.counts.rounds = before + trip * (nested + (1 if inner else 0))
                continue
            if name == "scf.if":
                cond = self.value(op.operands[0])
                region = 0 if cond is None or cond else 1
                if len(op.regions[region].blocks):
                    pending |= self._block(op.regions[region].blocks[0], weight)
                continue
            if name == "memref.load":
                self._access(op, op.operands[0], list(op.operands)[1:], weight, False)
                if not _layout_shared(op.operands[0]):
                    pending = True
                continue
            if name == "memref.store":
                self._access(op, op.operands[1], list(op.operands)[2:], weight, True)
                continue
            if name == "vector.load":
                lanes = math.prod(ir.VectorType(op.results[0].type).shape)
                self._access(op, op.operands[0], list(op.operands)[1:], weight, False, lanes)
                if not _layout_shared(op.operands[0]):
                    pending = True
                self.env[op.results[0]] = None
                continue
            if name == "vector.store":
                lanes = math.prod(ir.VectorType(op.operands[0].type).shape)
                self._access(op, op.operands[1], list(op.operands)[2:], weight, True, lanes)
                continue
            if name == "gpu.shuffle":
                self.counts.shuffles += weight
                continue
            if name == "gpu.subgroup_mma_compute":
                flops, rate = _mma_flops(op)
                self.counts.mma_fp += weight * flops
                self.counts.mma_time += weight * flops / rate
                continue
            if name in ("gpu.subgroup_mma_load_matrix", "gpu.subgroup_mma_store_matrix"):
                frag = op.results[0] if op.results else op.operands[0]
                mem = op.operands[0] if op.results else op.operands[1]
                rows, cols, elem = _fragment(frag.type)
                if _layout_shared(mem):
                    self.counts.shared_bytes += weight * rows * cols * elem / 32
                continue
            if name == "memref.atomic_rmw":
                self._access(op, op.operands[1], list(op.operands)[2:], weight, True)
                self._access(op, op.operands[1], list(op.operands)[2:], weight, False)
                self.counts.fp += weight
                self.counts.instrs += weight
                continue
            if name in _FP_ARITH or name.startswith(_FP_MATH):
                self.counts.fp += weight * (2 if name == "math.fma" else 1)
                self.counts.instrs += weight
            if op.results and len(op.results) == 1:
                self.env[op.results[0]] = self._eval(op)
            for region in op.regions:  # other region ops: counted once
                for b in region.blocks:
                    pending |= self._block(b, weight)
        if top and pending:
            self.counts.rounds += 1
            pending = False
        return pending or carried


def _fragment(t) -> tuple[int, int, int]:
    """(rows, cols, element bytes) of `!gpu.mma_matrix<RxCxT, "K">`."""
    dims = str(t)[len("!gpu.mma_matrix<"):].split(",")[0]
    rows, cols, elem = dims.split("x", 2)
    return int(rows), int(cols), {"f16": 2, "bf16": 2, "f32": 4}.get(elem, 4)


def _mma_flops(op) -> tuple[float, float]:
    """(a thread's share of the op's flops, the instruction's dense rate in flop/s)."""
    rows, inner, elem = _fragment(op.operands[0].type)
    _, cols, _ = _fragment(op.operands[1].type)
    return 2 * rows * cols * inner / 32, TC_F16_PEAK if elem == 2 else TC_TF32_PEAK


def _has_barrier(op) -> bool:
    found = []

    def visit(o):
        if o.name == "gpu.barrier":
            found.append(o)
        return ir_walk_advance()

    op.walk(visit)
    return bool(found)


def ir_walk_advance():
    from mlir import ir

    return ir.WalkResult.ADVANCE


def _is_const(v) -> bool:
    owner = v.owner
    owner = getattr(owner, "operation", owner)
    return getattr(owner, "name", "") == "arith.constant"


def _layout_shared(v) -> bool:
    return _memref_layout(v.type)[3]


def _samples(n: int, k: int) -> list[int]:
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


@dataclass
class KernelStats:
    name: str
    grid: tuple
    block: tuple
    threads: int
    fp: float
    instrs: float
    shared_bytes: float
    bytes: float
    sector_bytes: float
    barriers: float
    rounds: float
    mma_fp: float = 0.0
    mma_time: float = 0.0
    ptxas: dict | None = None
    shuffles: float = 0.0


def analyse_kernel(func, grid, block, arg_bytes: list[int]) -> KernelStats:
    """Per-thread counts at sampled threads, scaled to the whole launch."""
    from mlir import ir

    name = ir.StringAttr(func.attributes["sym_name"]).value
    nblocks, nthreads = grid[0], block[0]
    ev = KernelEval(func, grid, block)
    total = Counts()
    blocks = _samples(nblocks, 6)
    threads = _samples(nthreads, 6)
    n = 0
    loaded, stored = set(), set()
    for b in blocks:
        for t in threads:
            c, addr = ev.run(b, t)
            neighbour = t + 1 if (t % 32) != 31 and t + 1 < nthreads else t - 1
            _, addr2 = ev.run(b, neighbour) if neighbour >= 0 else (None, {})
            sector = 0.0
            for key, (off, elem, nbytes, weight) in addr.items():
                other = addr2.get(key, (None,))[0]
                if off is None or other is None:
                    stride_bytes = 32  # unknown: assume uncoalesced
                else:
                    stride_bytes = abs(off - other) * elem
                # A warp touches 32 threads x max(size, min(stride, 32B)) bytes (size: a
                # 16-byte vector access moves 16); the same address for all 32 threads is
                # one sector.
                warp = 32 if stride_bytes == 0 else 32 * max(nbytes, min(stride_bytes, 32))
                sector += weight * warp / 32
            total.fp += c.fp
            total.mma_fp += c.mma_fp
            total.mma_time += c.mma_time
            total.instrs += c.instrs
            total.shared_bytes += c.shared_bytes
            total.load_bytes += c.load_bytes
            total.store_bytes += c.store_bytes
            total.sector_bytes += sector
            total.barriers = max(total.barriers, c.barriers)
            total.shuffles = max(total.shuffles, c.shuffles)
            total.rounds = max(total.rounds, c.rounds)
            loaded |= c.loaded
            stored |= c.stored
            n += 1
    scale = nblocks * nthreads / n
    footprint = sum(arg_bytes[i] for i in loaded if i < len(arg_bytes))
    footprint += sum(arg_bytes[i] for i in stored if i < len(arg_bytes))
    return KernelStats(name, grid, block, nblocks * nthreads, total.fp * scale,
                       total.instrs * scale, total.shared_bytes * scale, footprint,
                       total.sector_bytes * scale, total.barriers, total.rounds,
                       total.mma_fp * scale, total.mma_time * scale,
                       shuffles=total.shuffles)


# ---------------------------------------------------------------------------------------
# ptxas and the estimate.


def ptxas_info(ptx: str) -> dict[str, dict] | str:
    """kernel -> {regs, spill_stores, spill_loads, smem}, or the reason it is n/a."""
    exe = shutil.which("ptxas")
    if exe is None:
        return "ptxas not on PATH"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        res = subprocess.run([exe, "-v", "-arch=sm_90", str(src), "-o", str(Path(tmp) / "o")],
                             capture_output=True, text=True)
    if res.returncode:
        return "ptxas failed: " + res.stderr.strip().splitlines()[-1][:80]
    info, current = {}, None
    for line in res.stderr.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = info.setdefault(m.group(1), {"regs": 0, "spill_stores": 0,
                                                   "spill_loads": 0, "smem": 0})
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current["spill_stores"], current["spill_loads"] = int(m.group(1)), int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["regs"] = int(m.group(1))
        m = re.search(r"(\d+) bytes smem", line)
        if m:
            current["smem"] = int(m.group(1))
    return info


def resident_threads(block: int, info: dict | None) -> int:
    """Threads per SM: the tightest of threads, blocks, registers and shared memory."""
    per_sm = min(MAX_THREADS_SM // block, MAX_BLOCKS_SM)
    if info:
        regs = max(info["regs"], 1)
        regs_block = math.ceil(regs * block / 256) * 256  # allocation granularity (approx.)
        per_sm = min(per_sm, REGS_SM // regs_block)
        if info["smem"]:
            per_sm = min(per_sm, SMEM_SM // (info["smem"] + 1024))
    return max(per_sm, 1) * block


def estimate(k: KernelStats) -> dict:
    info = k.ptxas if isinstance(k.ptxas, dict) else None
    resident = SMS * resident_threads(k.block[0], info)
    waves = math.ceil(k.threads / resident)
    t_hbm = k.bytes / HBM_BW
    t_l2 = k.sector_bytes / L2_BW
    t_fp = k.instrs / FP32_ISSUE
    t_smem = k.shared_bytes / SMEM_BW
    t_lat = waves * (k.rounds * DRAM_LATENCY + k.barriers * BARRIER_COST
                     + k.shuffles * SHUFFLE_COST)
    t_mma = k.mma_time  # like t_fp: every SM's tensor cores busy, no wave quantization
    t_est = max(t_hbm, t_l2, t_smem, t_fp, t_mma, t_lat) + LAUNCH_GAP
    t_roof = max(k.bytes / HBM_BW, k.fp / FP32_PEAK + k.mma_fp / TC_F16_PEAK)
    bound = max((t_hbm, "hbm"), (t_l2, "l2"), (t_smem, "smem"), (t_fp, "fp32"),
                (t_mma, "tensor"), (t_lat, "latency"))[1]
    return {"waves": waves, "t_est": t_est, "t_roof": t_roof, "bound": bound,
            "fraction": t_roof / t_est}


# ---------------------------------------------------------------------------------------
# One graph.


def analyse_graph(fx_text: str) -> dict:
    from mlir import ir

    from lazymlir.lowering import stages
    from lazymlir.lowering.front import fx_graph
    from lazymlir.lowering.gpu import pipeline as gpu_pipeline, stages as gpu_stages, launch_plan

    graph = fx_graph.loads(fx_text)
    options = stages.Options(target="cuda")
    gpu_text = stages.run_stages(fx_text, options, start="fx", stop="gpu").text
    module = gpu_stages.parse(gpu_text)
    with module.context:
        plan = launch_plan.extract_plan(module)
        funcs = {}
        for index, gm in enumerate(gpu_pipeline.gpu_modules(module)):
            for op in gm.regions[0].blocks[0].operations:
                if op.operation.name == "gpu.func":
                    funcs[(index, ir.StringAttr(op.attributes["sym_name"]).value)] = op
        rows = []
        for op in plan.ops:
            if op.kind != "launch":
                if op.kind in ("copy", "memset"):
                    nbytes = op.nbytes * (2 if op.kind == "copy" else 1)
                    rows.append({"kind": op.kind, "name": op.kind, "bytes": nbytes,
                                 "t_roof": nbytes / HBM_BW,
                                 "t_est": nbytes / HBM_BW + LAUNCH_GAP})
                continue
            func = funcs[(op.module_index, op.kernel)]
            arg_bytes = [a.nbytes for a in op.args]
            stats = analyse_kernel(func, op.grid, op.block, arg_bytes)
            rows.append({"kind": "launch", "stats": stats, "module": op.module_index})
        ptx = gpu_pipeline.to_ptx(gpu_pipeline.to_nvvm(module))
    infos = [ptxas_info(text) for text in ptx.values()]
    for row in rows:
        if row["kind"] == "launch":
            info = infos[row["module"]]
            row["stats"].ptxas = (info.get(row["stats"].name, "kernel not in ptxas output")
                                  if isinstance(info, dict) else info)
            row.update(estimate(row["stats"]))
    io_bytes = 0
    for meta in graph["inputs"]:
        import torch

        dtype = fx_graph.dtype_from_name(meta["dtype"])
        io_bytes += math.prod(meta["shape"]) * torch.empty((), dtype=dtype).element_size()
    for shape, dtype in fx_graph.output_metas(graph):
        import torch

        io_bytes += math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    fp32 = sum(r["stats"].fp for r in rows if r["kind"] == "launch")
    mma = sum(r["stats"].mma_fp for r in rows if r["kind"] == "launch")
    flops = fp32 + mma
    t_roof = max(io_bytes / HBM_BW, fp32 / FP32_PEAK + mma / TC_F16_PEAK)
    t_est = sum(r["t_est"] for r in rows)
    return {"rows": rows, "io_bytes": io_bytes, "flops": flops, "t_roof": t_roof,
            "t_est": t_est, "fraction": t_roof / t_est,
            # Device memory of temporaries: all of them (what was live at the graph's end
            # when the plan freed them there) and the most live at once (freed after
            # their last use, launch_plan.free_after_last_use).
            "temp_bytes": sum(op.nbytes for op in plan.ops if op.kind == "alloc"),
            "peak_temp_bytes": launch_plan.peak_temporary_bytes(plan)}


# ---------------------------------------------------------------------------------------
# Report.


def _mb(x):
    return f"{x / 1e6:.1f}"


def _gf(x):
    return f"{x / 1e9:.2f}"


def _ptxas_cell(p) -> tuple[str, str, str]:
    if isinstance(p, dict):
        return str(p["regs"]), f"{p['spill_stores']}/{p['spill_loads']}", str(p["smem"])
    return (f"n/a ({p})",) * 3


def report(results: dict[str, list[dict]]) -> str:
    lines = ["| graph | kernel | grid x block | MB moved | GFLOP | regs | spills st/ld (B) "
             "| smem (B) | rounds / barriers / shuffles | bound | est. us | roofline us "
             "| fraction |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    summary = ["| graph | launches | copies+memsets | MB in+out | GFLOP | est. us "
               "| roofline us | fraction of roofline | temporaries MB (all / peak live) |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, graphs in results.items():
        for g, res in enumerate(graphs):
            label = name if len(graphs) == 1 else f"{name} [{g}]"
            for row in res["rows"]:
                if row["kind"] != "launch":
                    lines.append(f"| {label} | {row['kind']} | - | {_mb(row['bytes'])} | 0 | - "
                                 f"| - | - | - | hbm | {row['t_est'] * 1e6:.1f} | "
                                 f"{row['t_roof'] * 1e6:.1f} | "
                                 f"{row['t_roof'] / row['t_est']:.0%} |")
                    continue
                s = row["stats"]
                regs, spills, smem = _ptxas_cell(s.ptxas)
                lines.append(
                    f"| {label} | {s.name} | {s.grid[0]} x {s.block[0]} | {_mb(s.bytes)} | "
                    f"{_gf(s.fp + s.mma_fp)} | {regs} | {spills} | {smem} | "
                    f"{s.rounds:g} / {s.barriers:g} / {s.shuffles:g} | {row['bound']} | "
                    f"{row['t_est'] * 1e6:.1f} | {row['t_roof'] * 1e6:.1f} | "
                    f"{row['fraction']:.0%} |")
            launches = sum(r["kind"] == "launch" for r in res["rows"])
            other = len(res["rows"]) - launches
            summary.append(f"| {label} | {launches} | {other} | {_mb(res['io_bytes'])} | "
                           f"{_gf(res['flops'])} | {res['t_est'] * 1e6:.1f} | "
                           f"{res['t_roof'] * 1e6:.1f} | {res['fraction']:.0%} | "
                           f"{_mb(res['temp_bytes'])} / {_mb(res['peak_temp_bytes'])} |")
    return "\n".join(summary) + "\n\nPer kernel:\n\n" + "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="graphs whose name contains this")
    parser.add_argument("--out", help="default: benchmarks/results/<today>/"
                        "cuda-kernels-static-roofline.md")
    parser.add_argument("--trace-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trace_child:
        _trace_child(args.trace_child, args.only)
        return
    with tempfile.TemporaryDirectory(prefix="lazymlir-roofline-") as root:
        # A fresh disk cache: a cached graph is not compiled again, so it is not dumped.
        env = dict(os.environ, LAZYMLIR_TARGET="cpu", LAZYMLIR_FALLBACK="error",
                   LAZYMLIR_CACHE_DIR=str(Path(root) / "cache"))
        cmd = [sys.executable, __file__, "--trace-child", root]
        if args.only:
            cmd += ["--only", args.only]
        subprocess.run(cmd, env=env, check=True)
        results = {}
        for name in cases():
            if args.only and args.only not in name:
                continue
            fx_texts = [p.read_text() for p in sorted(Path(root, name).glob("*/00-fx.fx.json"))]
            results[name] = [analyse_graph(t) for t in fx_texts]
            print(f"{name}: {len(fx_texts)} graph(s)", file=sys.stderr)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    ptxas = shutil.which("ptxas")
    version = (subprocess.run([ptxas, "--version"], capture_output=True, text=True)
               .stdout.strip().splitlines()[-1] if ptxas else "ptxas not found")
    text = (f"# Static roofline report of the CUDA kernels (estimate, no GPU)\n\n"
            f"Generated {datetime.date.today()} at commit {commit} on {platform.node()} "
            f"with\n\n    {' '.join(shlex.quote(a) for a in ['python', *sys.argv])}\n\n"
            f"ptxas: {version} (`-arch=sm_90`). No kernel ran on a GPU: every time and "
            f"fraction below is the estimate of the model stated here.\n\n"
            f"{MODEL}\n{report(results)}")
    print(text)
    from benchmarks.results_dir import result_path

    out = Path(args.out) if args.out else result_path("cuda-kernels-static-roofline.md")
    out.write_text(text)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
